package server

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/store"
)

// Builds: the control plane's part on the fake runtime (settings,
// refusals before any sandbox, recovery); what a real compiler and the
// kernel do is in builds_runtime_test.go.

var (
	builderA = Caller{Tenant: "a", Actor: "builder-a"}
	builderB = Caller{Tenant: "b", Actor: "builder-b"}
)

// tarEntry is one entry of a test source package.
type tarEntry struct {
	name, body, link string
	typ              byte
	mode             int64
	uid              int
	mtime            time.Time
}

// makeTar packs entries (a regular file unless typ says otherwise),
// gzipped if gz.
func makeTar(t *testing.T, gz bool, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w = &buf
	var zw *gzip.Writer
	tw := tar.NewWriter(w)
	if gz {
		zw = gzip.NewWriter(w)
		tw = tar.NewWriter(zw)
	}
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		mode := e.mode
		if mode == 0 {
			mode = 0o644
			if typ == tar.TypeDir {
				mode = 0o755
			}
		}
		hdr := &tar.Header{Name: e.name, Typeflag: typ, Mode: mode, Linkname: e.link, Uid: e.uid, Gid: e.uid,
			ModTime: e.mtime, Format: tar.FormatPAX}
		if typ == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// buildResult is what a build call answered.
type buildResult struct {
	resp   any
	events []api.Event
	out    []byte
	err    error
}

// callBuild runs operation op as c through the dispatcher, with req (a
// value of the operation's request type) and body (nil: none), and
// collects its events and raw answer.
func (h *harness) callBuild(ctx context.Context, c Caller, op string, req any, body []byte) buildResult {
	in := internalInput(req)
	if body != nil {
		in.body = bytes.NewReader(body)
	}
	var out bytes.Buffer
	var r buildResult
	in.out = &out
	in.emit = func(ev api.Event) error {
		r.events = append(r.events, ev)
		return nil
	}
	r.resp, r.err = h.svc.call(ctx, c, op, in)
	r.out = out.Bytes()
	return r
}

// build runs build.create as c and returns the build it answered.
func (h *harness) build(c Caller, req api.CreateBuild, src []byte) api.Build {
	h.t.Helper()
	r := h.callBuild(context.Background(), c, api.OpBuildCreate, req, src)
	if r.err != nil {
		h.t.Fatalf("build.create: %v", r.err)
	}
	b := *r.resp.(*api.Build)
	if !req.Detach {
		h.buildGone(b.ID)
	}
	return b
}

// buildGone waits until build id, answered at its end, has its sandbox
// and layer removed too (the teardown after the answer).
func (h *harness) buildGone(id string) {
	h.svc.builds.mu.Lock()
	run := h.svc.builds.live[id]
	h.svc.builds.mu.Unlock()
	if run != nil {
		<-run.gone
	}
}

// getBuild is build.get as c.
func (h *harness) getBuild(c Caller, id string, wait bool) (*api.Build, error) {
	r := h.callBuild(context.Background(), c, api.OpBuildGet, api.BuildRef{ID: id, Wait: wait}, nil)
	if r.err != nil {
		return nil, r.err
	}
	return r.resp.(*api.Build), nil
}

// buildLogText is build.log as c from offset, its events' bytes joined.
func (h *harness) buildLogText(c Caller, id string, offset int64, follow bool) (string, *api.Build, error) {
	r := h.callBuild(context.Background(), c, api.OpBuildLog, api.BuildLogRequest{ID: id, Offset: offset, Follow: follow}, nil)
	if r.err != nil {
		return "", nil, r.err
	}
	var sb strings.Builder
	for _, ev := range r.events {
		if ev.Type != api.EventStdout || len(ev.Output()) > logChunk {
			h.t.Fatalf("log event %+v", ev)
		}
		sb.Write(ev.Output())
	}
	return sb.String(), r.resp.(*api.Build), nil
}

// buildEvents are the "build" audit events of tenant.
func (h *harness) buildEvents(tenant string) []audit.Event {
	h.t.Helper()
	page, err := h.tape.QueryPage(context.Background(), audit.Query{Tenant: tenant, Kind: "build", Limit: audit.MaxLimit})
	if err != nil {
		h.t.Fatal(err)
	}
	var out []audit.Event
	for _, ev := range page.Events {
		if ev.Kind == "build" {
			out = append(out, ev)
		}
	}
	return out
}

// wantCode fails unless err is an API error of code.
func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	if !isCode(err, code) {
		t.Errorf("%s: %v, want %s", what, err, code)
	}
}

