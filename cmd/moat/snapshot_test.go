package main

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// snapRun runs `moat snapshot ARGS...` in-process.
func snapRun(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return cliRun("snapshot", runSnapshot, "", args...)
}

func TestSnapshotCLIUsage(t *testing.T) {
	out, _, code := snapRun(t, "fork", "--help")
	if code != 0 || !strings.Contains(out, "Usage:\n  moat snapshot fork [--count N] [flags] SNAPSHOT") || !strings.Contains(out, "--count N") || !strings.Contains(out, "--memory SIZE") {
		t.Fatalf("fork --help (%d):\n%s", code, out)
	}
	if out, _, code := snapRun(t, "help"); code != 0 || !strings.Contains(out, "fork   Create sandboxes") {
		t.Fatalf("help (%d):\n%s", code, out)
	}
	for _, args := range [][]string{{}, {"bogus"}, {"ls", "x"}, {"rm"}, {"fork"}, {"fork", "a", "b"}, {"fork", "a", "--count", "0"},
		{"fork", "a", "--count", "65"}, {"fork", "a", "--memory", "lots"}, {"fork", "a", "--label", "nokey"}} {
		if _, errOut, code := snapRun(t, args...); code != 125 || errOut == "" {
			t.Errorf("snapshot %q: exit %d, stderr %q", args, code, errOut)
		}
	}
	for _, args := range [][]string{{"snapshot"}, {"snapshot", "a", "b"}, {"restore", "a"}, {"create", "extra"}} {
		if _, errOut, code := sbRun(t, "", args...); code != 125 || errOut == "" {
			t.Errorf("sandbox %q: exit %d, stderr %q", args, code, errOut)
		}
	}
	// The commands are registered.
	var o, e strings.Builder
	if code := execute(t.Context(), []string{"--help"}, &o, &e); code != 0 || !strings.Contains(o.String(), "  snapshot ") || !strings.Contains(o.String(), "  template ") {
		t.Fatalf("moat --help (%d):\n%s", code, o.String())
	}
}

