//go:build linux

package escape

import (
	"os"
	"testing"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/internal/testutil"
)

// Terminal ioctls; the high-bit variants carry junk above bit 31, which
// the kernel drops (the ioctl cmd is an unsigned int).
const (
	tiocsti       = "0x5412"
	tiocstiHigh   = "0xffffffff00005412"
	tiocstiHigh1  = "0x100005412"
	tioclinux     = "0x541c"
	tioclinuxHigh = "0xffffffff0000541c"
	tcgets        = "0x5401"
	// tioclGetShiftState is a harmless TIOCLINUX subcode (a read).
	tioclGetShiftState = "6"
)

// injections are the terminal-injection attempts on descriptor fd.
func injections(fd string) []attempt {
	return []attempt{
		A("ioctl", fd, tiocsti),
		A("ioctl", fd, tiocstiHigh),
		A("ioctl", fd, tiocstiHigh1),
		A("ioctl", fd, tioclinux, tioclGetShiftState),
		A("ioctl", fd, tioclinuxHigh, tioclGetShiftState),
	}
}

// newPTY opens a terminal pair in raw mode (so that anything pushed into
// its input is readable at once) and closes it at cleanup.
func newPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, s, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	tio, err := unix.IoctlGetTermios(int(s.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	tio.Lflag &^= unix.ICANON | unix.ECHO | unix.ISIG
	tio.Cc[unix.VMIN], tio.Cc[unix.VTIME] = 0, 0
	if err := unix.IoctlSetTermios(int(s.Fd()), unix.TCSETS, tio); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(s.Name(), 0o666); err != nil {
		t.Fatal(err)
	}
	return m, s
}

// pendingInput returns what is waiting in the terminal's input queue.
func pendingInput(t *testing.T, slave *os.File) string {
	t.Helper()
	fd, err := unix.Open(slave.Name(), unix.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	buf := make([]byte, 256)
	n, err := unix.Read(fd, buf)
	if err != nil || n <= 0 {
		return ""
	}
	return string(buf[:n])
}

// TestTerminalInjection: docs/THREAT-MODEL.md "terminal injection" row. TIOCSTI and
// TIOCLINUX, including variants with high bits set in the ioctl number, are
// denied in both non-terminal and -t mode, the command leads its own
// session, and a terminal moat itself runs on never reaches the sandbox.
func TestTerminalInjection(t *testing.T) {
	testutil.RequireRoot(t)
	t.Run("non-tty mode", func(t *testing.T) {
		var atts []attempt
		for _, fd := range []string{"0", "1", "2"} {
			atts = append(atts, injections(fd)...)
		}
		in := inside(t, nil, append([]attempt{A("session"), A("ioctl", "tty", tiocsti)}, atts...)...)
		sess := in[0]
		works(t, sess)
		if sess.str("session_leader") != "true" || sess.str("ctty") != "false" {
			t.Errorf("ESCAPE?: the command is not alone in its own session without a terminal: %v", sess.Values)
		}
		denied(t, in[1], "ENXIO", "EPERM") // no controlling terminal at all
		for _, o := range in[2:] {
			// Without the filter /dev/null and pipes would answer
			// ENOTTY; EPERM shows the filter is what answers.
			denied(t, o, "EPERM")
		}
		// Control: a process that does not start its own session shares
		// its parent's.
		out := outside(t, asNobody, A("session"))[0]
		if out.str("session_leader") != "false" {
			t.Errorf("control: the probe outside leads its own session: %v", out.Values)
		}
	})

	t.Run("host terminal as moat's stdin", func(t *testing.T) {
		// moat -i runs on a terminal (as when a user types moat run -i
		// in a shell): the sandbox gets a pipe, never the terminal.
		_, slave := newPTY(t)
		in := insideWith(t, moatOpts{flags: []string{"-i"}, stdin: slave},
			append([]attempt{A("session")}, injections("0")...)...)
		if in[0].str("isatty0") != "false" || in[0].str("ctty") != "false" {
			t.Errorf("ESCAPE: the sandbox got moat's terminal: %v", in[0].Values)
		}
		for _, o := range in[1:] {
			denied(t, o, "EPERM")
		}
		if s := pendingInput(t, slave); s != "" {
			t.Errorf("ESCAPE: %q was pushed into moat's terminal", s)
		}
		// Control: outside, a process whose controlling terminal it is
		// pushes input into it (TIOCSTI needs the terminal to be the
		// caller's controlling terminal, or CAP_SYS_ADMIN when
		// dev.tty.legacy_tiocsti is 0), and the high-bit variant is the
		// same ioctl to the kernel. TIOCLINUX exists only on virtual
		// consoles (never tried on one here): on a pty the kernel
		// answers ENOTTY.
		_, ctlSlave := newPTY(t)
		w := asNobody
		if b, err := os.ReadFile("/proc/sys/dev/tty/legacy_tiocsti"); err == nil && string(b) == "0\n" {
			w = asRoot
		}
		out := outsideWith(t, outOpts{who: w, stdin: ctlSlave, ctty: true}, injections("0")...)
		works(t, out[0])
		works(t, out[1])
		works(t, out[2])
		reached(t, out[3], "EPERM")
		reached(t, out[4], "EPERM")
		if s := pendingInput(t, ctlSlave); s != "###" {
			t.Errorf("control: the terminal's input holds %q, want the three pushed bytes", s)
		}
	})

	t.Run("-t mode", func(t *testing.T) {
		atts := append([]attempt{A("session"), A("ioctl", "0", tcgets)}, injections("0")...)
		atts = append(atts, injections("tty")...)
		atts = append(atts, injections("1")...)
		in := inside(t, []string{"-t"}, atts...)
		sess := in[0]
		if sess.str("session_leader") != "true" || sess.str("ctty") != "true" || sess.str("isatty0") != "true" {
			t.Errorf("-t: want a session leader with its own controlling terminal: %v", sess.Values)
		}
		works(t, in[1]) // the descriptor is a terminal that takes ioctls
		for _, o := range in[2:] {
			denied(t, o, "EPERM")
		}
	})
}
