package testdns

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"
)

func resolver(s *Server, network string) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, s.Addr())
	}}
}

func TestServer(t *testing.T) {
	s := Start(t, map[string][]netip.Addr{
		"API.Example.TEST.": {netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, network := range []string{"udp", "tcp"} {
		got, err := resolver(s, network).LookupNetIP(ctx, "ip", "api.example.test")
		if err != nil {
			t.Fatalf("%s: %v", network, err)
		}
		if len(got) != 2 {
			t.Fatalf("%s: got %v, want two answers", network, got)
		}
	}
	if n := s.Queries("api.example.test."); n != 4 {
		t.Errorf("Queries = %d, want 4 (A+AAAA over UDP and TCP)", n)
	}

	_, err := resolver(s, "udp").LookupNetIP(ctx, "ip", "unknown.example.test")
	var de *net.DNSError
	if !errors.As(err, &de) || !de.IsNotFound {
		t.Fatalf("unknown name: err = %v, want not found", err)
	}

	s.Set("api.example.test", []netip.Addr{netip.MustParseAddr("198.51.100.7")})
	got, err := resolver(s, "udp").LookupNetIP(ctx, "ip4", "api.example.test")
	if err != nil || len(got) != 1 || got[0] != netip.MustParseAddr("198.51.100.7") {
		t.Fatalf("after Set: %v, %v", got, err)
	}
	s.Set("api.example.test", nil)
	if _, err := resolver(s, "udp").LookupNetIP(ctx, "ip", "api.example.test"); err == nil {
		t.Fatal("after Set(nil): want an error")
	}
}
