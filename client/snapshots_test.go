package client

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/sandbox"
)

// TestHTTPSnapshots: each template and snapshot method sends its
// operation's route and body, and reads its answer.
func TestHTTPSnapshots(t *testing.T) {
	c, mux := newFakeHTTP(t)
	ctx := testCtx(t)
	mux.HandleFunc("GET /v1/templates", func(w http.ResponseWriter, r *http.Request) {
		checkQuery(t, r, "")
		writeJSON(w, 200, api.TemplateList{Templates: []api.Template{{Name: "host", Source: "host"}, {Name: "py", Source: "dir:/srv/py", Bytes: 42, Pool: 2}}})
	})
	mux.HandleFunc("POST /v1/sandboxes/sb-1/snapshots", expectJSON(t, api.CreateSnapshot{Sandbox: "sb-1"},
		api.Snapshot{ID: "snap-1", Template: "py", Sandbox: "sb-1", Bytes: 10, Depth: 1, PausedMs: 3}))
	mux.HandleFunc("POST /v1/sandboxes/sb-1/restore", expectJSON(t, api.RestoreSandbox{Sandbox: "sb-1", Snapshot: "snap-1"},
		api.Sandbox{ID: "sb-1", State: api.StateRunning, Template: "py", Snapshot: "snap-1"}))
	mux.HandleFunc("GET /v1/snapshots", func(w http.ResponseWriter, r *http.Request) {
		checkQuery(t, r, "")
		writeJSON(w, 200, api.SnapshotList{Snapshots: []api.Snapshot{{ID: "snap-1"}, {ID: "snap-2", Parent: "snap-1", Depth: 2}}})
	})
	mux.HandleFunc("GET /v1/snapshots/{snapshot}", func(w http.ResponseWriter, r *http.Request) {
		if id := r.PathValue("snapshot"); id != "snap-1" {
			writeJSON(w, 404, api.Error{Code: api.CodeNotFound, Message: "no snapshot " + id})
			return
		}
		writeJSON(w, 200, api.Snapshot{ID: "snap-1", Template: "py"})
	})
	mux.HandleFunc("DELETE /v1/snapshots/{snapshot}", func(w http.ResponseWriter, r *http.Request) {
		if id := r.PathValue("snapshot"); id == "snap-used" {
			writeJSON(w, 409, api.Error{Code: api.CodeConflict, Message: "snapshot snap-used is used by a live sandbox: in use"})
			return
		}
		writeJSON(w, 200, api.Snapshot{ID: r.PathValue("snapshot")})
	})
	mux.HandleFunc("POST /v1/snapshots/snap-1/fork", func(w http.ResponseWriter, r *http.Request) {
		var req api.ForkSnapshot
		decodeBody(t, r, &req)
		if req.Snapshot != "snap-1" || req.Count != 2 || req.Sandbox.Labels["k"] != "v" || req.Sandbox.Limits.Pids != 64 {
			t.Errorf("fork body %+v", req)
		}
		writeJSON(w, 200, api.SandboxList{Sandboxes: []api.Sandbox{{ID: "sb-a", Snapshot: "snap-1"}, {ID: "sb-b", Snapshot: "snap-1"}}})
	})

	ts, err := c.Templates(ctx)
	if err != nil || len(ts) != 2 || ts[0].Name != "host" || ts[1].Pool != 2 {
		t.Fatalf("templates: %+v %v", ts, err)
	}
	sb := c.Sandbox("sb-1")
	sn, err := sb.TakeSnapshot(ctx)
	if err != nil || sn.ID != "snap-1" || sn.PausedMs != 3 {
		t.Fatalf("take snapshot: %+v %v", sn, err)
	}
	if sb.Snapshot() != nil {
		t.Fatalf("taking a snapshot changed the cached description: %+v", sb.Snapshot())
	}
	info, err := sb.Restore(ctx, "snap-1")
	if err != nil || info.Snapshot != "snap-1" || sb.Snapshot() == nil || sb.Snapshot().Snapshot != "snap-1" {
		t.Fatalf("restore: %+v %v (cached %+v)", info, err, sb.Snapshot())
	}
	list, err := c.Snapshots(ctx)
	if err != nil || len(list) != 2 || list[1].Parent != "snap-1" {
		t.Fatalf("snapshots: %+v %v", list, err)
	}
	if got, err := c.GetSnapshot(ctx, "snap-1"); err != nil || got.Template != "py" {
		t.Fatalf("get: %+v %v", got, err)
	}
	if _, err := c.GetSnapshot(ctx, "snap-x"); !IsNotFound(err) {
		t.Fatalf("get a missing snapshot: %v", err)
	}
	if err := c.DeleteSnapshot(ctx, "snap-2"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := c.DeleteSnapshot(ctx, "snap-used"); Code(err) != api.CodeConflict {
		t.Fatalf("delete a snapshot in use: %v", err)
	}
	forks, err := c.Fork(ctx, "snap-1", 2, api.CreateSandbox{Labels: map[string]string{"k": "v"}, Limits: sandbox.Limits{Pids: 64}})
	if err != nil || len(forks) != 2 || forks[0].ID() != "sb-a" || forks[1].Snapshot().ID != "sb-b" || forks[1].Snapshot().Snapshot != "snap-1" {
		t.Fatalf("fork: %v %v", forks, err)
	}
	// An empty id is refused before anything is sent.
	if _, err := c.GetSnapshot(ctx, ""); Code(err) != api.CodeInvalidArgument {
		t.Fatalf("get with no id: %v", err)
	}
}

// expectJSON is a handler that checks that the JSON request body is want
// and answers answer.
func expectJSON[T comparable](t *testing.T, want T, answer any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var got T
		decodeBody(t, r, &got)
		if got != want {
			t.Errorf("%s %s: body %+v, want %+v", r.Method, r.URL.Path, got, want)
		}
		writeJSON(w, 200, answer)
	}
}

