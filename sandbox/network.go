package sandbox

import (
	"fmt"
	"net"
)

// NetMode is how much network a sandbox has.
type NetMode string

const (
	// NetNone leaves the sandbox a network namespace with loopback only:
	// no route anywhere. The default.
	NetNone NetMode = "none"
	// NetProxy gives the sandbox exactly one way out: a listener of the
	// host's egress proxy inside its network namespace (ProxyPort on its
	// loopback). The namespace has no other interface, so every other
	// destination, protocol and address family is unreachable.
	NetProxy NetMode = "proxy"
	// NetOpen shares the host's network namespace: whatever the host can
	// reach. Only an operator's managed policy can permit it.
	NetOpen NetMode = "open"
)

// ProxyPort is the port of the egress proxy inside a NetProxy sandbox, on
// 127.0.0.1 and ::1. It speaks HTTP (forward and CONNECT) and SOCKS5.
const ProxyPort = 3128

// ParseNetMode accepts "none", "proxy", "open" and "" (none).
func ParseNetMode(s string) (NetMode, error) {
	switch m := NetMode(s); m {
	case "":
		return NetNone, nil
	case NetNone, NetProxy, NetOpen:
		return m, nil
	}
	return "", fmt.Errorf("%w: unknown network mode %q (want none, proxy or open)", ErrInvalidSpec, s)
}

// Network is a sandbox's network.
type Network struct {
	// Mode is none (default), proxy or open.
	Mode NetMode `json:"mode,omitempty"`
	// Egress serves the proxy listener of a NetProxy sandbox; required
	// for NetProxy, unused otherwise.
	Egress Egress `json:"-"`
}

// Egress is the host side of a NetProxy sandbox: moat's egress proxy for
// that one sandbox, deciding with its policy.
type Egress interface {
	// Serve answers the connections of ln, a listener inside the
	// sandbox's network namespace, until Close. The runtime calls it
	// once, on its own goroutine, before any process of the sandbox runs.
	Serve(sandboxID string, ln net.Listener) error
	// Close stops serving and closes the sandbox's open connections. The
	// runtime calls it when the sandbox is shut down.
	Close() error
}

// ProxyEnv is the environment a NetProxy sandbox's processes get so that
// ordinary tools (curl, wget, git, pip, npm, Python, Go, Node) reach the
// egress proxy without being told: the proxy variables in upper and lower
// case and the settings pip and npm read. A tool that ignores them simply
// fails to connect; there is no other route.
func ProxyEnv() []string {
	http := fmt.Sprintf("http://127.0.0.1:%d", ProxyPort)
	socks := fmt.Sprintf("socks5h://127.0.0.1:%d", ProxyPort)
	noProxy := "localhost,127.0.0.1,::1"
	return []string{
		"HTTP_PROXY=" + http, "http_proxy=" + http,
		"HTTPS_PROXY=" + http, "https_proxy=" + http,
		"ALL_PROXY=" + socks, "all_proxy=" + socks,
		"NO_PROXY=" + noProxy, "no_proxy=" + noProxy,
		"PIP_PROXY=" + http,
		"npm_config_proxy=" + http, "npm_config_https_proxy=" + http,
		"MOAT_PROXY=" + http,
	}
}
