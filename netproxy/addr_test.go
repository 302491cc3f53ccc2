package netproxy

import (
	"errors"
	"log/slog"
	"net/netip"
	"testing"
)

func TestSpecial(t *testing.T) {
	tests := []struct {
		addr    string
		special bool
		class   string
	}{
		{"0.0.0.0", true, "unspecified"},
		{"0.1.2.3", true, "unspecified"},
		{"::", true, "unspecified"},
		{"127.0.0.1", true, "loopback"},
		{"127.255.0.9", true, "loopback"},
		{"::1", true, "loopback"},
		{"10.0.0.1", true, "private"},
		{"172.16.0.1", true, "private"},
		{"172.31.255.255", true, "private"},
		{"192.168.1.1", true, "private"},
		{"fc00::1", true, "private"},
		{"fd12::1", true, "private"},
		{"fd00:ec2::254", true, "metadata"},
		{"169.254.169.254", true, "metadata"},
		{"169.254.1.1", true, "link-local"},
		{"fe80::1", true, "link-local"},
		{"100.64.0.1", true, "cgnat"},
		{"100.127.255.255", true, "cgnat"},
		{"224.0.0.1", true, "multicast"},
		{"ff02::1", true, "multicast"},
		{"255.255.255.255", true, "broadcast"},
		{"240.0.0.1", true, "reserved"},
		{"192.0.0.8", true, "reserved"},
		{"198.18.0.1", true, "benchmarking"},
		{"198.19.255.1", true, "benchmarking"},
		{"::ffff:127.0.0.1", true, "loopback"},
		{"::ffff:169.254.169.254", true, "metadata"},
		{"64:ff9b::7f00:1", true, "nat64/loopback"},
		{"64:ff9b::a00:1", true, "nat64/private"},
		{"2002:7f00:1::", true, "6to4/loopback"},
		{"2002:a9fe:a9fe::1", true, "6to4/metadata"},
		{"2001::1", true, "teredo"},
		{"::7f00:1", true, "ipv4-compatible"},
		// Ordinary addresses.
		{"192.0.2.1", false, ""},
		{"198.51.100.1", false, ""},
		{"203.0.113.1", false, ""},
		{"8.8.8.8", false, ""},
		{"172.32.0.1", false, ""},
		{"100.128.0.1", false, ""},
		{"2606:4700::1111", false, ""},
		{"2001:db8::1", false, ""},
		{"::ffff:8.8.8.8", false, ""},
		{"64:ff9b::808:808", false, ""},
		{"2002:808:808::1", false, ""},
	}
	for _, tt := range tests {
		special, class := Special(netip.MustParseAddr(tt.addr))
		if special != tt.special || class != tt.class {
			t.Errorf("Special(%s) = %v, %q; want %v, %q", tt.addr, special, class, tt.special, tt.class)
		}
	}
}

func TestHostAddrsClassify(t *testing.T) {
	calls := 0
	fail := false
	p := New(Config{Logger: slog.New(slog.DiscardHandler), HostAddrs: func() ([]netip.Addr, error) {
		calls++
		if fail {
			return nil, errors.New("boom")
		}
		return []netip.Addr{netip.MustParseAddr("::ffff:192.0.2.10"), netip.MustParseAddr("2001:db8::10")}, nil
	}})
	for _, a := range []string{"192.0.2.10", "2001:db8::10", "::ffff:192.0.2.10"} {
		if special, class := p.classify(netip.MustParseAddr(a)); !special || class != "host" {
			t.Errorf("classify(%s) = %v, %q; want a host address", a, special, class)
		}
	}
	// Control: another documentation address is ordinary.
	if special, _ := p.classify(netip.MustParseAddr("192.0.2.11")); special {
		t.Error("192.0.2.11 classified special")
	}
	if calls != 1 {
		t.Errorf("HostAddrs called %d times, want 1 (cached)", calls)
	}

	// Without any answer the proxy fails closed.
	p2 := New(Config{Logger: slog.New(slog.DiscardHandler), HostAddrs: func() ([]netip.Addr, error) { return nil, errors.New("boom") }})
	if special, _ := p2.classify(netip.MustParseAddr("192.0.2.11")); !special {
		t.Error("unknown host addresses: want every address special")
	}
}

func TestNormalizeHost(t *testing.T) {
	tests := []struct{ in, want string }{
		{"API.Moat.TEST.", "api.moat.test"},
		{"[::1]", "::1"},
		{"::FFFF:127.0.0.1", "127.0.0.1"},
		{"[::ffff:7f00:1]", "127.0.0.1"},
		{"2001:DB8::0:1", "2001:db8::1"},
		{"0x7f.example.com", "0x7f.example.com"},
		{"123.example.com", "123.example.com"},
	}
	for _, tt := range tests {
		got, _, err := normalizeHost(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("normalizeHost(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "a b", "exa mple.com", "a..b", "fe80::1%eth0", "x/y",
		// inet_aton forms the policy reads as addresses, never names.
		"127.1", "0x7f000001", "0X7F.1", "2130706433", "0177.0.0.1", "10.0.0.256"} {
		if _, _, err := normalizeHost(bad); err == nil {
			t.Errorf("normalizeHost(%q): want an error", bad)
		}
	}
}

func TestSameHostPort(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"example.com", "example.com:80", true},
		{"EXAMPLE.com.", "example.com", true},
		{"example.com:8080", "example.com:8080", true},
		{"example.com:8080", "example.com", false},
		{"evil.com", "example.com", false},
		{"[::1]:80", "[::1]", true},
	}
	for _, tt := range tests {
		if got := sameHostPort(tt.a, tt.b, 80); got != tt.want {
			t.Errorf("sameHostPort(%q, %q) = %v", tt.a, tt.b, got)
		}
	}
}
