//go:build linux

package escape

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/moat-sandbox/moat/internal/testutil"
)

// socketCase is one socket() attempt that the sandbox must refuse.
type socketCase struct{ domain, typ, proto string }

func (c socketCase) attempt() attempt { return A("socket", c.domain, c.typ, c.proto) }

// TestSockets: docs/THREAT-MODEL.md "sockets" row. Packet, raw, vsock, alg, key and
// other exotic families, netlink beyond NETLINK_ROUTE, the host's Unix
// sockets and its abstract Unix sockets are denied or unreachable.
func TestSockets(t *testing.T) {
	testutil.RequireRoot(t)
	t.Run("families", func(t *testing.T) {
		cases := []socketCase{
			{"packet", "raw", "eth_p_all"},
			{"packet", "dgram", "eth_p_all"},
			{"0x100000011", "raw", "eth_p_all"}, // AF_PACKET with junk in the high half
			{"inet", "raw", "icmp"},
			{"inet", "raw", "255"},       // IPPROTO_RAW
			{"inet", "0x803", "icmp"},    // SOCK_RAW|SOCK_NONBLOCK
			{"inet", "0x80003", "icmp"},  // SOCK_RAW|SOCK_CLOEXEC
			{"inet", "packet", "0"},      // SOCK_PACKET
			{"inet6", "raw", "58"},       // ICMPv6
			{"inet6", "raw", "255"},      // IPPROTO_RAW
			{"vsock", "stream", "0"},     // the hypervisor's sockets
			{"vsock", "dgram", "0"},      //
			{"alg", "seqpacket", "0"},    // kernel crypto API
			{"netlink", "raw", "audit"},  //
			{"netlink", "raw", "uevent"}, //
			{"netlink", "raw", "sock_diag"},
			{"netlink", "raw", "generic"},
			{"netlink", "raw", "xfrm"},
			{"netlink", "raw", "netfilter"},
			{"netlink", "raw", "selinux"},
			{"netlink", "raw", "connector"},
			{"key", "raw", "2"}, // PF_KEY_V2
			{"bluetooth", "raw", "0"},
			{"can", "raw", "1"},
			{"tipc", "rdm", "0"},
			{"rds", "seqpacket", "0"},
			{"xdp", "raw", "0"},
			{"smc", "stream", "0"},
			{"kcm", "dgram", "0"},
			{"qipcrtr", "dgram", "0"},
			{"x25", "seqpacket", "0"},
			{"appletalk", "dgram", "0"},
		}
		atts := make([]attempt, len(cases))
		for i, c := range cases {
			atts[i] = c.attempt()
		}
		// What a sandbox does need keeps working.
		allowed := []attempt{
			A("socket", "unix", "stream", "0"), A("socket", "inet", "stream", "tcp"),
			A("socket", "inet6", "dgram", "udp"), A("socket", "netlink", "raw", "route"),
			A("socketpair", "unix", "stream"),
		}
		in := inside(t, nil, append(atts, allowed...)...)
		// Control: root of a throwaway user and network namespace (so
		// with CAP_NET_RAW and CAP_NET_ADMIN over a network of its own)
		// creates the same sockets, unless the host kernel lacks the
		// family, in which case the control is only logged.
		out := outside(t, inUserNS, atts...)
		unsupported := map[string]bool{"EAFNOSUPPORT": true, "EPROTONOSUPPORT": true,
			"ESOCKTNOSUPPORT": true, "EINVAL": true, "EPROTOTYPE": true, "ENODEV": true}
		for i, c := range cases {
			denied(t, in[i], "EPERM", "EAFNOSUPPORT", "EPROTONOSUPPORT")
			switch {
			case out[i].OK:
			case unsupported[out[i].Errno]:
				t.Logf("%v: the host kernel has no such socket (%s): the control is not meaningful here", c, out[i].Errno)
			default:
				t.Errorf("control: %s refused outside: %s", in[i], out[i])
			}
		}
		for _, o := range in[len(cases):] {
			works(t, o)
		}
	})

	t.Run("host Unix sockets", func(t *testing.T) {
		dir := openDir(t)
		sock := filepath.Join(dir, "host.sock")
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		if err := os.Chmod(sock, 0o777); err != nil {
			t.Fatal(err)
		}
		paths := []string{sock, "/run/dbus/system_bus_socket", "/var/run/dbus/system_bus_socket",
			"/run/docker.sock", "/var/run/docker.sock", "/run/containerd/containerd.sock",
			"/run/systemd/private", "/run/systemd/journal/stdout", "/run/systemd/notify",
			"/run/user/0/bus", "/run/user/1000/bus", "/tmp/.X11-unix/X0", "/run/podman/podman.sock",
			"/run/moat/moat.sock", "/var/run/moat/moat.sock"}
		if s := os.Getenv("SSH_AUTH_SOCK"); s != "" {
			paths = append(paths, s)
		}
		for _, pat := range []string{"/run/*.sock", "/var/run/*.sock", "/run/*/*.sock", "/tmp/*.sock"} {
			m, _ := filepath.Glob(pat)
			for _, p := range m {
				if !slices.Contains(paths, p) {
					paths = append(paths, p)
				}
			}
		}
		var atts []attempt
		for _, p := range paths {
			atts = append(atts, A("connect-unix", p))
		}
		// Also with the directory holding the socket as the workspace's
		// neighbour: the workspace is a sibling, not a parent.
		ws := filepath.Join(dir, "ws")
		mkdirs(t, ws)
		atts = append(atts, A("connect-unix", "/workspace/../host.sock"))
		for _, o := range inside(t, []string{"-w", ws}, atts...) {
			denied(t, o, "ENOENT", "ECONNREFUSED", "EACCES")
		}
		var present []string
		for _, p := range paths[1:] {
			if _, err := os.Stat(p); err == nil {
				present = append(present, p)
			}
		}
		t.Logf("host sockets present and checked: %v", present)
		// Control: nobody connects to the test's socket on the host.
		works(t, outside(t, asNobody, A("connect-unix", sock))[0])
	})

	t.Run("host abstract Unix socket", func(t *testing.T) {
		name := "moat-escape-test-" + strconv.Itoa(os.Getpid())
		ln, err := net.Listen("unix", "@"+name)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		denied(t, inside(t, nil, A("connect-unix", "@"+name))[0], "ECONNREFUSED", "EPERM")
		// Control: a process outside, in the host's network namespace,
		// connects (abstract sockets have no permissions at all).
		works(t, outside(t, asNobody, A("connect-unix", "@"+name))[0])
	})
}
