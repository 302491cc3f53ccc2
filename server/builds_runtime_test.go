package server

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/build"
)

// The build tests below run on the real Linux runtime (root) and the
// host's compilers: what a build's sandbox, its command and the
// collection of its outputs do.

// wantBuild fails the test unless b ended with status and reason; it
// shows the build's log.
func wantBuild(t *testing.T, b api.Build, status, reason string) {
	t.Helper()
	if b.Status != status || b.Reason != reason {
		t.Fatalf("build %s: %s/%s (%s), want %s/%s; log:\n%s%s", b.ID, b.Status, b.Reason, b.Message, status, reason, b.Log.Head, b.Log.Tail)
	}
}

// processWith reports whether a process of the host has arg in its argv.
func processWith(t *testing.T, arg string) bool {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for _, a := range bytes.Split(cmd, []byte{0}) {
			if string(a) == arg {
				return true
			}
		}
	}
	return false
}

// TestBuildC: a C program built with gcc; its artifact is the file
// build.artifact gives (sha256 checked); the same tree packed otherwise
// (gzip, other owners, times and order) has the same source digest and
// gives the same artifact digests (the build is reproducible); another
// tenant can neither see, read, download nor delete it.
func TestBuildC(t *testing.T) {
	h := newHarness(t, nil)
	req := api.CreateBuild{Command: cCommand, Outputs: []string{"out"}, Env: []string{"TOKEN=secret-value"}}
	b1 := h.build(builderA, req, makeTar(t, false, cSource...))
	wantBuild(t, b1, api.BuildSucceeded, "")
	if b1.ExitCode == nil || *b1.ExitCode != 0 || b1.Sandbox == "" || b1.Enforcement == nil || b1.SourceDigest == "" ||
		b1.Toolchain.Template != "host" || b1.SourceDateEpoch != build.DefaultEpoch || !strings.Contains(b1.Log.Head, "hello from a build") {
		t.Fatalf("build: %+v", b1)
	}
	if len(b1.Artifacts) != 1 || b1.Artifacts[0].Path != "out/hello" || b1.Artifacts[0].Mode&0o100 == 0 {
		t.Fatalf("artifacts: %+v", b1.Artifacts)
	}
	for _, name := range []string{"TOKEN", "HOME", "TMPDIR", "SOURCE_DATE_EPOCH"} {
		if !strings.Contains(strings.Join(b1.Env, ","), name) {
			t.Errorf("env names %v lack %s", b1.Env, name)
		}
	}
	if _, ok := h.svc.sandboxes[b1.Sandbox]; ok {
		t.Errorf("the build's sandbox %s is still there", b1.Sandbox)
	}
	art := b1.Artifacts[0]
	r := h.callBuild(context.Background(), builderA, api.OpBuildArtifact, api.BuildArtifactRef{ID: b1.ID, Digest: art.SHA256}, nil)
	if r.err != nil {
		t.Fatal(r.err)
	}
	sum := sha256.Sum256(r.out)
	if hex.EncodeToString(sum[:]) != art.SHA256 || int64(len(r.out)) != art.Size || !bytes.HasPrefix(r.out, []byte("\x7fELF")) {
		t.Fatalf("downloaded %d bytes of sha256 %x, want %+v", len(r.out), sum, art)
	}

	// The same tree, packed otherwise.
	other := []tarEntry{
		{name: "./", typ: tar.TypeDir, uid: 501, mtime: time.Unix(1e9, 0)},
		{name: "./src/main.c", body: cSource[1].body, uid: 501, mtime: time.Unix(2e9, 0)},
		{name: "./src/", typ: tar.TypeDir, uid: 0, mtime: time.Unix(3e9, 0)},
	}
	b2 := h.build(builderA, req, makeTar(t, true, other...))
	wantBuild(t, b2, api.BuildSucceeded, "")
	if b2.SourceDigest != b1.SourceDigest {
		t.Errorf("source digests %s and %s", b1.SourceDigest, b2.SourceDigest)
	}
	if len(b2.Artifacts) != 1 || b2.Artifacts[0].SHA256 != art.SHA256 {
		t.Errorf("not reproducible: %+v and %+v", b1.Artifacts, b2.Artifacts)
	}

	// Another tenant: not found, each way; the owner: found.
	if _, err := h.getBuild(builderB, b1.ID, false); !isCode(err, api.CodeNotFound) {
		t.Errorf("get: %v", err)
	}
	if _, _, err := h.buildLogText(builderB, b1.ID, 0, false); !isCode(err, api.CodeNotFound) {
		t.Errorf("log: %v", err)
	}
	r = h.callBuild(context.Background(), builderB, api.OpBuildArtifact, api.BuildArtifactRef{ID: b1.ID, Digest: art.SHA256}, nil)
	if !isCode(r.err, api.CodeNotFound) || len(r.out) != 0 {
		t.Errorf("artifact: %v, %d bytes", r.err, len(r.out))
	}
	r = h.callBuild(context.Background(), builderB, api.OpBuildDelete, api.BuildRef{ID: b1.ID}, nil)
	wantCode(t, "delete", r.err, api.CodeNotFound)
	r = h.callBuild(context.Background(), builderB, api.OpBuildList, api.ListBuilds{}, nil)
	if r.err != nil || len(r.resp.(*api.BuildList).Builds) != 0 {
		t.Errorf("list: %+v %v", r.resp, r.err)
	}
	if text, _, err := h.buildLogText(builderA, b1.ID, 0, false); err != nil || !strings.Contains(text, "hello from a build") {
		t.Errorf("the owner's log: %q %v", text, err)
	}
	r = h.callBuild(context.Background(), builderA, api.OpBuildList, api.ListBuilds{Status: api.BuildSucceeded}, nil)
	if r.err != nil || len(r.resp.(*api.BuildList).Builds) != 2 || r.resp.(*api.BuildList).Builds[0].ID != b2.ID {
		t.Errorf("the owner's list: %+v %v", r.resp, r.err)
	}
	r = h.callBuild(context.Background(), builderA, api.OpBuildArtifact, api.BuildArtifactRef{ID: b1.ID, Digest: strings.Repeat("0", 64)}, nil)
	wantCode(t, "unknown digest", r.err, api.CodeNotFound)
	// The audit: one build event each, the command's calls as the
	// owner's, never an environment value.
	evs := h.buildEvents("a")
	if len(evs) != 2 {
		t.Fatalf("build events: %+v", evs)
	}
	for _, ev := range evs {
		if ev.Actor != builderA.Actor || !strings.Contains(string(ev.Result), art.SHA256) || strings.Contains(string(ev.Request), "secret-value") {
			t.Errorf("event: %+v", ev)
		}
	}
	// Deleted by its owner: record, log and outputs.
	r = h.callBuild(context.Background(), builderA, api.OpBuildDelete, api.BuildRef{ID: b1.ID}, nil)
	if r.err != nil || r.resp.(*api.Build).ID != b1.ID {
		t.Fatalf("delete: %v", r.err)
	}
	if _, err := os.Stat(h.svc.builds.path(b1.ID)); !os.IsNotExist(err) {
		t.Errorf("files left: %v", err)
	}
	if _, err := h.getBuild(builderA, b1.ID, false); !isCode(err, api.CodeNotFound) {
		t.Errorf("get after delete: %v", err)
	}
}