// TestSnapshotsAgainstDaemon runs the template and snapshot methods
// against a real `moat serve` with a private store, over HTTP and stdio.
func TestSnapshotsAgainstDaemon(t *testing.T) {
	testutil.RequireRoot(t)
	d := testutil.StartDaemon(t, t.TempDir(), "--listen", "127.0.0.1:0", "--store", t.TempDir())
	for _, tc := range []struct {
		name string
		opt  Option
	}{
		{"http", WithHTTP(d.URL, d.Token)},
		{"stdio", WithStdio(testutil.Moat(t), "serve", "--stdio", "--data", t.TempDir(), "--store", t.TempDir())},
	} {
		t.Run(tc.name, func(t *testing.T) { exerciseSnapshots(t, tc.opt) })
	}
}

func exerciseSnapshots(t *testing.T, opt Option) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ts, err := c.Templates(ctx)
	if err != nil || len(ts) == 0 || ts[0].Name != "host" {
		t.Fatalf("templates: %+v %v", ts, err)
	}
	sb, err := c.CreateSandbox(ctx, api.CreateSandbox{})
	if err != nil {
		t.Fatal(err)
	}
	const f = "/workspace/state.txt"
	if err := sb.WriteFile(ctx, f, []byte("one\n"), 0); err != nil {
		t.Fatal(err)
	}
	sn, err := sb.TakeSnapshot(ctx)
	if err != nil {
		t.Fatalf("take snapshot: %v", err)
	}
	if sn.ID == "" || sn.Template != "host" || sn.Sandbox != sb.ID() || sn.Depth != 1 || sn.Bytes < 4 {
		t.Fatalf("snapshot: %+v", sn)
	}
	if err := sb.WriteFile(ctx, f, []byte("two\n"), 0); err != nil {
		t.Fatal(err)
	}
	info, err := sb.Restore(ctx, sn.ID)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if info.ID != sb.ID() || info.Snapshot != sn.ID || sb.Snapshot().Snapshot != sn.ID {
		t.Fatalf("restored: %+v (cached %+v)", info, sb.Snapshot())
	}
	if b, err := sb.ReadFile(ctx, f); err != nil || string(b) != "one\n" {
		t.Fatalf("after restore: %q %v", b, err)
	}
	list, err := c.Snapshots(ctx)
	if err != nil || !slices.ContainsFunc(list, func(s api.Snapshot) bool { return s.ID == sn.ID }) {
		t.Fatalf("snapshots: %+v %v", list, err)
	}
	if got, err := c.GetSnapshot(ctx, sn.ID); err != nil || got.ID != sn.ID || got.Bytes != sn.Bytes {
		t.Fatalf("get: %+v %v", got, err)
	}
	forks, err := c.Fork(ctx, sn.ID, 2, api.CreateSandbox{Labels: map[string]string{"fork": "yes"}})
	if err != nil || len(forks) != 2 {
		t.Fatalf("fork: %v %v", forks, err)
	}
	for _, fk := range forks {
		if fk.ID() == sb.ID() || fk.Snapshot().Snapshot != sn.ID || fk.Snapshot().Labels["fork"] != "yes" {
			t.Fatalf("fork: %+v", fk.Snapshot())
		}
		if b, err := fk.ReadFile(ctx, f); err != nil || string(b) != "one\n" {
			t.Fatalf("fork %s: %q %v", fk.ID(), b, err)
		}
	}
	// The forks have a filesystem each.
	if err := forks[0].WriteFile(ctx, f, []byte("mine\n"), 0); err != nil {
		t.Fatal(err)
	}
	if b, err := forks[1].ReadFile(ctx, f); err != nil || string(b) != "one\n" {
		t.Fatalf("fork 2 after fork 1 wrote: %q %v", b, err)
	}
	if err := c.DeleteSnapshot(ctx, sn.ID); Code(err) != api.CodeConflict {
		t.Fatalf("delete a snapshot live sandboxes use: %v", err)
	}
	for _, s := range append(forks, sb) {
		if err := s.Delete(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.DeleteSnapshot(ctx, sn.ID); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := c.GetSnapshot(ctx, sn.ID); !IsNotFound(err) {
		t.Fatalf("get after delete: %v", err)
	}
}
