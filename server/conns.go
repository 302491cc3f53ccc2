package server

import (
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/api"
)

// DefaultMaxConnsPerClient is the default of LimitConns's cap: open
// connections from one client address (an IPv4 address or an IPv6 /64).
// Every local client shares 127.0.0.1, hence a cap well above what one
// agent holds (a connection per streamed exec or followed output).
const DefaultMaxConnsPerClient = 1024

// connRefusal is what a connection over the cap gets before it is closed.
var connRefusal = func() []byte {
	body, _ := json.Marshal(api.Exhausted(api.ResourceConnections, "too many open connections from this address"))
	return fmt.Appendf(nil, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"+
		"Connection: close\r\nRetry-After: 1\r\nContent-Length: %d\r\n\r\n%s\n", len(body)+1, body)
}()

// ConnLimiter is a listener that caps the open connections of each client
// address: a connection over the cap is answered 503 resource_exhausted
// (resource "connections") and closed at once, without reading it.
type ConnLimiter struct {
	net.Listener
	max int
	// OnRefuse, if set, is called after a connection was refused
	// (metrics, logs, tests).
	OnRefuse func(source string)
	// OnClose, if set, is called after an accepted connection has been
	// closed (tests).
	OnClose func(source string)

	mu   sync.Mutex
	open map[string]int
}

// LimitConns wraps ln so that each client address holds at most max open
// connections; max <= 0 means no cap (ln is returned as is inside).
func LimitConns(ln net.Listener, max int) *ConnLimiter {
	return &ConnLimiter{Listener: ln, max: max, open: map[string]int{}}
}

// Accept returns the next connection within its address's cap.
func (l *ConnLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil || l.max <= 0 {
			return c, err
		}
		key := sourceKey(c.RemoteAddr().String())
		l.mu.Lock()
		if l.open[key] >= l.max {
			l.mu.Unlock()
			_ = c.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = c.Write(connRefusal)
			_ = c.Close()
			if l.OnRefuse != nil {
				l.OnRefuse(key)
			}
			continue
		}
		l.open[key]++
		l.mu.Unlock()
		return &limitedConn{Conn: c, l: l, key: key}, nil
	}
}

// Open is the number of open connections of a client address.
func (l *ConnLimiter) Open(remote string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open[sourceKey(remote)]
}

func (l *ConnLimiter) release(key string) {
	l.mu.Lock()
	if l.open[key]--; l.open[key] <= 0 {
		delete(l.open, key)
	}
	l.mu.Unlock()
	if l.OnClose != nil {
		l.OnClose(key)
	}
}

type limitedConn struct {
	net.Conn
	l    *ConnLimiter
	key  string
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.key) })
	return err
}

// ConnRefused counts a connection a ConnLimiter refused, in
// moat_denials_total{reason="connections"}.
func (s *Service) ConnRefused(source string) {
	s.metrics.denied("connections")
	s.log.Debug("refused a connection: too many open from its address", "source", source)
}