// TestBuildFailures: a compile error, a timeout (the whole tree killed:
// no process left), and the log as it was written.
func TestBuildFailures(t *testing.T) {
	h := newHarness(t, nil)
	bad := makeTar(t, false, tarEntry{name: "main.c", body: "int main(void) { return missing; }\n"})
	b := h.build(builderA, api.CreateBuild{Command: []string{"gcc", "-c", "main.c"}}, bad)
	wantBuild(t, b, api.BuildFailed, api.ReasonCompileFailed)
	if b.ExitCode == nil || *b.ExitCode == 0 || !strings.Contains(b.Log.Head, "missing") {
		t.Errorf("compile_failed: %+v", b)
	}

	src := makeTar(t, false, tarEntry{name: "f", body: "x"})
	b = h.build(builderA, api.CreateBuild{Command: []string{"sh", "-c", "sleep 987654 & sleep 987654"}, TimeoutMs: 500}, src)
	wantBuild(t, b, api.BuildTimeout, api.ReasonTimeout)
	if processWith(t, "987654") {
		t.Error("a process of the build outlived it")
	}
	if _, ok := h.svc.sandboxes[b.Sandbox]; ok || b.Sandbox == "" {
		t.Errorf("the build's sandbox %q is still there", b.Sandbox)
	}
	// Control: within its timeout.
	b = h.build(builderA, api.CreateBuild{Command: []string{"sh", "-c", "sleep 0.1"}, TimeoutMs: 30000}, src)
	wantBuild(t, b, api.BuildSucceeded, "")

	// The environment, exactly: moat's variables, the caller's; /src
	// holds the source, writable, and the command's writes stay in the
	// sandbox.
	b = h.build(builderA, api.CreateBuild{Command: []string{"sh", "-c", "env; pwd; echo y >> f; cat f; touch /usr/bin/moat-probe 2>/dev/null && echo usr-writable; true"},
		Env: []string{"LANG=C", "MINE=1"}}, src)
	wantBuild(t, b, api.BuildSucceeded, "")
	if strings.Contains(b.Log.Head, "usr-writable") {
		t.Error("the host's /usr is writable in a build")
	}
	for _, want := range []string{"HOME=/build/home", "TMPDIR=/build/tmp", "XDG_CACHE_HOME=/build/cache", "LANG=C\n",
		"MINE=1", "SOURCE_DATE_EPOCH=315532800", "\n/src\n", "xy\n"} {
		if !strings.Contains(b.Log.Head, want) {
			t.Errorf("log lacks %q:\n%s", want, b.Log.Head)
		}
	}
}

