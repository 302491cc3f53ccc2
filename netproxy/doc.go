// Package netproxy is moat's egress proxy: the only way out of a sandbox
// whose network mode is "proxy".
//
// Such a sandbox's network namespace has no interface but loopback. The
// runtime creates a TCP listener inside that namespace (port 3128 on all of
// the namespace's addresses) and hands it to the host-side daemon, which
// serves it with an [Endpoint] of this package. Each sandbox therefore has
// its own listener, and the listener identifies the sandbox: there is no
// proxy authentication. Outbound connections are dialled from the host.
//
// One listener port speaks three protocols, told apart by the first byte a
// client sends:
//
//   - 0x05: SOCKS5 (RFC 1928), no authentication, CONNECT only, with names
//     resolved by the proxy (socks5h semantics).
//   - 0x04: SOCKS4, which is not supported; the connection is closed.
//   - anything else: HTTP/1.x, either a forward-proxy request in absolute
//     form (GET http://host/path) or a CONNECT tunnel.
//
// Every connection and every HTTP request is judged by the sandbox's
// [Policy] (Policy.Decide), so a policy change applies to running sandboxes
// at once. A name is then resolved by the proxy itself, and every address it
// resolves to is checked against the proxy's table of internal addresses
// ([Special] plus the host's own addresses) and by Policy.Addr: if any answer
// is refused the whole name is refused, which defeats DNS rebinding. The
// proxy dials exactly the addresses it checked and never looks the name up a
// second time. Tunnels (CONNECT and SOCKS5) inspect the client's TLS
// ClientHello, when there is one, and refuse a server name (SNI) that
// differs from the name the tunnel was opened for.
//
// Each refusal is reported to an HTTP client with a status, the header
// X-Proxy-Error carrying a code, Content-Type text/plain and a one-line body
// "moat egress proxy: <reason>". The same code is the Code of the "connect"
// [Event] that records the refusal:
//
//	code                  HTTP status  SOCKS5 reply  meaning
//	denied                403          0x02          the policy said no
//	blocked-address       403          0x02          a resolved or literal address is internal or refused by Policy.Addr
//	host-mismatch         403          -             plain HTTP: the Host header disagrees with the URL's host
//	sni-mismatch          -            -             TLS SNI differs from the tunnel's name (TLS alert, close)
//	bad-client-hello      -            -             the tunnel's TLS ClientHello cannot be parsed (close)
//	dns-failure           502          0x04          no such name, or the resolver failed
//	connect-failed        502          0x05/06/01    the upstream dial failed (refused/timed out/other)
//	bad-request           400          0x07/08/01    not an absolute-form http:// request, malformed request
//	too-many-connections  -            -             the endpoint's MaxConns is reached (close)
//
// Events ([Event]) record every resolution ("dns"), every decision
// ("connect", allow or deny) and every finished tunnel or forwarded request
// ("close", with byte counts and duration). Request headers and bodies are
// never logged nor emitted.
//
// Tunnels relay bytes through the proxy's memory, in reads and writes of up
// to 256 KiB, not with splice(2): on a sandbox's loopback the copies cost
// less in all than spliced page fragments cost the receiving process. A
// tunnel borrows a buffer only while bytes are in hand, never while idle.
//
// Plain HTTP requests are read by the proxy's own HTTP/1.x loop rather than
// by net/http.Server, because the server discards the Host header of an
// absolute-form request, and the proxy must compare it with the URL. They are
// forwarded through a per-endpoint http.Transport, so a pooled upstream
// connection is never shared between sandboxes. Protocol upgrades
// (WebSocket over plain HTTP) are not forwarded; use CONNECT.
package netproxy