// TestSnapshotCLIFake: the snapshot commands send what their flags say
// and print the daemon's answers; a missing or busy snapshot exits 1.
func TestSnapshotCLIFake(t *testing.T) {
	mux := fakeDaemon(t)
	mux.HandleFunc("POST /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		var req api.CreateSandbox
		json.NewDecoder(r.Body).Decode(&req)
		if req.Template != "py" || req.Snapshot != "snap-1" || req.Limits.Pids != 64 {
			t.Errorf("create body %+v", req)
		}
		replyJSON(w, 201, api.Sandbox{ID: "sb-1", State: api.StateRunning, Template: req.Template, Snapshot: req.Snapshot})
	})
	mux.HandleFunc("POST /v1/sandboxes/sb-1/snapshots", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 200, api.Snapshot{ID: "snap-1", Template: "py", Sandbox: "sb-1", Bytes: 2048, Entries: 3, Whiteouts: 1, Depth: 2, PausedMs: 4})
	})
	mux.HandleFunc("POST /v1/sandboxes/sb-2/snapshots", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 400, api.Error{Code: api.CodeInvalidArgument, Message: "sandbox sb-2 has a host directory as its workspace"})
	})
	mux.HandleFunc("POST /v1/sandboxes/sb-1/restore", func(w http.ResponseWriter, r *http.Request) {
		var req api.RestoreSandbox
		json.NewDecoder(r.Body).Decode(&req)
		if req.Snapshot != "snap-1" {
			replyJSON(w, 404, api.Error{Code: api.CodeNotFound, Message: "no snapshot " + req.Snapshot})
			return
		}
		replyJSON(w, 200, api.Sandbox{ID: "sb-1", State: api.StateRunning, Template: "py", Snapshot: "snap-1"})
	})
	mux.HandleFunc("GET /v1/snapshots", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 200, api.SnapshotList{Snapshots: []api.Snapshot{
			{ID: "snap-1", Template: "py", Sandbox: "sb-1", Bytes: 2048, Entries: 3, Depth: 1, Created: time.Now().Add(-2 * time.Minute)},
			{ID: "snap-2", Parent: "snap-1", Template: "py", Bytes: 10, Entries: 1, Depth: 2},
		}})
	})
	mux.HandleFunc("DELETE /v1/snapshots/{snapshot}", func(w http.ResponseWriter, r *http.Request) {
		switch id := r.PathValue("snapshot"); id {
		case "snap-1":
			replyJSON(w, 409, api.Error{Code: api.CodeConflict, Message: "snapshot snap-1 has snapshots layered on it: in use"})
		case "snap-2":
			replyJSON(w, 200, api.Snapshot{ID: id})
		default:
			replyJSON(w, 404, api.Error{Code: api.CodeNotFound, Message: "no snapshot " + id})
		}
	})
	mux.HandleFunc("POST /v1/snapshots/{snapshot}/fork", func(w http.ResponseWriter, r *http.Request) {
		var req api.ForkSnapshot
		json.NewDecoder(r.Body).Decode(&req)
		if req.Snapshot != "snap-1" {
			replyJSON(w, 404, api.Error{Code: api.CodeNotFound, Message: "no snapshot " + req.Snapshot})
			return
		}
		if req.Count != 3 || req.Sandbox.Labels["run"] != "a" || req.Sandbox.Limits.MemoryBytes != 256<<20 || req.Sandbox.IdleTimeoutMs != 60_000 {
			t.Errorf("fork body %+v", req)
		}
		list := api.SandboxList{}
		for _, id := range []string{"sb-a", "sb-b", "sb-c"} {
			list.Sandboxes = append(list.Sandboxes, api.Sandbox{ID: id, Snapshot: "snap-1"})
		}
		replyJSON(w, 200, list)
	})

	if out, errOut, code := sbRun(t, "", "create", "--template", "py", "--snapshot", "snap-1", "--pids", "64"); code != 0 || out != "sb-1\n" {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	out, errOut, code := sbRun(t, "", "snapshot", "sb-1")
	if code != 0 || out != "snap-1\n" || errOut != "moat: snapshot snap-1 of sb-1: 2.0 KiB in 3 entries (1 deleted), depth 2, sandbox paused 4 ms\n" {
		t.Fatalf("snapshot: %d %q %q", code, out, errOut)
	}
	out, _, _ = sbRun(t, "", "snapshot", "--json", "sb-1")
	var sn api.Snapshot
	if err := json.Unmarshal([]byte(out), &sn); err != nil || sn.ID != "snap-1" || sn.Bytes != 2048 {
		t.Fatalf("snapshot --json: %q %v", out, err)
	}
	if _, errOut, code := sbRun(t, "", "snapshot", "sb-2"); code != 125 || !strings.Contains(errOut, "host directory") {
		t.Fatalf("snapshot refused: %d %q", code, errOut)
	}
	if out, errOut, code := sbRun(t, "", "restore", "sb-1", "snap-1"); code != 0 || out != "sb-1\n" {
		t.Fatalf("restore: %d %q %q", code, out, errOut)
	}
	if _, errOut, code := sbRun(t, "", "restore", "sb-1", "snap-x"); code != 125 || !strings.Contains(errOut, "no snapshot snap-x") {
		t.Fatalf("restore of a missing snapshot: %d %q", code, errOut)
	}

	out, errOut, code = snapRun(t, "ls")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "ID ") || !strings.Contains(lines[1], "2.0 KiB") || !strings.Contains(lines[1], "2m ago") ||
		!strings.Contains(lines[2], " snap-1 ") {
		t.Fatalf("ls: %d %q\n%s", code, errOut, out)
	}
	out, _, _ = snapRun(t, "ls", "--json")
	var list []api.Snapshot
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 2 || list[1].Parent != "snap-1" {
		t.Fatalf("ls --json: %q %v", out, err)
	}

	out, errOut, code = snapRun(t, "rm", "snap-2", "snap-1", "snap-x")
	if code != 1 || out != "snap-2\n" || !strings.Contains(errOut, "snap-1: conflict") || !strings.Contains(errOut, "snap-x: not_found") {
		t.Fatalf("rm: %d %q %q", code, out, errOut)
	}

	out, errOut, code = snapRun(t, "fork", "snap-1", "-n", "3", "--memory", "256m", "-l", "run=a", "--idle-timeout", "1m")
	if code != 0 || out != "sb-a\nsb-b\nsb-c\n" {
		t.Fatalf("fork: %d %q %q", code, out, errOut)
	}
	out, _, _ = snapRun(t, "fork", "--json", "--count", "3", "--memory", "256m", "-l", "run=a", "--idle-timeout", "1m", "snap-1")
	var sbs []api.Sandbox
	if err := json.Unmarshal([]byte(out), &sbs); err != nil || len(sbs) != 3 || sbs[2].ID != "sb-c" {
		t.Fatalf("fork --json: %q %v", out, err)
	}
	if _, errOut, code := snapRun(t, "fork", "snap-x"); code != 1 || !strings.Contains(errOut, "moat snapshot fork: ") || !strings.Contains(errOut, "no snapshot snap-x") {
		t.Fatalf("fork of a missing snapshot: %d %q", code, errOut)
	}
}