// TestBuildOutputs: a declared output that is absent, or a symlink (to a
// host file: not followed, not copied), is output_missing; a symlink
// inside an output directory is skipped; outputs over the cap are
// output_too_large; the controls succeed.
func TestBuildOutputs(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Build.MaxOutputBytes = 1 << 20 })
	src := makeTar(t, false, tarEntry{name: "f", body: "x"})
	run := func(script string, outputs ...string) api.Build {
		t.Helper()
		return h.build(builderA, api.CreateBuild{Command: []string{"sh", "-c", script}, Outputs: outputs}, src)
	}
	b := run("true", "absent")
	wantBuild(t, b, api.BuildFailed, api.ReasonOutputMissing)

	secret := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(secret, []byte("the host's secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	b = run("ln -s "+secret+" out.bin", "out.bin")
	wantBuild(t, b, api.BuildFailed, api.ReasonOutputMissing)
	if len(b.Artifacts) != 0 {
		t.Errorf("artifacts: %+v", b.Artifacts)
	}
	filepath.WalkDir(h.svc.builds.path(b.ID), func(p string, d os.DirEntry, err error) error {
		if data, rerr := os.ReadFile(p); rerr == nil && bytes.Contains(data, []byte("host's secret")) {
			t.Errorf("%s holds the host's file", p)
		}
		return nil
	})

	// A symlink inside an output directory: skipped; the file beside it
	// and a regular file output collected.
	b = run("mkdir -p d/sub && echo ok > d/sub/ok && ln -s "+secret+" d/link && echo top > top.txt", "d", "top.txt")
	wantBuild(t, b, api.BuildSucceeded, "")
	var paths []string
	for _, a := range b.Artifacts {
		paths = append(paths, a.Path)
	}
	if strings.Join(paths, ",") != "d/sub/ok,top.txt" || strings.Join(b.Skipped, ",") != "d/link" {
		t.Errorf("artifacts %v, skipped %v", paths, b.Skipped)
	}

	// The cap (1 MiB, all outputs together).
	b = run("head -c 700000 /dev/zero > a && head -c 700000 /dev/zero > b", "a", "b")
	wantBuild(t, b, api.BuildFailed, api.ReasonOutputTooLarge)
	if len(b.Artifacts) != 0 {
		t.Errorf("artifacts: %+v", b.Artifacts)
	}
	if _, err := os.Stat(outDir(h.svc.builds.path(b.ID))); !os.IsNotExist(err) {
		t.Errorf("the outputs of a failed build are kept: %v", err)
	}
	b = run("head -c 2000000 /dev/zero > big", "big")
	wantBuild(t, b, api.BuildFailed, api.ReasonOutputTooLarge)
	b = run("head -c 500000 /dev/zero > a && head -c 500000 /dev/zero > b", "a", "b")
	wantBuild(t, b, api.BuildSucceeded, "")
	if len(b.Artifacts) != 2 || b.Artifacts[0].Size != 500000 {
		t.Errorf("artifacts: %+v", b.Artifacts)
	}
}

// TestBuildLogFlood: a command writing 200 MiB with a log cap of 1 MiB:
// the log keeps 1 MiB, counts it all, and the daemon's memory does not
// grow with it.
func TestBuildLogFlood(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Build.MaxLogBytes = 1 << 20 })
	src := makeTar(t, false, tarEntry{name: "f", body: "x"})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b := h.build(builderA, api.CreateBuild{Command: []string{"sh", "-c", "head -c 104857600 /dev/zero; head -c 104857600 /dev/zero >&2"}}, src)
	runtime.ReadMemStats(&after)
	wantBuild(t, b, api.BuildSucceeded, "")
	if !b.Log.Truncated || b.Log.Kept != 1<<20 || b.Log.Bytes < 200<<20 {
		t.Fatalf("log: kept %d of %d, truncated %v", b.Log.Kept, b.Log.Bytes, b.Log.Truncated)
	}
	if fi, err := os.Stat(logPath(h.svc.builds.path(b.ID))); err != nil || fi.Size() != 1<<20 {
		t.Errorf("log file: %v %v", fi, err)
	}
	text, _, err := h.buildLogText(builderA, b.ID, 1<<20-10, false)
	if err != nil || len(text) != 10 {
		t.Errorf("log from an offset: %d bytes, %v", len(text), err)
	}
	grew := after.TotalAlloc - before.TotalAlloc
	t.Logf("the daemon allocated %d MiB while the build wrote %d MiB", grew>>20, b.Log.Bytes>>20)
	if grew > 64<<20 {
		t.Errorf("the daemon allocated %d MiB for a log of %d MiB", grew>>20, b.Log.Bytes>>20)
	}
}

