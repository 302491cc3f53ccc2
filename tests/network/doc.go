// Package network holds the end-to-end tests of moat's network modes: real
// clients (curl, wget, Python, git, pip, npm) reaching test servers through
// the egress proxy of `moat run --net proxy`; the proxy's refusals (a name
// off the allowlist, a deny entry, DNS rebinding to loopback, private,
// metadata and the host's own addresses, a Host header or a TLS server name
// that disagrees with the destination), each beside a control where the
// same request is allowed and works; attempts to get around the proxy
// (direct TCP, IPv6, UDP, DNS), each failing inside the sandbox while the
// same attempt works outside it; and the daemon's side: hot-reloaded
// network rules, ask rules answered through approvals, the audit tape, and
// what a caller may and may not ask for at create.
//
// Names are answered by an in-process DNS server (internal/testdns) that
// the proxy is pointed at with an operator config ([network] dns_server);
// the servers listen on the host's loopback and are reached only because
// the tests allow 127.0.0.0/8 explicitly. Nothing outside temporary
// directories is written.
//
// The tests need root (they run moat) and are skipped without it, except
// under CI=true where they fail instead.
//
// The suite tests the Linux sandbox: its files build on Linux only.
package network