// cSource is a C program's source package, and the command that builds
// it into out/hello.
var (
	cSource = []tarEntry{
		{name: "src/", typ: tar.TypeDir},
		{name: "src/main.c", body: "#include <stdio.h>\nint main(void) { puts(\"hello from a build\"); return 0; }\n"},
	}
	cCommand = []string{"sh", "-c", "mkdir -p out && gcc -O2 -o out/hello src/main.c && ./out/hello"}
)

// TestBuildSettingsRefused: bad settings are 400 before anything is
// made: no record, no audit event of kind build.
func TestBuildSettingsRefused(t *testing.T) {
	h := newFakeHarness(t, nil)
	src := makeTar(t, false, cSource...)
	for name, req := range map[string]api.CreateBuild{
		"no command":        {},
		"absolute output":   {Command: []string{"true"}, Outputs: []string{"/etc/passwd"}},
		"escaping output":   {Command: []string{"true"}, Outputs: []string{"../x"}},
		"fixed env":         {Command: []string{"true"}, Env: []string{"HOME=/root"}},
		"bad epoch":         {Command: []string{"true"}, Env: []string{"SOURCE_DATE_EPOCH=yesterday"}},
		"above the cap":     {Command: []string{"true"}, MaxFiles: 1 << 30},
		"negative memory":   {Command: []string{"true"}, MemoryBytes: -1},
		"unknown net":       {Command: []string{"true"}, Net: "open"},
		"timeout above max": {Command: []string{"true"}, TimeoutMs: (2 * time.Hour).Milliseconds()},
	} {
		r := h.callBuild(context.Background(), builderA, api.OpBuildCreate, req, src)
		wantCode(t, name, r.err, api.CodeInvalidArgument)
	}
	r := h.callBuild(context.Background(), builderA, api.OpBuildCreate, api.CreateBuild{Command: []string{"true"}}, nil)
	wantCode(t, "no source", r.err, api.CodeInvalidArgument)
	r = h.callBuild(context.Background(), builderA, api.OpBuildCreate, api.CreateBuild{Command: []string{"true"}, Template: "nosuch"}, src)
	if r.err == nil {
		t.Error("an unknown template was accepted")
	}
	if l, err := h.st.ListBuilds(context.Background(), "a", "", 0); err != nil || len(l) != 0 {
		t.Errorf("records: %v %v", l, err)
	}
	if evs := h.buildEvents("a"); len(evs) != 0 {
		t.Errorf("build events: %+v", evs)
	}
}

// TestBuildSourceRefused: a source refusal reaches the record (status
// refused and its reason), the store and the audit, and nothing ran; the
// control, the same package with the bad entry fixed, is accepted.
func TestBuildSourceRefused(t *testing.T) {
	testutil.RequireRoot(t) // the source's owners are set (chown)
	h := newFakeHarness(t, nil)
	bad := makeTar(t, false, tarEntry{name: "ok.c", body: "x"}, tarEntry{name: "../evil.c", body: "x"})
	b := h.build(builderA, api.CreateBuild{Command: []string{"true"}, Env: []string{"TOKEN=secret-value"}}, bad)
	if b.Status != api.BuildRefused || b.Reason != api.ReasonSourceBadPath || b.Ended == nil || b.Sandbox != "" || b.ExitCode != nil {
		t.Fatalf("refused build: %+v", b)
	}
	got, err := h.getBuild(builderA, b.ID, false)
	if err != nil || got.Status != api.BuildRefused || got.Reason != api.ReasonSourceBadPath {
		t.Fatalf("stored: %+v %v", got, err)
	}
	row, err := h.st.GetBuild(context.Background(), "a", b.ID)
	if err != nil || row.Status != api.BuildRefused || row.Ended == nil {
		t.Fatalf("row: %+v %v", row, err)
	}
	evs := h.buildEvents("a")
	if len(evs) != 1 {
		t.Fatalf("build events: %+v", evs)
	}
	var res map[string]any
	if err := json.Unmarshal(evs[0].Result, &res); err != nil || res["reason"] != api.ReasonSourceBadPath || res["id"] != b.ID {
		t.Errorf("audit result: %s", evs[0].Result)
	}
	// Names of the environment only, never a value: in the audit, the
	// record, the store.
	for what, text := range map[string]string{"audit": string(evs[0].Request), "row": string(row.Record)} {
		if strings.Contains(text, "secret-value") || !strings.Contains(text, "TOKEN") {
			t.Errorf("%s: %s", what, text)
		}
	}
	if _, err := os.Stat(filepath.Join(h.svc.builds.path(b.ID), "layer")); !os.IsNotExist(err) {
		t.Errorf("the layer of a refused build is still there: %v", err)
	}

	// The control: fixed, the package is accepted and the build goes on
	// to its sandbox (on the fake runtime, which runs no compiler: its
	// status says only that the source passed).
	good := makeTar(t, false, tarEntry{name: "ok.c", body: "x"}, tarEntry{name: "evil.c", body: "x"})
	b = h.build(builderA, api.CreateBuild{Command: []string{"true"}}, good)
	if b.Status == api.BuildRefused || b.SourceDigest == "" || b.Source == nil || b.Source.Files != 2 {
		t.Fatalf("control: %+v", b)
	}
}

