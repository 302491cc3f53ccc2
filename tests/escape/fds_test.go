//go:build linux

package escape

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/sandbox"
)

// leakyFiles opens descriptors of the kinds a careless parent leaks into
// moat: directories of the host (the CVE-2024-21626 class used a leaked
// directory as a working directory), a secret file and a listening socket.
// Everything is closed at cleanup.
func leakyFiles(t *testing.T) []*os.File {
	t.Helper()
	secret := filepath.Join(openDir(t), "secret")
	writeFile(t, secret, "leaked\n", 0o644)
	var files []*os.File
	for _, p := range []string{"/etc", "/", filepath.Dir(secret), secret} {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lf, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	files = append(files, lf)
	t.Cleanup(func() {
		for _, f := range files {
			f.Close()
		}
	})
	return files
}

// TestLeakedDescriptors: docs/THREAT-MODEL.md "leaked descriptors" row (the
// CVE-2024-21626 class). Only 0, 1 and 2 are open inside, even when the
// moat process inherited more; the working directory is inside the
// sandbox's root, whatever --cwd names.
func TestLeakedDescriptors(t *testing.T) {
	testutil.RequireRoot(t)
	leak := leakyFiles(t)

	t.Run("only stdio is open", func(t *testing.T) {
		for _, extra := range [][]*os.File{nil, leak} {
			o := insideWith(t, moatOpts{extraFiles: extra}, A("fds"))[0]
			works(t, o)
			for _, k := range []string{"listed", "fcntl_open"} {
				if fds := o.ints(k); !slices.Equal(fds, []int{0, 1, 2}) {
					t.Errorf("ESCAPE: open descriptors inside (%s, moat given %d extra): %v, targets %v",
						k, len(extra), fds, o.strMap("targets"))
				}
			}
		}
		// Control: the same files given to a process outside are open
		// there, and the probe sees them.
		out := outsideWith(t, outOpts{who: asNobody, extraFiles: leak}, A("fds"))[0]
		works(t, out)
		for i := range leak {
			if !slices.Contains(out.ints("fcntl_open"), 3+i) {
				t.Errorf("control: inherited fd %d not seen outside: %v", 3+i, out.ints("fcntl_open"))
			}
		}
	})

	t.Run("cwd inside the root", func(t *testing.T) {
		for _, cwd := range []string{"/workspace", "/", "/tmp", "/../../..", "/workspace/../..",
			"/proc/self/cwd", "/proc/1/cwd", "/proc/self/root", "/proc/1/root"} {
			res := moat(t, moatOpts{flags: []string{"--cwd", cwd}}, probeTarget, "getcwd")
			checkCwd(t, "--cwd "+cwd, res)
		}
	})

	t.Run("--cwd through an inherited descriptor", func(t *testing.T) {
		// CVE-2024-21626: the runtime's child chdir()s to
		// /proc/self/fd/N before its execve, while a descriptor of a
		// host directory is still open: the command then starts with
		// its cwd outside the root. moat is given host directories as
		// fds 3.. here; the command must never start with one of them
		// as its cwd.
		//
		// From such a cwd, ".." climbs the host's tree (the sandbox's
		// root is not above it), so the probe also tries what that
		// would give: the host's files' metadata and its pathname Unix
		// sockets, which no network namespace covers.
		sockDir := openDir(t)
		sock := filepath.Join(sockDir, "host.sock")
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() }) // after the parallel subtests
		if err := os.Chmod(sock, 0o777); err != nil {
			t.Fatal(err)
		}
		// sun_path holds 108 bytes: a few ".." are enough to reach the top.
		up := strings.Repeat("../", 8)
		// With the leaked descriptors, and without any (whatever moat
		// and its init open themselves must not be usable either).
		// Each attempt is its own sandbox; they run in parallel.
		for _, extra := range [][]*os.File{leak, nil} {
			for n := 3; n < 20; n++ {
				prefixes := []string{"/proc/self/fd/"}
				if n < 3+len(leak)+2 {
					prefixes = append(prefixes, "/proc/1/fd/", "/dev/fd/")
				}
				for _, p := range prefixes {
					cwd := p + strconv.Itoa(n)
					t.Run(fmt.Sprintf("%s inherited %d", cwd, len(extra)), func(t *testing.T) {
						t.Parallel()
						cwdEscape(t, cwd, extra, up, sock)
					})
				}
			}
		}
		// Control: outside, a process started with its cwd at
		// /proc/self/fd/N of a directory its parent holds lands in that
		// host directory. (os/exec changes directory in the child
		// before it rearranges descriptors, so N is the test's own
		// descriptor of /etc.)
		dir := "/proc/self/fd/" + strconv.Itoa(int(leak[0].Fd()))
		out := outsideWith(t, outOpts{who: asNobody, dir: dir}, A("getcwd"))[0]
		works(t, out)
		if out.str("cwd") != "/etc" {
			t.Errorf("control: cwd through the leaked fd is %q, want /etc", out.str("cwd"))
		}
	})
}

// checkCwd asserts that a sandboxed getcwd (first probe result) ran with
// its cwd inside the sandbox root, or that moat refused the --cwd.
//
// It returns the probe's outcomes when the command ran with its cwd
// outside the root, nil otherwise.
func checkCwd(t *testing.T, what string, res *sandbox.Result) []Outcome {
	t.Helper()
	if res.ExitCode == sandbox.ExitSetupFailed || res.ExitCode == sandbox.ExitNotExecutable {
		t.Logf("%s → refused (%d): %s", what, res.ExitCode, res.Error)
		return nil
	}
	if res.ExitCode != 0 {
		t.Errorf("%s → exit %d (%s) %s %s", what, res.ExitCode, res.ExitReason, res.Error, res.Stderr)
		return nil
	}
	got, err := parseOutcomes(res.Stdout)
	if err != nil || len(got) == 0 {
		t.Fatalf("%s: bad probe output %q", what, res.Stdout)
	}
	o := got[0]
	if !o.OK || o.str("reaches_root") != "true" {
		t.Errorf("ESCAPE: %s: the command started with its cwd outside the sandbox root: getcwd %q, /proc/self/cwd %q",
			what, o.str("cwd"), o.str("proc_cwd"))
		return got
	}
	t.Logf("%s → cwd %s", what, o.str("cwd"))
	return nil
}

// cwdEscape runs the probe with --cwd cwd in a sandbox whose moat process
// inherited extra, and, if the command starts outside the root, tries what
// that gives: the host's files' metadata and its pathname Unix sockets
// (which no network namespace covers), through up ("../../...") to the
// host's /.
func cwdEscape(t *testing.T, cwd string, extra []*os.File, up, sock string) {
	t.Helper()
	res := moat(t, moatOpts{flags: []string{"--cwd", cwd}, extraFiles: extra},
		probeTarget, "multi", multiArg(t, []attempt{
			A("getcwd"),
			A("stat", up+"etc/shadow"),
			A("connect-unix", up+strings.TrimPrefix(sock, "/")),
		}))
	what := "--cwd " + cwd
	if len(extra) > 0 {
		what += " (moat holding host directories)"
	}
	got := checkCwd(t, what, res)
	if len(got) != 3 {
		return
	}
	if got[1].OK {
		t.Errorf("ESCAPE: from there the command stats the host's /etc/shadow: %v", got[1].Values)
	}
	if got[2].OK {
		t.Errorf("ESCAPE: from there the command connects to a host Unix socket (%s)", sock)
	} else {
		t.Logf("from there: %s", got[2])
	}
}