// TestSnapshotCLIDaemon: through the CLI and a real daemon with a private
// store: a sandbox of an imported template is snapshotted, changed and
// restored; forks of the snapshot see its files; what is in use cannot
// be removed.
func TestSnapshotCLIDaemon(t *testing.T) {
	testutil.RequireRoot(t)
	store := t.TempDir()
	importTiny(t, store, "tiny")
	dir := t.TempDir()
	sock := filepath.Join(dir, "api.sock")
	d := testutil.StartDaemon(t, dir, "--listen", "unix:"+sock, "--store", store)
	t.Setenv("MOAT_MODE", "")
	t.Setenv("MOAT_URL", "unix:"+sock)
	t.Setenv("MOAT_TOKEN", d.Token)

	must := func(out, errOut string, code int) string {
		t.Helper()
		if code != 0 {
			t.Fatalf("exit %d\nstdout %q\nstderr %q", code, out, errOut)
		}
		return out
	}
	id := strings.TrimSpace(must(sbRun(t, "", "create", "--template", "tiny")))
	if got := must(sbRun(t, "", "exec", id, "--", "sh", "-c", "echo one > /workspace/f; cat /etc/marker /workspace/f")); got != "tiny\none\n" {
		t.Fatalf("exec in the template's sandbox: %q", got)
	}
	out, errOut, code := sbRun(t, "", "snapshot", id)
	snap := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(snap, "snap-") || !strings.Contains(errOut, "moat: snapshot "+snap+" of "+id+": ") {
		t.Fatalf("snapshot: %d %q %q", code, out, errOut)
	}
	must(sbRun(t, "", "exec", id, "--", "sh", "-c", "echo two > /workspace/f; echo new > /workspace/g"))
	if got := must(sbRun(t, "", "restore", id, snap)); got != id+"\n" {
		t.Fatalf("restore printed %q", got)
	}
	if got := must(sbRun(t, "", "exec", id, "--", "sh", "-c", "cat /workspace/f; cat /workspace/g 2>/dev/null || echo no-g")); got != "one\nno-g\n" {
		t.Fatalf("after restore: %q", got)
	}

	if got := must(snapRun(t, "ls")); !strings.Contains(got, "\n"+snap+" ") || !strings.Contains(got, " tiny ") {
		t.Fatalf("snapshot ls:\n%s", got)
	}
	forks := strings.Fields(must(snapRun(t, "fork", "--count", "2", snap)))
	if len(forks) != 2 || forks[0] == forks[1] || slices.Contains(forks, id) {
		t.Fatalf("fork: %q", forks)
	}
	for _, fk := range forks {
		if got := must(sbRun(t, "", "exec", fk, "--", "cat", "/workspace/f", "/etc/marker")); got != "one\ntiny\n" {
			t.Fatalf("fork %s: %q", fk, got)
		}
	}
	var listed []api.Sandbox
	if err := json.Unmarshal([]byte(must(sbRun(t, "", "ls", "--json"))), &listed); err != nil {
		t.Fatal(err)
	}
	for _, s := range listed {
		if slices.Contains(forks, s.ID) && (s.Template != "tiny" || s.Snapshot != snap) {
			t.Fatalf("fork listed as %+v", s)
		}
	}
	// A sandbox created from the snapshot has it too.
	other := strings.TrimSpace(must(sbRun(t, "", "create", "--snapshot", snap)))
	if got := must(sbRun(t, "", "exec", other, "--", "cat", "/workspace/f")); got != "one\n" {
		t.Fatalf("create --snapshot: %q", got)
	}

	// In use: the snapshot by live sandboxes, the template by its snapshot.
	if _, errOut, code := snapRun(t, "rm", snap); code != 1 || !strings.Contains(errOut, "in use") {
		t.Fatalf("rm of a snapshot in use: %d %q", code, errOut)
	}
	if o := testutil.Exec(t, "template", "rm", "--store", store, "tiny"); o.Code != 1 || !strings.Contains(o.Stderr, "in use") {
		t.Fatalf("template rm of a template in use: exit %d %q", o.Code, o.Stderr)
	}
	must(sbRun(t, "", append([]string{"rm", id, other}, forks...)...))
	if got := must(snapRun(t, "rm", snap)); got != snap+"\n" {
		t.Fatalf("rm: %q", got)
	}
	if _, errOut, code := snapRun(t, "rm", snap); code != 1 || !strings.Contains(errOut, "not_found") {
		t.Fatalf("rm again: %d %q", code, errOut)
	}
	// A live sandbox of the template keeps it.
	live := strings.TrimSpace(must(sbRun(t, "", "create", "--template", "tiny")))
	if o := testutil.Exec(t, "template", "rm", "--store", store, "tiny"); o.Code != 1 || !strings.Contains(o.Stderr, "live sandbox") {
		t.Fatalf("template rm with a live sandbox: exit %d %q", o.Code, o.Stderr)
	}
	must(sbRun(t, "", "rm", live))
	if o := testutil.Exec(t, "template", "rm", "--store", store, "tiny"); o.Code != 0 || o.Stdout != "tiny\n" {
		t.Fatalf("template rm: exit %d %q %q", o.Code, o.Stdout, o.Stderr)
	}
}