// TestBuildRecover: a build a previous daemon left running becomes
// failed/interrupted at the next start, its layer removed, its log kept,
// and it is audited.
func TestBuildRecover(t *testing.T) {
	h := newFakeHarness(t, nil)
	ctx := context.Background()
	id, err := newBuildID()
	if err != nil {
		t.Fatal(err)
	}
	b := api.Build{ID: id, Status: api.BuildRunning, Created: time.Now().UTC(), Artifacts: []api.BuildArtifact{}}
	if err := h.svc.saveBuild(ctx, "a", &b); err != nil {
		t.Fatal(err)
	}
	dir := h.svc.builds.path(id)
	if err := os.MkdirAll(filepath.Join(dir, "layer", "src", "ro"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A read-only directory the source had: removed all the same.
	if err := os.Chmod(filepath.Join(dir, "layer", "src", "ro"), 0o555); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(logPath(dir), []byte("half a log"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := h.svc.recoverBuilds(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := h.getBuild(builderA, id, false)
	if err != nil || got.Status != api.BuildFailed || got.Reason != api.ReasonInterrupted || got.Ended == nil ||
		!strings.Contains(got.Message, "daemon stopped") || got.Log.Kept != int64(len("half a log")) {
		t.Fatalf("recovered: %+v %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "layer")); !os.IsNotExist(err) {
		t.Errorf("layer left: %v", err)
	}
	if text, _, err := h.buildLogText(builderA, id, 0, false); err != nil || text != "half a log" {
		t.Errorf("log: %q %v", text, err)
	}
	if run, err := h.st.RunningBuilds(ctx); err != nil || len(run) != 0 {
		t.Errorf("still running: %v %v", run, err)
	}
	if evs := h.buildEvents("a"); len(evs) != 1 || evs[0].Actor != "system" {
		t.Errorf("audit: %+v", evs)
	}
	// Pruned once past the retention, files and all.
	h.svc.cfg.BuildRetention = time.Nanosecond
	h.svc.pruneBuilds(time.Now().Add(time.Second))
	if _, err := h.st.GetBuild(ctx, "a", id); !isNotFound(err) {
		t.Errorf("after pruning: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("files left after pruning: %v", err)
	}
}

func isNotFound(err error) bool {
	return errors.Is(err, store.ErrNotFound)
}

// TestBuildIDs: only ids the daemon makes name a build's directory.
func TestBuildIDs(t *testing.T) {
	id, err := newBuildID()
	if err != nil || !validBuildID(id) {
		t.Fatalf("%q %v", id, err)
	}
	for _, bad := range []string{"", "bld-", "bld-../../../etc/passwd0", "bld-0123456789ABCDEF0123", "x" + id[1:], id + "0"} {
		if validBuildID(bad) {
			t.Errorf("%q accepted", bad)
		}
	}
	h := newFakeHarness(t, nil)
	if _, err := h.getBuild(builderA, "bld-../../x", false); !isCode(err, api.CodeNotFound) {
		t.Errorf("a path as id: %v", err)
	}
	for _, st := range append(slices.Clone(buildStatuses), "") {
		r := h.callBuild(context.Background(), builderA, api.OpBuildList, api.ListBuilds{Status: st}, nil)
		if r.err != nil || len(r.resp.(*api.BuildList).Builds) != 0 {
			t.Fatalf("list %q: %+v %v", st, r.resp, r.err)
		}
	}
	r := h.callBuild(context.Background(), builderA, api.OpBuildList, api.ListBuilds{Status: "sleeping"}, nil)
	wantCode(t, "an unknown status", r.err, api.CodeInvalidArgument)
}

// TestBuildBodyRefusedByTransport: a body the transport refuses while the
// source is read (a multipart part after the source) answers the
// transport's error (400), not a build that failed to set up; the build
// it had begun ends refused/source_unreadable. Control: the same form
// without the extra part is a build.
func TestBuildBodyRefusedByTransport(t *testing.T) {
	testutil.RequireRoot(t) // the source's owners are set (chown)
	h := newFakeHarness(t, nil)
	src := string(makeTar(t, false, tarEntry{name: "ok.c", body: "x"}))
	settings := [2]string{"settings", `{"command":["true"]}`}
	ct, body := multipartBody(t, settings, [2]string{"source", src}, [2]string{"extra", "x"})
	r := h.send("POST", "/v1/builds", tokenA, ct, body)
	if r.status != http.StatusBadRequest || r.apiErr(t).Code != api.CodeInvalidArgument {
		t.Fatalf("a part after the source: %d %s", r.status, r.body)
	}
	list, err := h.st.ListBuilds(context.Background(), "a", "", 10)
	if err != nil || len(list) != 1 {
		t.Fatalf("builds: %+v %v", list, err)
	}
	var b api.Build
	if err := json.Unmarshal(list[0].Record, &b); err != nil || b.Status != api.BuildRefused || b.Reason != api.ReasonSourceUnreadable {
		t.Fatalf("the begun build: %+v %v", b, err)
	}
	ct, body = multipartBody(t, settings, [2]string{"source", src})
	if r := h.send("POST", "/v1/builds", tokenA, ct, body); r.status != http.StatusCreated {
		t.Fatalf("control: %d %s", r.status, r.body)
	}
}

// TestBuildWaitsForRoom: a build whose sandbox the tenant's quota has no
// room for waits for it (builds queue) instead of failing: once the
// tenant's sandbox is deleted, the build runs. Control: the create was
// really refused for room while the quota was full (its audit record).
func TestBuildWaitsForRoom(t *testing.T) {
	testutil.RequireRoot(t) // the source's owners are set (chown)
	h := newFakeHarness(t, func(c *Config) { c.MaxPerTenant = 1 })
	sb := h.create(tokenA, api.CreateSandbox{})
	src := makeTar(t, false, tarEntry{name: "f", body: "x"})
	b := h.build(builderA, api.CreateBuild{Command: []string{"true"}, Detach: true}, src)
	refused := func() bool {
		for _, ev := range h.auditEvents(tokenA, api.OpSandboxCreate) {
			if ev.Sandbox == "" && strings.Contains(ev.Error, api.CodeTooMany) {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(30 * time.Second)
	for !refused() {
		if time.Now().After(deadline) {
			t.Fatalf("the build's create was never refused for room: %+v", h.auditEvents(tokenA, api.OpSandboxCreate))
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, with a deadline
	}
	if got, err := h.getBuild(builderA, b.ID, false); err != nil || got.Status != api.BuildRunning {
		t.Fatalf("while the quota is full: %+v %v", got, err)
	}
	if r := h.do("DELETE", "/v1/sandboxes/"+sb, tokenA, nil); r.status != http.StatusOK {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	got, err := h.getBuild(builderA, b.ID, true)
	// Its sandbox was made (the fake runtime then runs no compiler: what
	// the command did is not this test's business).
	if err != nil || got.Sandbox == "" || strings.Contains(got.Message, "quota") {
		t.Fatalf("after room was made: %+v %v", got, err)
	}
}
