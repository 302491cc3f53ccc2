// Package testdns is a tiny authoritative DNS server for tests. It listens
// on 127.0.0.1 over UDP and TCP (same port), answers A and AAAA queries from
// a map of names to addresses, answers NXDOMAIN for unknown names, counts
// the queries it sees per name, and lets a test change answers while it
// runs. Point a resolver at it with net.Resolver{PreferGo: true, Dial: ...}.
package testdns

import (
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// Server is a running test DNS server.
type Server struct {
	udp  net.PacketConn
	tcp  net.Listener
	addr string
	wg   sync.WaitGroup

	mu      sync.Mutex
	records map[string][]netip.Addr
	queries map[string]int
	conns   map[net.Conn]struct{}
	closed  bool
}

// Start starts a server answering from records (names are case-insensitive,
// with or without a trailing dot) and stops it when the test ends.
func Start(t testing.TB, records map[string][]netip.Addr) *Server {
	t.Helper()
	s := &Server{
		records: make(map[string][]netip.Addr),
		queries: make(map[string]int),
		conns:   make(map[net.Conn]struct{}),
	}
	for name, addrs := range records {
		s.records[canon(name)] = append([]netip.Addr(nil), addrs...)
	}
	var err error
	for range 20 {
		s.udp, err = net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("testdns: %v", err)
		}
		s.addr = s.udp.LocalAddr().String()
		s.tcp, err = net.Listen("tcp", s.addr)
		if err == nil {
			break
		}
		s.udp.Close()
	}
	if err != nil {
		t.Fatalf("testdns: no port free for both UDP and TCP: %v", err)
	}
	s.wg.Add(2)
	go s.serveUDP()
	go s.serveTCP()
	t.Cleanup(s.close)
	return s
}

// Addr returns the server's "127.0.0.1:port".
func (s *Server) Addr() string { return s.addr }

// Queries returns how many queries (of any type) the server has seen for
// name. A resolver's "ip" lookup usually asks twice: A and AAAA.
func (s *Server) Queries(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries[canon(name)]
}

// Set replaces the answers for name; nil or empty makes it unknown.
func (s *Server) Set(name string, addrs []netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(addrs) == 0 {
		delete(s.records, canon(name))
		return
	}
	s.records[canon(name)] = append([]netip.Addr(nil), addrs...)
}

func canon(name string) string {
	return strings.TrimSuffix(strings.ToLower(name), ".")
}

func (s *Server) close() {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.udp.Close()
	s.tcp.Close()
	s.wg.Wait()
}

func (s *Server) serveUDP() {
	defer s.wg.Done()
	buf := make([]byte, 65535)
	for {
		n, from, err := s.udp.ReadFrom(buf)
		if err != nil {
			return
		}
		if resp, ok := s.answer(buf[:n], 512); ok {
			s.udp.WriteTo(resp, from)
		}
	}
}

func (s *Server) serveTCP() {
	defer s.wg.Done()
	for {
		c, err := s.tcp.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serveConn(c)
	}
}

func (s *Server) serveConn(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	for {
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return
		}
		msg := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(c, msg); err != nil {
			return
		}
		resp, ok := s.answer(msg, 65535)
		if !ok {
			return
		}
		out := binary.BigEndian.AppendUint16(nil, uint16(len(resp)))
		if _, err := c.Write(append(out, resp...)); err != nil {
			return
		}
	}
}

// answer builds the response to one query message.
func (s *Server) answer(msg []byte, limit int) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	name := canon(q.Name.String())
	s.mu.Lock()
	s.queries[name]++
	addrs, known := s.records[name]
	addrs = append([]netip.Addr(nil), addrs...)
	s.mu.Unlock()

	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true,
		RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	if !known {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, false
	}
	if err := b.Question(q); err != nil {
		return nil, false
	}
	if err := b.StartAnswers(); err != nil {
		return nil, false
	}
	rrh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 0}
	for _, a := range addrs {
		var err error
		switch {
		case q.Type == dnsmessage.TypeA && a.Is4():
			rrh.Type = dnsmessage.TypeA
			err = b.AResource(rrh, dnsmessage.AResource{A: a.As4()})
		case q.Type == dnsmessage.TypeAAAA && a.Is6():
			rrh.Type = dnsmessage.TypeAAAA
			err = b.AAAAResource(rrh, dnsmessage.AAAAResource{AAAA: a.As16()})
		}
		if err != nil {
			return nil, false
		}
	}
	resp, err := b.Finish()
	if err != nil {
		return nil, false
	}
	if len(resp) > limit {
		// Truncated: the client retries over TCP.
		rh.Truncated = true
		tb := dnsmessage.NewBuilder(nil, rh)
		tb.StartQuestions()
		tb.Question(q)
		if resp, err = tb.Finish(); err != nil {
			return nil, false
		}
	}
	return resp, true
}
