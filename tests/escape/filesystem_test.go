//go:build linux

package escape

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testutil"
)

// fsFixture is a host layout for the filesystem tests:
//
//	base/ws/             the workspace (-w), owned by nobody: "the user"
//	base/outside/own.txt a host file of the same user, outside the workspace
//	base/outside/root.txt a host file of another user (root)
//	base/outside/ctl-*   files the outside controls may change
type fsFixture struct {
	base, ws, out     string
	ownFile, rootFile string
	ownData, rootData string
}

func newFSFixture(t *testing.T) *fsFixture {
	t.Helper()
	base := openDir(t)
	f := &fsFixture{base: base, ws: filepath.Join(base, "ws"), out: filepath.Join(base, "outside")}
	mkdirs(t, f.ws, f.out)
	chown(t, nobody, f.ws, f.out)
	f.ownFile = filepath.Join(f.out, "own.txt")
	f.rootFile = filepath.Join(f.out, "root.txt")
	f.ownData, f.rootData = "the user's own host file\n", "another user's host file\n"
	writeFile(t, f.ownFile, f.ownData, 0o644)
	chown(t, nobody, f.ownFile)
	writeFile(t, f.rootFile, f.rootData, 0o644)
	return f
}

// victimsUnchanged snapshots the two host files outside the workspace;
// calling the returned function checks them.
func (f *fsFixture) victimsUnchanged(t *testing.T) func() {
	t.Helper()
	s := snap(t, f.ownFile, f.rootFile, f.out+"/new.txt")
	return func() { s.unchanged(t) }
}

// ctlFile makes a file the outside control may write.
func (f *fsFixture) ctlFile(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(f.out, name)
	writeFile(t, p, "control\n", 0o666)
	chown(t, nobody, p)
	return p
}

// wsFlags are the moat flags of a sandbox on the fixture's workspace.
func (f *fsFixture) wsFlags(extra ...string) []string {
	return append([]string{"-w", f.ws}, extra...)
}

// changed asserts that a control write landed in p.
func changed(t *testing.T, p, before string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) == before {
		t.Errorf("control: %s did not change: the attempt proves nothing", p)
	}
}

