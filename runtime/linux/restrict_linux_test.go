package linux

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/sandbox"
)

// Errors as coreutils print them: the kernel's answer to each attempt.
const (
	eACCES = "Permission denied"
	eROFS  = "Read-only file system"
	eBUSY  = "Device or resource busy"
)

// step is one shell command probed inside a sandbox.
type step struct{ name, cmd string }

// probeScript runs every step in order and prints, per step, "name<TAB>ok
// <output>" or "name<TAB>fail <output>" (stdout and stderr, one line).
func probeScript(steps []step) string {
	var b strings.Builder
	b.WriteString("cd /workspace 2>/dev/null\n")
	for _, s := range steps {
		fmt.Fprintf(&b, "if o=$( { %s ; } 2>&1 ); then r=ok; else r=fail; fi; printf '%%s\\t%%s %%s\\n' %q \"$r\" \"$(printf %%s \"$o\" | tr '\\n' ' ')\"\n", s.cmd, s.name)
	}
	return b.String()
}

func parseProbe(t *testing.T, res *sandbox.Result) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
		name, v, ok := strings.Cut(line, "\t")
		if ok {
			out[name] = strings.TrimSpace(v)
		}
	}
	return out
}

// probeRun runs steps in a one-shot sandbox built from spec.
func probeRun(t *testing.T, r *Runtime, spec *sandbox.Spec, steps []step) (map[string]string, *sandbox.Result) {
	t.Helper()
	res, err := r.Run(context.Background(), spec, &sandbox.Process{Args: []string{"/bin/sh", "-c", probeScript(steps)}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("run: %v %+v", err, res)
	}
	return parseProbe(t, res), res
}

// probeExec runs steps in a long-lived sandbox.
func probeExec(t *testing.T, sb sandbox.Sandbox, steps []step) map[string]string {
	t.Helper()
	res, err := sb.Exec(context.Background(), &sandbox.Process{Args: []string{"/bin/sh", "-c", probeScript(steps)}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %v %+v", err, res)
	}
	return parseProbe(t, res)
}

// expect checks each probed step: "ok", or "fail" with the given error
// text ("fail" alone: any failure).
func expect(t *testing.T, got map[string]string, want map[string]string) {
	t.Helper()
	for name, w := range want {
		g, ok := got[name]
		switch {
		case !ok:
			t.Errorf("%s: not run", name)
		case w == "ok":
			if !strings.HasPrefix(g, "ok") {
				t.Errorf("%s: want success, got %q", name, g)
			}
		case !strings.HasPrefix(g, "fail"):
			t.Errorf("%s: want failure (%s), got %q", name, w, g)
		case w != "fail" && !strings.Contains(g, w):
			t.Errorf("%s: want %q, got %q", name, w, g)
		}
	}
}

// restrictWorkspace makes a host workspace owned by hostOwner holding
// files (path → content; a path ending in "/" is a directory) and
// symlinks (path → target).
func restrictWorkspace(t *testing.T, files map[string]string, links map[string]string) string {
	t.Helper()
	ws := t.TempDir()
	paths := slices.Sorted(func(yield func(string) bool) {
		for p := range files {
			if !yield(p) {
				return
			}
		}
	})
	for _, p := range paths {
		full := filepath.Join(ws, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(full, []byte(files[p]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for p, target := range links {
		if err := os.Symlink(target, filepath.Join(ws, p)); err != nil {
			t.Fatal(err)
		}
	}
	err := filepath.Walk(ws, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, hostOwner, hostOwner)
	})
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// snapshot records a host tree (path, type, mode, owner, content) to show
// that a sandbox left it as it was.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		fmt.Fprintf(&b, "%s %v %d:%d", strings.TrimPrefix(p, dir), fi.Mode(), st.Uid, st.Gid)
		if fi.Mode().IsRegular() {
			c, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " %q", c)
		}
		b.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func mountinfo(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// hostUnchanged checks, at the end of the test, that the host's mount
// table and the protected paths of the workspace (their whole trees) are
// as they were when it is called.
func hostUnchanged(t *testing.T, ws string, protected ...string) {
	t.Helper()
	snap := func() string {
		var b strings.Builder
		for _, p := range protected {
			b.WriteString(snapshot(t, filepath.Join(ws, p)))
		}
		return b.String()
	}
	mounts, tree := mountinfo(t), snap()
	t.Cleanup(func() {
		if got := mountinfo(t); got != mounts {
			t.Errorf("host mount table changed:\nbefore:\n%s\nafter:\n%s", mounts, got)
		}
		if got := snap(); got != tree {
			t.Errorf("protected host files changed:\nbefore:\n%s\nafter:\n%s", tree, got)
		}
	})
}

func restrict(mode sandbox.RestrictMode, paths ...string) []sandbox.Restriction {
	var rs []sandbox.Restriction
	for _, p := range paths {
		rs = append(rs, sandbox.Restriction{Path: p, Mode: mode})
	}
	return rs
}

// TestRestrictHide: a hidden directory and a hidden file of a host
// workspace cannot be read, listed, stat'ed into, written, created in,
// chmod'ed, renamed or removed; the same operations on their siblings work.
func TestRestrictHide(t *testing.T) {
	r := newTestRuntime(t)
	ws := restrictWorkspace(t, map[string]string{
		"sec/key": "SECRET", "sec/sub/deep": "SECRET", "token": "SECRET",
		"pub/key": "public", "pub/sub/deep": "public", "pubfile": "public",
		"cmv/": "", "crm/x": "", "cmvf": "", "crmf": "",
	}, nil)
	hostUnchanged(t, ws, "sec", "token")
	spec := &sandbox.Spec{Workspace: ws, Restrict: restrict(sandbox.Hide, "/workspace/sec", "/workspace/token")}
	got, res := probeRun(t, r, spec, []step{
		{"cat dir child", "cat sec/key"}, {"ctl cat dir child", "cat pub/key"},
		{"ls dir", "ls sec"}, {"ctl ls dir", "ls pub"},
		{"stat dir child", "stat sec/sub/deep"}, {"ctl stat dir child", "stat pub/sub/deep"},
		{"create in dir", "touch sec/new"}, {"ctl create in dir", "touch pub/new"},
		{"chmod dir", "chmod 755 sec"}, {"ctl chmod dir", "chmod 755 pub"},
		{"mv dir", "mv sec sec2"}, {"ctl mv dir", "mv cmv cmv2"},
		{"rm dir", "rm -rf sec"}, {"ctl rm dir", "rm -rf crm"},
		{"cat file", "cat token"}, {"ctl cat file", "cat pubfile"},
		{"write file", "echo x >> token"}, {"ctl write file", "echo x >> pubfile"},
		{"chmod file", "chmod 644 token"}, {"ctl chmod file", "chmod 644 pubfile"},
		{"mv file", "mv token token2"}, {"ctl mv file", "mv cmvf cmvf2"},
		{"rm file", "rm -f token"}, {"ctl rm file", "rm -f crmf"},
		{"modes", "stat -c '%a %u %F' sec token"},
		{"mount flags", "grep ' /workspace/sec ' /proc/self/mountinfo"},
	})
	expect(t, got, map[string]string{
		"cat dir child": eACCES, "ctl cat dir child": "ok",
		"ls dir": eACCES, "ctl ls dir": "ok",
		"stat dir child": eACCES, "ctl stat dir child": "ok",
		"create in dir": eACCES, "ctl create in dir": "ok",
		"chmod dir": "fail", "ctl chmod dir": "ok",
		"mv dir": eBUSY, "ctl mv dir": "ok",
		"rm dir": "fail", "ctl rm dir": "ok",
		"cat file": eACCES, "ctl cat file": "ok",
		"write file": eACCES, "ctl write file": "ok",
		"chmod file": "fail", "ctl chmod file": "ok",
		"mv file": eBUSY, "ctl mv file": "ok",
		"rm file": eBUSY, "ctl rm file": "ok",
	})
	if m := got["modes"]; m != "ok 0 0 directory 0 0 regular empty file" {
		t.Errorf("hidden entries: %q", m)
	}
	if m := got["mount flags"]; !strings.Contains(m, " ro,nosuid,nodev,noexec") {
		t.Errorf("hide mount: %q", m)
	}
	if strings.Contains(res.Stdout, "SECRET") {
		t.Errorf("a secret leaked: %s", res.Stdout)
	}
	if e := res.Enforcement; e == nil || e.Restricted != 2 || len(e.RestrictSkipped) != 0 {
		t.Errorf("enforcement: %+v", e)
	}
}

// TestRestrictReadOnly: a read-only directory and file of a host workspace
// cannot be written, created in, removed or renamed; their owner still
// shows as the sandbox user (the workspace's idmap is kept). Their
// writable siblings are the control.
func TestRestrictReadOnly(t *testing.T) {
	r := newTestRuntime(t)
	ws := restrictWorkspace(t, map[string]string{
		"cfg/a": "orig", "cfg/b": "orig", "cfg/sub/c": "orig", "ro.txt": "orig",
		"rw/a": "orig", "rw/b": "orig", "rw.txt": "orig", "cmv/": "", "cmvf": "",
	}, nil)
	hostUnchanged(t, ws, "cfg", "ro.txt")
	spec := &sandbox.Spec{Workspace: ws, Restrict: restrict(sandbox.ReadOnly, "/workspace/cfg", "/workspace/ro.txt")}
	got, res := probeRun(t, r, spec, []step{
		{"owner", "stat -c %u cfg/a cfg/sub/c ro.txt"}, {"ctl owner", "stat -c %u rw/a rw.txt"},
		{"write in dir", "echo x >> cfg/a"}, {"ctl write in dir", "echo x >> rw/a"},
		{"write nested", "echo x >> cfg/sub/c"},
		{"create in dir", "touch cfg/new"}, {"ctl create in dir", "touch rw/new"},
		{"rm in dir", "rm -f cfg/b"}, {"ctl rm in dir", "rm -f rw/b"},
		{"chmod in dir", "chmod 600 cfg/a"},
		{"mv dir", "mv cfg cfg2"}, {"ctl mv dir", "mv cmv cmv2"},
		{"rm dir", "rm -rf cfg"},
		{"write file", "echo x >> ro.txt"}, {"ctl write file", "echo x >> rw.txt"},
		{"chmod file", "chmod 600 ro.txt"},
		{"mv file", "mv ro.txt ro2"}, {"ctl mv file", "mv cmvf cmvf2"},
		{"rm file", "rm -f ro.txt"},
		{"replace file", "echo x > /tmp/n && mv /tmp/n ro.txt"},
		{"read", "cat cfg/a ro.txt"},
	})
	expect(t, got, map[string]string{
		"write in dir": eROFS, "ctl write in dir": "ok",
		"write nested":  eROFS,
		"create in dir": eROFS, "ctl create in dir": "ok",
		"rm in dir": eROFS, "ctl rm in dir": "ok",
		"chmod in dir": eROFS,
		"mv dir":       eBUSY, "ctl mv dir": "ok",
		"rm dir":     "fail",
		"write file": eROFS, "ctl write file": "ok",
		"chmod file": eROFS,
		"mv file":    eBUSY, "ctl mv file": "ok",
		"rm file":      eBUSY,
		"replace file": "fail",
		"read":         "ok",
	})
	if got["owner"] != "ok 1000 1000 1000" || got["ctl owner"] != "ok 1000 1000" {
		t.Errorf("owners: %q, control %q", got["owner"], got["ctl owner"])
	}
	if e := res.Enforcement; e == nil || e.Restricted != 2 {
		t.Errorf("enforcement: %+v", e)
	}
	for _, f := range []string{"cfg/a", "cfg/b", "cfg/sub/c", "ro.txt"} {
		if b, err := os.ReadFile(filepath.Join(ws, f)); err != nil || string(b) != "orig" {
			t.Errorf("host %s: %q %v", f, b, err)
		}
	}
}

// TestRestrictParentRename: the parent of a read-only entry is not a mount
// point, so it can be renamed, taking the entry along (still read-only) and
// leaving its old name free for a writable impostor: the known limit of a
// read-only child alone. Pinning the parent (as the policy compiler does
// for .git around .git/hooks) stops that rename.
func TestRestrictParentRename(t *testing.T) {
	r := newTestRuntime(t)
	ws := restrictWorkspace(t, map[string]string{
		"lone/hooks/pre-commit": "orig",
		"git/hooks/pre-commit":  "orig", "git/config": "orig",
	}, nil)
	hostUnchanged(t, ws, "git/hooks")
	spec := &sandbox.Spec{Workspace: ws, Restrict: []sandbox.Restriction{
		{Path: "/workspace/lone/hooks", Mode: sandbox.ReadOnly},
		{Path: "/workspace/git/hooks", Mode: sandbox.ReadOnly},
		{Path: "/workspace/git", Mode: sandbox.Pin},
	}}
	got, _ := probeRun(t, r, spec, []step{
		{"mv lone parent", "mv lone lone2"},
		{"moved child still ro", "echo x >> lone2/hooks/pre-commit"},
		{"impostor", "mkdir -p lone/hooks && echo evil > lone/hooks/pre-commit"},
		{"mv pinned parent", "mv git git2"},
		{"mv child", "mv git/hooks git/h2"},
		{"write child", "echo x >> git/hooks/pre-commit"},
		{"write in pinned parent", "echo x >> git/config && touch git/new"},
	})
	expect(t, got, map[string]string{
		"mv lone parent":         "ok",
		"moved child still ro":   eROFS,
		"impostor":               "ok",
		"mv pinned parent":       eBUSY,
		"mv child":               eBUSY,
		"write child":            eROFS,
		"write in pinned parent": "ok",
	})
	// The moved entry kept its content; the impostor took its old name.
	for f, want := range map[string]string{"lone2/hooks/pre-commit": "orig", "lone/hooks/pre-commit": "evil\n", "git/hooks/pre-commit": "orig"} {
		if b, err := os.ReadFile(filepath.Join(ws, f)); err != nil || string(b) != want {
			t.Errorf("host %s: %q %v", f, b, err)
		}
	}
}

// TestRestrictPin: a pinned directory and file stay writable (content,
// entries inside) but cannot be renamed, removed or replaced; siblings can.
func TestRestrictPin(t *testing.T) {
	r := newTestRuntime(t)
	ws := restrictWorkspace(t, map[string]string{
		"pd/a": "orig", "pd/b": "orig", "pf": "orig", "cmv/": "", "cmvf": "", "crmf": "",
	}, nil)
	hostUnchanged(t, ws)
	spec := &sandbox.Spec{Workspace: ws, Restrict: restrict(sandbox.Pin, "/workspace/pd", "/workspace/pf")}
	got, res := probeRun(t, r, spec, []step{
		{"write in dir", "echo x >> pd/a"},
		{"create in dir", "touch pd/new"},
		{"rm in dir", "rm pd/b"},
		{"mv in dir", "mv pd/a pd/a2"},
		{"write file", "echo x >> pf"},
		{"mv dir", "mv pd pd2"}, {"ctl mv dir", "mv cmv cmv2"},
		{"rm dir", "rm -rf pd"},
		{"mv file", "mv pf pf2"}, {"ctl mv file", "mv cmvf cmvf2"},
		{"rm file", "rm -f pf"}, {"ctl rm file", "rm -f crmf"},
		{"replace file", "echo n > /workspace/tmpn && mv /workspace/tmpn pf"},
	})
	expect(t, got, map[string]string{
		"write in dir": "ok", "create in dir": "ok", "rm in dir": "ok", "mv in dir": "ok",
		"write file": "ok",
		"mv dir":     eBUSY, "ctl mv dir": "ok",
		"rm dir":  eBUSY,
		"mv file": eBUSY, "ctl mv file": "ok",
		"rm file": eBUSY, "ctl rm file": "ok",
		"replace file": eBUSY,
	})
	if b, _ := os.ReadFile(filepath.Join(ws, "pf")); string(b) != "origx\n" {
		t.Errorf("a pinned file's writes did not reach the workspace: %q", b)
	}
	if e := res.Enforcement; e == nil || e.Restricted != 2 {
		t.Errorf("enforcement: %+v", e)
	}
}

// TestRestrictSandboxPaths: restrictions work on the in-memory workspace,
// the sandbox's tmpfs paths, a --rw bind and the read-only /etc. Control:
// the same probes in a sandbox without them.
func TestRestrictSandboxPaths(t *testing.T) {
	r := newTestRuntime(t)
	data := restrictWorkspace(t, map[string]string{"secret": "SECRET", "open": "open", "filebind": "SECRET"}, nil)
	hostUnchanged(t, data, "secret", "filebind")
	steps := []step{
		{"write workspace", "touch /workspace/x"},
		{"list home", "ls -a /home/sandbox"},
		{"write tmp", "touch /tmp/x"},
		{"read bind", "cat /data/secret"},
		{"read bind sibling", "cat /data/open"},
		{"write bind sibling", "echo x >> /data/open"},
		{"read etc", "cat /etc/hostname"},
		{"mv workspace file", "mv /workspace/x /workspace/y"},
		{"read file bind", "cat /opt/filebind"},
		{"exec system file", "/usr/bin/env true"},
		{"write pinned system dir", "touch /usr/lib/x"},
	}
	base := sandbox.Spec{Binds: []sandbox.Bind{{Source: data, Target: "/data", Writable: true},
		{Source: filepath.Join(data, "filebind"), Target: "/opt/filebind", Writable: true}}}
	ctl, _ := probeRun(t, r, &base, steps)
	expect(t, ctl, map[string]string{"write workspace": "ok", "list home": "ok", "write tmp": "ok",
		"read bind": "ok", "read bind sibling": "ok", "write bind sibling": "ok", "read etc": "ok", "mv workspace file": "ok",
		"read file bind": "ok", "exec system file": "ok", "write pinned system dir": eROFS})

	spec := base
	spec.Restrict = []sandbox.Restriction{
		{Path: "/workspace", Mode: sandbox.ReadOnly},
		{Path: "/home/sandbox", Mode: sandbox.Hide},
		{Path: "/data/secret", Mode: sandbox.Hide},
		{Path: "/etc/hostname", Mode: sandbox.Hide},
		{Path: "/opt/filebind", Mode: sandbox.Hide},
		{Path: "/usr/bin/env", Mode: sandbox.Hide},
		{Path: "/usr/lib", Mode: sandbox.Pin},
	}
	got, res := probeRun(t, r, &spec, steps)
	expect(t, got, map[string]string{"write workspace": eROFS, "list home": eACCES, "write tmp": "ok",
		"read bind": eACCES, "read bind sibling": "ok", "write bind sibling": "ok", "read etc": eACCES, "mv workspace file": "fail",
		"read file bind": eACCES, "exec system file": eACCES, "write pinned system dir": eROFS})
	if e := res.Enforcement; e == nil || e.Restricted != 7 {
		t.Errorf("enforcement: %+v", e)
	}
}

// TestRestrictMissingSkipped: a path that does not exist at setup is
// skipped and reported (nothing can be mounted on it, so nothing protects
// it: creating it afterwards works); a path beneath a hidden directory is
// covered by it and counts as applied.
func TestRestrictMissingSkipped(t *testing.T) {
	r := newTestRuntime(t)
	ws := restrictWorkspace(t, map[string]string{"sec/key": "SECRET", "file": "x"}, nil)
	spec := &sandbox.Spec{Workspace: ws, Restrict: []sandbox.Restriction{
		{Path: "/workspace/file/below", Mode: sandbox.ReadOnly},
		{Path: "/workspace/nope", Mode: sandbox.Hide},
		{Path: "/workspace/sec/key", Mode: sandbox.ReadOnly},
		{Path: "/workspace/sec", Mode: sandbox.Hide},
		{Path: "/workspace/a/b/c", Mode: sandbox.Pin},
	}}
	got, res := probeRun(t, r, spec, []step{
		{"create skipped", "mkdir /workspace/nope && echo x > /workspace/nope/f"},
		{"read covered", "cat /workspace/sec/key"},
	})
	expect(t, got, map[string]string{"create skipped": "ok", "read covered": eACCES})
	want := []string{"/workspace/nope", "/workspace/file/below", "/workspace/a/b/c"}
	if e := res.Enforcement; e == nil || e.Restricted != 2 || !slices.Equal(e.RestrictSkipped, want) {
		t.Errorf("enforcement: %+v (want skipped %v)", e, want)
	}
}

// TestRestrictSymlinkIsSetupError: a symlink anywhere on a restricted path
// fails the setup (exit 125) naming the path, whether it points inside the
// sandbox or at the host's /etc; the same restriction through the real
// path works.
func TestRestrictSymlinkIsSetupError(t *testing.T) {
	r := newTestRuntime(t)
	ws := restrictWorkspace(t, map[string]string{"real/x": "x"},
		map[string]string{"link": "real", "abs": "/etc", "leaf": "real/x"})
	hostUnchanged(t, ws, ".")
	for _, p := range []string{"/workspace/link/x", "/workspace/link", "/workspace/abs/passwd", "/workspace/leaf"} {
		spec := &sandbox.Spec{Workspace: ws, Restrict: restrict(sandbox.Hide, p)}
		res, err := r.Run(context.Background(), spec, &sandbox.Process{Args: []string{"true"}})
		var se *sandbox.SetupError
		if !errors.As(err, &se) || se.Stage != "restrict "+p || !strings.Contains(err.Error(), "symlink") {
			t.Errorf("%s: err %v", p, err)
		}
		if res == nil || res.ExitCode != sandbox.ExitSetupFailed || res.ExitReason != sandbox.ReasonSetupError {
			t.Errorf("%s: result %+v", p, res)
		}
		// The long-lived path reports the same.
		if sb, err := r.Create(context.Background(), spec); !errors.As(err, &se) || se.Stage != "restrict "+p {
			if sb != nil {
				_ = sb.Shutdown(context.Background())
			}
			t.Errorf("%s: create: %v", p, err)
		}
	}
	got, _ := probeRun(t, r, &sandbox.Spec{Workspace: ws, Restrict: restrict(sandbox.Hide, "/workspace/real/x")},
		[]step{{"read", "cat /workspace/real/x"}})
	expect(t, got, map[string]string{"read": eACCES})
}

// TestRestrictInvalidSpec: malformed restrictions are refused before
// anything is created (ErrInvalidSpec, exit 125); a valid list is accepted.
func TestRestrictInvalidSpec(t *testing.T) {
	ok := []sandbox.Restriction{{Path: "/workspace/a", Mode: sandbox.Hide}, {Path: "/etc/ssl", Mode: sandbox.Hide},
		{Path: "/workspace", Mode: sandbox.ReadOnly}, {Path: "/workspace/.git", Mode: sandbox.Pin}, {Path: "/procfs", Mode: sandbox.Hide}}
	if err := validateRestrictions(ok); err != nil {
		t.Fatalf("valid list refused: %v", err)
	}
	bad := map[string][]sandbox.Restriction{
		"relative":  {{Path: "workspace/a", Mode: sandbox.Hide}},
		"empty":     {{Path: "", Mode: sandbox.Hide}},
		"unclean":   {{Path: "/workspace/../etc", Mode: sandbox.Hide}},
		"trailing":  {{Path: "/workspace/a/", Mode: sandbox.Hide}},
		"double":    {{Path: "/workspace//a", Mode: sandbox.Hide}},
		"nul":       {{Path: "/workspace/a\x00b", Mode: sandbox.Hide}},
		"root":      {{Path: "/", Mode: sandbox.ReadOnly}},
		"proc":      {{Path: "/proc", Mode: sandbox.Hide}},
		"proc/x":    {{Path: "/proc/self/environ", Mode: sandbox.Hide}},
		"dev/x":     {{Path: "/dev/null", Mode: sandbox.ReadOnly}},
		"bad mode":  {{Path: "/workspace/a", Mode: "deny"}},
		"no mode":   {{Path: "/workspace/a"}},
		"duplicate": {{Path: "/workspace/a", Mode: sandbox.Hide}, {Path: "/workspace/a", Mode: sandbox.ReadOnly}},
	}
	for name, rs := range bad {
		if err := validateRestrictions(rs); !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Errorf("%s: %v", name, err)
		}
	}
	r := newTestRuntime(t)
	mounts := mountinfo(t)
	for name, rs := range bad {
		res, err := r.Run(context.Background(), &sandbox.Spec{Restrict: rs}, &sandbox.Process{Args: []string{"true"}})
		if !errors.Is(err, sandbox.ErrInvalidSpec) || res.ExitCode != sandbox.ExitSetupFailed {
			t.Errorf("run %s: %v %+v", name, err, res)
		}
		if _, err := r.Create(context.Background(), &sandbox.Spec{Restrict: rs}); !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Errorf("create %s: %v", name, err)
		}
	}
	if mountinfo(t) != mounts {
		t.Error("the host's mount table changed")
	}
}

// TestRestrictLongLived: a long-lived sandbox keeps its restrictions over
// many processes and for its file operations, and reports them in its
// Enforcement.
func TestRestrictLongLived(t *testing.T) {
	r := newTestRuntime(t)
	ws := restrictWorkspace(t, map[string]string{"sec/key": "SECRET", "ro/a": "orig", "pub/a": "public"}, nil)
	hostUnchanged(t, ws, "sec", "ro")
	ctx := context.Background()
	sb, err := r.Create(ctx, &sandbox.Spec{Workspace: ws, Restrict: []sandbox.Restriction{
		{Path: "/workspace/sec", Mode: sandbox.Hide},
		{Path: "/workspace/ro", Mode: sandbox.ReadOnly},
		{Path: "/workspace/missing", Mode: sandbox.Hide},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Shutdown(ctx)
	e := sb.(*linuxSandbox).Enforcement()
	if e.Restricted != 2 || !slices.Equal(e.RestrictSkipped, []string{"/workspace/missing"}) {
		t.Errorf("enforcement: %+v", e)
	}
	for range 2 {
		got := probeExec(t, sb, []step{
			{"read hidden", "cat sec/key"}, {"ctl read", "cat pub/a"},
			{"write ro", "echo x >> ro/a"}, {"ctl write", "echo x >> pub/a"},
			{"mv hidden", "mv sec s2"}, {"mv ro", "mv ro r2"},
		})
		expect(t, got, map[string]string{"read hidden": eACCES, "ctl read": "ok", "write ro": eROFS, "ctl write": "ok",
			"mv hidden": eBUSY, "mv ro": eBUSY})
	}
	f := sb.Files()
	if _, err := f.ReadFile(ctx, "/workspace/sec/key", 1<<10); err == nil {
		t.Error("Files read a hidden file")
	}
	if b, err := f.ReadFile(ctx, "/workspace/pub/a", 1<<10); err != nil || !bytes.HasPrefix(b, []byte("public")) {
		t.Errorf("control: Files read %q %v", b, err)
	}
	if _, err := f.WriteFile(ctx, "/workspace/ro/a", strings.NewReader("evil"), 0o644, 1<<10); err == nil {
		t.Error("Files replaced a read-only file")
	}
	if err := f.Rename(ctx, "/workspace/sec", "/workspace/s3"); err == nil {
		t.Error("Files renamed a hidden directory")
	}
	if res, err := sb.Exec(ctx, &sandbox.Process{Args: []string{"true"}}); err != nil || res.Enforcement == nil || res.Enforcement.Restricted != 2 {
		t.Errorf("exec result enforcement: %v %+v", err, res)
	}
}

// TestRestrictNoPropagation: restrictions inside a host workspace that sits
// on a shared mount (as / is on systemd hosts) do not propagate back to
// the host's mount table.
func TestRestrictNoPropagation(t *testing.T) {
	r := newTestRuntime(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a/b", "a/c", "c"} {
		if err := os.MkdirAll(filepath.Join(dir, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{".", "a", "a/b", "a/c", "c"} {
		if err := os.Chown(filepath.Join(dir, p), hostOwner, hostOwner); err != nil {
			t.Fatal(err)
		}
	}
	mounts := mountinfo(t)
	spec := &sandbox.Spec{Workspace: dir, Binds: []sandbox.Bind{{Source: dir + "/c", Target: "/workspace/a/c", Writable: true}},
		Restrict: []sandbox.Restriction{
			{Path: "/workspace/a", Mode: sandbox.Pin}, {Path: "/workspace/a/b", Mode: sandbox.ReadOnly}, {Path: "/workspace/c", Mode: sandbox.Hide},
		}}
	got, _ := probeRun(t, r, spec, []step{{"write ro", "touch /workspace/a/b/x"}, {"ls hidden", "ls /workspace/c"}})
	expect(t, got, map[string]string{"write ro": eROFS, "ls hidden": eACCES})
	if after := mountinfo(t); after != mounts {
		t.Errorf("host mount table changed:\nbefore:\n%s\nafter:\n%s", mounts, after)
	}
}

// TestRestrictEmptyIsNoop: without restrictions the enforcement carries
// no restriction fields (the init's half: sandboxinit's
// TestRestrictEmptyIsNoop).
func TestRestrictEmptyIsNoop(t *testing.T) {
	if guestRestrictions(nil) != nil {
		t.Fatal("empty list sent")
	}
}

// BenchmarkRunRestrict measures a one-shot run with a host workspace
// without restrictions and with eight (hides, read-only, pins).
func BenchmarkRunRestrict(b *testing.B) {
	r, err := New()
	if err != nil {
		b.Skip(err)
	}
	ws := b.TempDir()
	var rs []sandbox.Restriction
	for i, m := range []sandbox.RestrictMode{sandbox.Hide, sandbox.Hide, sandbox.Hide, sandbox.ReadOnly, sandbox.ReadOnly, sandbox.ReadOnly, sandbox.Pin, sandbox.Pin} {
		name := fmt.Sprintf("e%d", i)
		if i%2 == 0 {
			name += "/"
		}
		full := filepath.Join(ws, name)
		if strings.HasSuffix(name, "/") {
			err = os.Mkdir(full, 0o755)
		} else {
			err = os.WriteFile(full, nil, 0o644)
		}
		if err != nil {
			b.Fatal(err)
		}
		rs = append(rs, sandbox.Restriction{Path: "/workspace/" + strings.TrimSuffix(name, "/"), Mode: m})
	}
	for _, c := range []struct {
		name string
		rs   []sandbox.Restriction
	}{{"none", nil}, {"eight", rs}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				res, err := r.Run(context.Background(), &sandbox.Spec{Workspace: ws, Restrict: c.rs}, &sandbox.Process{Args: []string{"/bin/true"}})
				if err != nil || res.ExitCode != 0 {
					b.Fatal(err, res)
				}
			}
		})
	}
}

// TestRestrictHideCoversMounts: hiding a directory that holds mounts of
// the sandbox (the scratch home under /home, a --rw bind under the
// workspace) hides them too, and the sandbox still starts (Landlock has no
// rule to grant for what is no longer there). Control: without the hide
// both are reachable.
func TestRestrictHideCoversMounts(t *testing.T) {
	r := newTestRuntime(t)
	data := restrictWorkspace(t, map[string]string{"f": "SECRET"}, nil)
	hostUnchanged(t, data, "f")
	steps := []step{{"read bind", "cat /workspace/sub/f"}, {"list home", "ls /home/sandbox"}, {"list workspace", "ls /workspace"}}
	base := sandbox.Spec{Binds: []sandbox.Bind{{Source: data, Target: "/workspace/sub", Writable: true}}}
	ctl, _ := probeRun(t, r, &base, steps)
	expect(t, ctl, map[string]string{"read bind": "ok", "list home": "ok", "list workspace": "ok"})
	spec := base
	spec.Restrict = restrict(sandbox.Hide, "/home", "/workspace")
	res, err := r.Run(context.Background(), &spec, &sandbox.Process{Args: []string{"/bin/sh", "-c", "cd /; " + probeScript(steps)}, Cwd: "/"})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("run: %v %+v", err, res)
	}
	expect(t, parseProbe(t, res), map[string]string{"read bind": eACCES, "list home": eACCES, "list workspace": eACCES})
}