// TestBuildDetachFollowDelete: a detached build answers at once; its log
// follows what the command writes to the build's end; build.delete stops
// a running build (no process left) and removes it.
func TestBuildDetachFollowDelete(t *testing.T) {
	h := newHarness(t, nil)
	src := makeTar(t, false, tarEntry{name: "f", body: "x"})
	b := h.build(builderA, api.CreateBuild{Command: []string{"sh", "-c", "for i in 1 2 3; do echo line $i; sleep 0.1; done"}, Detach: true}, src)
	if b.Status != api.BuildRunning || b.SourceDigest == "" {
		t.Fatalf("detached: %+v", b)
	}
	text, final, err := h.buildLogText(builderA, b.ID, 0, true)
	if err != nil || text != "line 1\nline 2\nline 3\n" || final.Status != api.BuildSucceeded {
		t.Fatalf("followed %q to %+v: %v", text, final, err)
	}
	got, err := h.getBuild(builderA, b.ID, true)
	if err != nil || got.Status != api.BuildSucceeded || got.Log.Bytes != int64(len(text)) {
		t.Fatalf("get: %+v %v", got, err)
	}

	b = h.build(builderA, api.CreateBuild{Command: []string{"sh", "-c", "echo started; exec sleep 987653"}, Detach: true}, src)
	// Wait for the command to run: its first line.
	if text, _, err := h.buildLogText(builderA, b.ID, 0, false); err != nil {
		t.Fatal(err)
	} else if text == "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		run := h.svc.builds.running("a", b.ID)
		if run == nil {
			t.Fatal("the build is not running")
		}
		run.mu.Lock()
		log := run.log
		run.mu.Unlock()
		if _, _, err := log.Wait(ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
	r := h.callBuild(context.Background(), builderA, api.OpBuildDelete, api.BuildRef{ID: b.ID}, nil)
	if r.err != nil {
		t.Fatal(r.err)
	}
	del := r.resp.(*api.Build)
	if del.Status != api.BuildFailed || del.Reason != api.ReasonInterrupted || !strings.Contains(del.Message, "deleted") {
		t.Errorf("deleted: %+v", del)
	}
	if processWith(t, "987653") {
		t.Error("the deleted build's process is still there")
	}
	if _, err := h.getBuild(builderA, b.ID, false); !isCode(err, api.CodeNotFound) {
		t.Errorf("get after delete: %v", err)
	}
}
