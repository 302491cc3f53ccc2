//go:build linux

package escape

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/sandbox"
)

// hostMountsMentioning returns the host's mountinfo lines that mention s.
func hostMountsMentioning(t testing.TB, s string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.Contains(sc.Text(), s) {
			out = append(out, sc.Text())
		}
	}
	return out
}

// TestSetupSymlinkRaces: docs/THREAT-MODEL.md "setup-time symlink races" row. The
// runtime mounts the workspace and the binds; a sandbox (or whoever
// prepared the workspace) may have planted symlinks where it will mount.
// The runtime must refuse (exit 125) or keep the mount inside the sandbox's
// root: nothing appears, is created or is mounted on the host.
func TestSetupSymlinkRaces(t *testing.T) {
	testutil.RequireRoot(t)
	base := openDir(t)
	ws := filepath.Join(base, "ws")
	out := filepath.Join(base, "outside")
	x := filepath.Join(base, "x")
	mkdirs(t, ws, out, x)
	chown(t, nobody, ws, out)
	writeFile(t, filepath.Join(x, "x-marker"), "bound\n", 0o644)
	writeFile(t, filepath.Join(base, "x-file"), "bound file\n", 0o644)
	writeFile(t, filepath.Join(out, "existing"), "host\n", 0o644)

	t.Run("workspace given as a symlink", func(t *testing.T) {
		link := filepath.Join(base, "ws-link")
		if err := os.Symlink(ws, link); err != nil {
			t.Fatal(err)
		}
		res := moat(t, moatOpts{flags: []string{"-w", link}}, probeTarget, "getcwd")
		if res.ExitCode != sandbox.ExitSetupFailed {
			t.Errorf("ESCAPE?: -w with a symlink: exit %d (%s), want 125", res.ExitCode, res.Error)
		}
		// Control: the directory it points to is accepted.
		if res := moat(t, moatOpts{flags: []string{"-w", ws}}, probeTarget, "getcwd"); res.ExitCode != 0 {
			t.Errorf("control: -w %s: exit %d %s", ws, res.ExitCode, res.Error)
		}
	})

	t.Run("bind source given as a symlink", func(t *testing.T) {
		link := filepath.Join(base, "x-link")
		if err := os.Symlink(x, link); err != nil {
			t.Fatal(err)
		}
		for _, flag := range []string{"--ro", "--rw"} {
			res := moat(t, moatOpts{flags: []string{flag, link + ":/data"}}, probeTarget, "getcwd")
			if res.ExitCode != sandbox.ExitSetupFailed {
				t.Errorf("ESCAPE?: %s with a symlink source: exit %d (%s), want 125", flag, res.ExitCode, res.Error)
			}
			if res := moat(t, moatOpts{flags: []string{flag, x + ":/data"}}, probeTarget, "getcwd"); res.ExitCode != 0 {
				t.Errorf("control: %s %s: exit %d %s", flag, x, res.ExitCode, res.Error)
			}
		}
	})

	t.Run("bind targets through symlinks in the workspace", func(t *testing.T) {
		// Planted by a first sandbox run on the workspace...
		plant := inside(t, []string{"-w", ws},
			A("symlink", out, "/workspace/abs"),
			A("symlink", "../outside", "/workspace/rel"),
			A("symlink", "/", "/workspace/root"),
			A("symlink", "/proc/self/root", "/workspace/magic"),
			A("symlink", "/proc/self/cwd", "/workspace/magic-cwd"),
		)
		for _, o := range plant {
			works(t, o)
		}
		// ...and one planted on the host, as a repository could.
		if err := os.Symlink(out, filepath.Join(ws, "sub")); err != nil {
			t.Fatal(err)
		}
		hostBefore := snap(t, out, filepath.Join(out, "existing"), x, "/etc", "/", base)
		mountsBefore := hostMountsMentioning(t, base)
		cases := []struct{ flag, src, target string }{
			{"--ro", x, "/workspace/sub"},
			{"--ro", x, "/workspace/abs"},
			{"--rw", x, "/workspace/rel"},
			{"--rw", x, "/workspace/abs/deeper"},
			{"--ro", x, "/workspace/rel/deeper/deepest"},
			{"--rw", filepath.Join(base, "x-file"), "/workspace/abs/existing"},
			{"--rw", filepath.Join(base, "x-file"), "/workspace/sub/new-file"},
			{"--ro", x, "/workspace/magic"},
			{"--ro", x, "/workspace/magic/etc"},
			{"--ro", x, "/workspace/magic-cwd"},
			{"--ro", x, "/workspace/root"},
			{"--ro", x, "/workspace/root/etc"},
			{"--rw", x, "/workspace/root/usr/bin"},
		}
		for _, c := range cases {
			res := moat(t, moatOpts{flags: []string{"-w", ws, c.flag, c.src + ":" + c.target}},
				probeTarget, "multi", multiArg(t, []attempt{A("ls", c.target), A("read", c.target), A("mounts")}))
			switch res.ExitCode {
			case sandbox.ExitSetupFailed:
				t.Logf("%s %s:%s → refused: %s", c.flag, c.src, c.target, res.Error)
				continue
			case 0:
			default:
				t.Errorf("%s %s:%s → exit %d (%s) %s %s", c.flag, c.src, c.target, res.ExitCode, res.ExitReason, res.Error, res.Stderr)
				continue
			}
			// Accepted: the bind must have landed inside the sandbox,
			// where the symlink resolves within its root.
			got, err := parseOutcomes(res.Stdout)
			if err != nil || len(got) != 3 {
				t.Fatalf("bad probe output %q", res.Stdout)
			}
			ls, rd := got[0], got[1]
			if !(ls.OK && slices.Contains(ls.strs("names"), "x-marker")) && !(rd.OK && rd.str("size") == "11") {
				t.Errorf("%s %s:%s accepted, but the bind is not at the target inside: ls %s, read %s", c.flag, c.src, c.target, ls, rd)
			}
			t.Logf("%s %s:%s → accepted, mounted inside the sandbox at what %s resolves to there", c.flag, c.src, c.target, c.target)
		}
		hostBefore.unchanged(t)
		if after := hostMountsMentioning(t, base); !slices.Equal(after, mountsBefore) {
			t.Errorf("ESCAPE: host mount table changed:\nbefore %v\nafter  %v", mountsBefore, after)
		}
		// Control: followed on the host, the planted links lead out of
		// the workspace: a mkdir through one lands in the outside dir.
		o := outside(t, asNobody, A("mkdir", filepath.Join(ws, "abs", "ctl-deeper")))[0]
		works(t, o)
		if _, err := os.Stat(filepath.Join(out, "ctl-deeper")); err != nil {
			t.Errorf("control: mkdir through the planted link did not land outside: %v", err)
		}
		os.Remove(filepath.Join(out, "ctl-deeper"))
	})
}
