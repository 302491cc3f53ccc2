package linux

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/sandbox"
)

// loopbackGSO returns lo's IPv6 and IPv4 GSO maximum sizes in the calling
// thread's network namespace (RTM_GETLINK).
func loopbackGSO() (v6, v4 uint32, err error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return 0, 0, err
	}
	defer unix.Close(fd)
	req := make([]byte, unix.SizeofNlMsghdr+unix.SizeofIfInfomsg)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.RTM_GETLINK)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(req[unix.SizeofNlMsghdr+4:], loopbackIndex)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, 0, err
	}
	buf := make([]byte, 1<<16)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return 0, 0, err
	}
	if n < unix.SizeofNlMsghdr || ne.Uint16(buf[4:]) != unix.RTM_NEWLINK {
		return 0, 0, fmt.Errorf("unexpected answer (%d bytes, type %d)", n, ne.Uint16(buf[4:]))
	}
	attrs := buf[unix.SizeofNlMsghdr+unix.SizeofIfInfomsg : min(n, int(ne.Uint32(buf)))]
	for len(attrs) >= unix.SizeofRtAttr {
		l, typ := int(ne.Uint16(attrs)), ne.Uint16(attrs[2:])
		if l < unix.SizeofRtAttr || l > len(attrs) {
			break
		}
		switch typ {
		case unix.IFLA_GSO_MAX_SIZE:
			v6 = ne.Uint32(attrs[4:])
		case unix.IFLA_GSO_IPV4_MAX_SIZE:
			v4 = ne.Uint32(attrs[4:])
		}
		attrs = attrs[min(len(attrs), (l+unix.RTA_ALIGNTO-1)&^(unix.RTA_ALIGNTO-1)):]
	}
	return v6, v4, nil
}

// inNetns runs fn on a thread of its own in the network namespace at
// path, or in a new one if path is "".
func inNetns(t *testing.T, path string, fn func()) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		var err error
		if path == "" {
			err = unix.Unshare(unix.CLONE_NEWNET)
		} else {
			var f *os.File
			if f, err = os.Open(path); err == nil {
				err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
				f.Close()
			}
		}
		if err == nil {
			fn()
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		t.Fatalf("enter network namespace %q: %v", path, err)
	}
}

// TestRaiseLoopbackGSO: in a fresh network namespace lo sends segments
// of at most 64 KiB (control); raiseLoopbackGSO raises both GSO sizes to
// the kernel's maximum.
func TestRaiseLoopbackGSO(t *testing.T) {
	testutil.RequireRoot(t)
	var (
		before, after [2]uint32
		rerr, err     error
	)
	inNetns(t, "", func() {
		if before[0], before[1], err = loopbackGSO(); err != nil {
			return
		}
		rerr = raiseLoopbackGSO()
		after[0], after[1], err = loopbackGSO()
	})
	if err != nil {
		t.Fatal(err)
	}
	if before[0] != 65536 {
		t.Errorf("a fresh namespace's lo has GSO size %d, want 65536", before[0])
	}
	if before[1] == 0 {
		t.Skip("the kernel has no IPv4 BIG TCP (Linux 6.3)")
	}
	if rerr != nil {
		t.Fatalf("raiseLoopbackGSO: %v", rerr)
	}
	if after != [2]uint32{loopbackGSOMax, loopbackGSOMax} {
		t.Errorf("after raiseLoopbackGSO: IPv6 %d, IPv4 %d; want %d", after[0], after[1], loopbackGSOMax)
	}
}

// TestProxyLoopbackGSO: a sandbox in network mode proxy gets the large
// loopback segments (its listener is made with them); one in mode none
// keeps the kernel's default.
func TestProxyLoopbackGSO(t *testing.T) {
	r := newTestRuntime(t)
	for _, tc := range []struct {
		mode sandbox.NetMode
		want uint32
	}{{sandbox.NetProxy, loopbackGSOMax}, {sandbox.NetNone, 65536}} {
		g := &greeter{served: make(chan string, 1)}
		spec := &sandbox.Spec{Network: sandbox.Network{Mode: tc.mode}}
		if tc.mode == sandbox.NetProxy {
			spec.Network.Egress = g
		}
		sb, err := r.Create(context.Background(), spec)
		if err != nil {
			t.Fatalf("%s: create: %v", tc.mode, err)
		}
		var v6, v4 uint32
		inNetns(t, "/proc/"+strconv.Itoa(sb.(*linuxSandbox).proc.pid)+"/ns/net", func() { v6, v4, err = loopbackGSO() })
		sb.Shutdown(context.Background())
		if err != nil {
			t.Fatalf("%s: %v", tc.mode, err)
		}
		if v4 == 0 {
			t.Skip("the kernel has no IPv4 BIG TCP (Linux 6.3)")
		}
		if v6 != tc.want || v4 != tc.want {
			t.Errorf("mode %s: lo's GSO sizes IPv6 %d, IPv4 %d; want %d", tc.mode, v6, v4, tc.want)
		}
	}
}