// TestFilesystemEscape: docs/THREAT-MODEL.md "filesystem escape" row. Writes
// outside the writable roots, through "..", through absolute and relative
// symlinks and hardlinks in the workspace, by renaming a parent directory
// away, and through /proc/self/root, /proc/<pid>/root and /proc/<pid>/fd
// all fail, and the host files they aim at stay untouched.
func TestFilesystemEscape(t *testing.T) {
	testutil.RequireRoot(t)
	f := newFSFixture(t)
	hostFiles := snap(t, "/etc/passwd", "/etc/hostname", "/etc/hosts", "/usr/bin/su", probeBin(t))
	defer hostFiles.unchanged(t)

	t.Run("writes outside the writable roots", func(t *testing.T) {
		defer f.victimsUnchanged(t)()
		in := inside(t, f.wsFlags(),
			A("write", "/usr/moat-escape", "x"),
			A("write", "/usr/bin/su", "x"),
			A("write", "/etc/passwd", "x"),
			A("write", "/etc/hostname", "x"),
			A("write", "/etc/moat-escape", "x"),
			A("write", "/moat-escape", "x"),
			A("write", probeTarget, "x"),
			A("write", "/opt/moat-escape", "x"),
			A("write", "/proc/sys/kernel/hostname", "x"),
			A("write", "/proc/moat-escape", "x"),
			A("write", "/dev/moat-escape", "x"),
			A("write", "/home/moat-escape", "x"),
			A("mkdir", "/usr/moat-escape"),
			A("mkdir", "/moat-escape"),
			A("symlink", "/workspace", "/moat-escape"),
			A("unlink", probeTarget),
			A("unlink", "/etc/hosts"),
			A("rename", "/etc/hostname", "/tmp/hostname"),
			A("truncate", "/etc/passwd"),
			A("truncate", "/usr/bin/su"),
			A("chmod", "/usr/bin/su", "4777"),
			A("chown", "/workspace", "0", "0"),
			A("mknod", "/workspace/null"),
			A("mknod", "/tmp/null"),
			// Where the sandbox may write, the same probe writes.
			A("write", "/workspace/ok", "x"),
			A("write", "/tmp/ok", "x"),
			A("write", "/home/sandbox/ok", "x"),
			A("write", "/dev/shm/ok", "x"),
		)
		for _, o := range in[:len(in)-4] {
			denied(t, o)
		}
		for _, o := range in[len(in)-4:] {
			works(t, o)
		}
		// Control: the targets above are the host's /usr and /etc (or
		// the sandbox's own root); writing them outside as root would
		// prove nothing but damage the host. The control shows the
		// same write working on a host file its writer may change.
		ctl := f.ctlFile(t, "ctl-write.txt")
		works(t, outside(t, asNobody, A("write", ctl, "x"))[0])
		changed(t, ctl, "control\n")
	})

	t.Run("dot-dot", func(t *testing.T) {
		defer f.victimsUnchanged(t)()
		rel := "../outside/own.txt"
		deep := strings.Repeat("../", 20) + strings.TrimPrefix(f.ownFile, "/")
		in := inside(t, f.wsFlags(),
			A("write", "/workspace/"+rel, "x"),
			A("write", "/workspace/"+deep, "x"),
			A("write", rel, "x"), // relative to the cwd, /workspace
			A("read", strings.Repeat("../", 20)+"etc/shadow"),
			A("chdir-up", "64"),
		)
		for _, o := range in[:4] {
			denied(t, o, "ENOENT")
		}
		up := in[4]
		works(t, up)
		if up.str("cwd") != "/" || up.str("reaches_root") != "true" {
			t.Errorf("ESCAPE: chdir .. 64 times from /workspace ends at %q (reaches root: %s)", up.str("cwd"), up.str("reaches_root"))
		}
		for _, n := range []string{"root", "var", "run", "srv", "boot", "sys", "work"} {
			if slices.Contains(up.strs("names"), n) {
				t.Errorf("ESCAPE: the top of the sandbox lists the host's %q: %v", n, up.strs("names"))
			}
		}
		// Control: from the workspace on the host, the same relative
		// path reaches the user's file and ".." reaches the host's /.
		ctl := f.ctlFile(t, "ctl-dotdot.txt")
		out := outsideWith(t, outOpts{who: asNobody, dir: f.ws},
			A("write", "../outside/ctl-dotdot.txt", "x"),
			A("chdir-up", "64"),
		)
		works(t, out[0])
		changed(t, ctl, "control\n")
		if !slices.Contains(out[1].strs("names"), "proc") || out[1].str("cwd") != "/" {
			t.Errorf("control: chdir .. from the workspace on the host: %v", out[1])
		}
	})

	t.Run("symlinks planted in the workspace", func(t *testing.T) {
		defer f.victimsUnchanged(t)()
		// Planted on the host (a repository, an earlier run)...
		links := map[string]string{
			"abs-own":  f.ownFile,
			"abs-root": f.rootFile,
			"rel-own":  "../outside/own.txt",
			"rel-deep": strings.Repeat("../", 20) + strings.TrimPrefix(f.ownFile, "/"),
			"abs-dir":  f.out,
		}
		for name, target := range links {
			p := filepath.Join(f.ws, name)
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			chown(t, nobody, p)
		}
		// ...and planted by the sandbox itself in a first run.
		plant := inside(t, f.wsFlags(),
			A("symlink", f.ownFile, "/workspace/sb-abs"),
			A("symlink", "../outside/own.txt", "/workspace/sb-rel"),
			A("symlink", f.out, "/workspace/sb-dir"),
		)
		for _, o := range plant {
			works(t, o)
		}
		var atts []attempt
		for _, name := range []string{"abs-own", "abs-root", "rel-own", "rel-deep", "sb-abs", "sb-rel"} {
			atts = append(atts,
				A("write", "/workspace/"+name, "x"),
				A("reopen-write", "/workspace/"+name, "x"),
				A("truncate", "/workspace/"+name),
				A("read", "/workspace/"+name),
			)
		}
		atts = append(atts,
			A("write", "/workspace/abs-dir/own.txt", "x"),
			A("write", "/workspace/sb-dir/own.txt", "x"),
			A("write", "/workspace/abs-dir/new.txt", "x"),
			A("ls", "/workspace/sb-dir"),
		)
		for _, o := range inside(t, f.wsFlags(), atts...) {
			denied(t, o)
		}
		if _, err := os.Lstat(filepath.Join(f.out, "new.txt")); err == nil {
			t.Errorf("ESCAPE: the sandbox created %s through a symlink", filepath.Join(f.out, "new.txt"))
		}
		// Control: on the host the same links lead to the files.
		ctlAbs, ctlRel := f.ctlFile(t, "ctl-abs.txt"), f.ctlFile(t, "ctl-rel.txt")
		for name, target := range map[string]string{"ctl-abs": ctlAbs, "ctl-rel": "../outside/ctl-rel.txt"} {
			if err := os.Symlink(target, filepath.Join(f.ws, name)); err != nil {
				t.Fatal(err)
			}
		}
		out := outside(t, asNobody,
			A("write", filepath.Join(f.ws, "ctl-abs"), "x"),
			A("write", filepath.Join(f.ws, "ctl-rel"), "x"))
		works(t, out[0])
		works(t, out[1])
		changed(t, ctlAbs, "control\n")
		changed(t, ctlRel, "control\n")
	})

	t.Run("hardlinks made by the sandbox", func(t *testing.T) {
		defer f.victimsUnchanged(t)()
		// The sandbox tries to give host files it can see (read-only)
		// a name in the writable workspace, then to write them.
		flags := f.wsFlags("--ro", f.ownFile+":/opt/victim")
		in := inside(t, flags,
			A("link", probeTarget, "/workspace/hl1"),
			A("link", "/etc/passwd", "/workspace/hl2"),
			A("link", "/usr/bin/su", "/workspace/hl3"),
			A("link", "/opt/victim", "/workspace/hl4"),
			A("link-fd", "/opt/victim", "/workspace/hl5"),
			A("link-fd", "/etc/hostname", "/workspace/hl6"),
			A("link", "/opt/victim", "/tmp/hl7"),
			A("write", "/opt/victim", "x"),
			A("reopen-write", "/opt/victim", "x"),
		)
		for _, o := range in {
			denied(t, o)
		}
		// Control: on the host, nobody may hardlink its own file into
		// the workspace (same filesystem, protected_hardlinks allows
		// the owner).
		ctl := f.ctlFile(t, "ctl-link.txt")
		out := outside(t, asNobody,
			A("link", ctl, filepath.Join(f.ws, "hl-ctl")),
			A("write", filepath.Join(f.ws, "hl-ctl"), "x"))
		works(t, out[0])
		works(t, out[1])
		changed(t, ctl, "control\n")
	})

	t.Run("hardlink planted on the host to another user's file", func(t *testing.T) {
		defer f.victimsUnchanged(t)()
		if err := os.Link(f.rootFile, filepath.Join(f.ws, "hl-root")); err != nil {
			t.Fatal(err)
		}
		in := inside(t, f.wsFlags(),
			A("write", "/workspace/hl-root", "x"),
			A("truncate", "/workspace/hl-root"),
			A("chmod", "/workspace/hl-root", "666"),
			A("chown", "/workspace/hl-root", "1000", "1000"),
			A("reopen-write", "/workspace/hl-root", "x"),
		)
		for _, o := range in {
			denied(t, o)
		}
		// Control: the link is live: its owner writing through it
		// outside changes the file (a root-owned file of this test).
		ctl := filepath.Join(f.out, "root-ctl.txt")
		writeFile(t, ctl, "control\n", 0o644)
		if err := os.Link(ctl, filepath.Join(f.ws, "hl-root-ctl")); err != nil {
			t.Fatal(err)
		}
		works(t, outside(t, asRoot, A("write", filepath.Join(f.ws, "hl-root-ctl"), "x"))[0])
		changed(t, ctl, "control\n")
	})

	// Not tested as an escape: a hard link that the workspace's owner
	// made on the host, inside the workspace, to another file of their
	// own (pnpm's store, cp -al). It is the same inode as a workspace
	// entry, so it is writable like any file the owner gave the sandbox;
	// docs/SECURITY.md states this limit. What the sandbox itself cannot
	// do is make such a link (the EXDEV subtest above), and a link to a
	// file of any other user stays untouchable (the subtest before).

	t.Run("renaming a parent directory away", func(t *testing.T) {
		defer f.victimsUnchanged(t)()
		// /data is a bind of ws/sub. The sandbox holds ws/sub/x open
		// through /data, moves x out of sub through /workspace (the
		// same mount), so that the held directory is outside the root
		// of the mount it was opened through, and walks up from it.
		sub := filepath.Join(f.ws, "sub")
		mkdirs(t, filepath.Join(sub, "x"))
		chown(t, nobody, sub, filepath.Join(sub, "x"))
		marker := filepath.Join(f.out, "marker.txt")
		writeFile(t, marker, "outside the workspace\n", 0o644)
		in := inside(t, f.wsFlags("--rw", sub+":/data"),
			A("rename-escape", "/data/x", "/workspace/sub/x", "/workspace/x", "../../outside/marker.txt"),
			A("rename-escape", "/data/x", "/workspace/sub/x", "/workspace/x", "../../../../../../etc/shadow"),
			A("rename-escape", "/data/x", "/workspace/sub/x", "/workspace/x", ".."),
		)
		for _, o := range in {
			// Either step may stop it: Landlock refuses to reparent a
			// file without its REFER right (EXDEV on the rename), and
			// the kernel refuses ".." from a directory that is no longer
			// beneath the root of its mount (ENOENT on the walk).
			denied(t, o)
			if strings.HasPrefix(o.Err, "open held") {
				t.Errorf("inside: %s: the attempt did not get as far as the rename", o)
			}
			t.Logf("inside: %s", o)
		}
		// Control: the same moves and walk on the host reach the file.
		out := outside(t, asNobody, A("rename-escape", filepath.Join(sub, "x"), filepath.Join(sub, "x"),
			filepath.Join(f.ws, "x"), "../../outside/marker.txt"))[0]
		works(t, out)
		if _, err := os.Stat(filepath.Join(sub, "x")); err != nil {
			t.Errorf("the rename was not undone: %v", err)
		}
	})

	t.Run("/proc/self/root, /proc/<pid>/root, /proc/<pid>/fd", func(t *testing.T) {
		defer f.victimsUnchanged(t)()
		flags := f.wsFlags("--ro", f.ownFile+":/opt/victim")
		in := inside(t, flags,
			A("write", "/proc/self/root/etc/moat-escape", "x"),
			A("write", "/proc/self/root/usr/moat-escape", "x"),
			A("write", "/proc/self/root"+probeTarget, "x"),
			A("write", "/proc/self/root/opt/victim", "x"),
			A("write", "/proc/self/root"+f.ownFile, "x"),
			A("write", "/proc/1/root/workspace/moat-escape", "x"),
			A("write", "/proc/1/root/etc/moat-escape", "x"),
			A("write", "/proc/1/cwd/moat-escape", "x"),
			A("reopen-write", "/opt/victim", "x"),
			A("reopen-write", probeTarget, "x"),
			A("reopen-write", "/etc/hostname", "x"),
			A("reopen-write", "/usr/bin/su", "x"),
		)
		for _, o := range in {
			denied(t, o)
		}
		// /proc/<pid>/fd of another sandbox process: a shell holds the
		// read-only host file open on fd 3, the probe reopens it for
		// writing through the shell's fd directory.
		res := moat(t, moatOpts{flags: flags}, "/bin/sh", "-c",
			`exec 3</opt/victim; `+probeTarget+` multi "[[\"reopen-write\",\"/proc/$$/fd/3\",\"x\"],[\"write\",\"/proc/$$/fd/3\",\"x\"],[\"read\",\"/proc/$$/fd/3\"]]"`)
		got, err := parseOutcomes(res.Stdout)
		if err != nil || len(got) != 3 {
			t.Fatalf("sibling fd attempt: exit %d %q %q", res.ExitCode, res.Stdout, res.Stderr)
		}
		denied(t, got[0])
		denied(t, got[1])
		works(t, got[2]) // the sibling's fd is reachable, only not writable
		// Control: the same paths and magic links work on the host.
		ctl1, ctl2 := f.ctlFile(t, "ctl-proc1.txt"), f.ctlFile(t, "ctl-proc2.txt")
		out := outside(t, asNobody,
			A("write", "/proc/self/root"+ctl1, "x"),
			A("reopen-write", ctl2, "x"))
		works(t, out[0])
		works(t, out[1])
		changed(t, ctl1, "control\n")
		changed(t, ctl2, "control\n")
	})
}
