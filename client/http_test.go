package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
)

const testToken = "tok-123"

// newHTTP returns a client of a fake daemon whose routes the test adds to
// the returned mux. Every request must carry the token.
func newFakeHTTP(t *testing.T) (*Client, *http.ServeMux) {
	t.Helper()
	mux := http.NewServeMux()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testToken {
			writeJSON(w, http.StatusUnauthorized, api.Error{Code: api.CodeUnauthenticated, Message: "bad token"})
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c, err := New(WithHTTP(srv.URL, testToken))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeNDJSON(w http.ResponseWriter, events ...api.Event) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	for _, ev := range events {
		enc.Encode(ev)
	}
}

// decodeBody decodes a JSON request body, checking its content type.
func decodeBody(t *testing.T, r *http.Request, v any) {
	t.Helper()
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q", r.Method, r.URL.Path, ct)
	}
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		t.Errorf("%s %s: body: %v", r.Method, r.URL.Path, err)
	}
}

// expectBody is a handler that checks that the JSON request body is want
// and answers ok.
func expectBody[T comparable](t *testing.T, want T) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var got T
		decodeBody(t, r, &got)
		if got != want {
			t.Errorf("%s %s: body %+v, want %+v", r.Method, r.URL.Path, got, want)
		}
		writeJSON(w, 200, api.OK{OK: true})
	}
}

func checkQuery(t *testing.T, r *http.Request, want string) {
	t.Helper()
	w, _ := url.ParseQuery(want)
	if got := r.URL.Query(); got.Encode() != w.Encode() {
		t.Errorf("%s %s: query %q, want %q", r.Method, r.URL.Path, got.Encode(), w.Encode())
	}
}

func TestHTTPSandboxes(t *testing.T) {
	c, mux := newFakeHTTP(t)
	ctx := testCtx(t)
	mux.HandleFunc("POST /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		var req api.CreateSandbox
		decodeBody(t, r, &req)
		if req.Limits.MemoryBytes != 1<<20 || req.Labels["team"] != "a" || req.IdleTimeoutMs != 5000 {
			t.Errorf("create body %+v", req)
		}
		writeJSON(w, http.StatusCreated, api.Sandbox{ID: "sb-1", State: api.StateRunning, Labels: req.Labels})
	})
	mux.HandleFunc("GET /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		checkQuery(t, r, "state=running&limit=5")
		writeJSON(w, 200, api.SandboxList{Sandboxes: []api.Sandbox{{ID: "sb-1"}, {ID: "sb-2"}}})
	})
	mux.HandleFunc("GET /v1/sandboxes/{sandbox}", func(w http.ResponseWriter, r *http.Request) {
		checkQuery(t, r, "")
		writeJSON(w, 200, api.Sandbox{ID: r.PathValue("sandbox"), Running: 2})
	})
	mux.HandleFunc("DELETE /v1/sandboxes/{sandbox}", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, api.Sandbox{ID: r.PathValue("sandbox"), State: api.StateStopped, EndReason: api.EndDeleted})
	})
	since := time.Date(2025, 1, 2, 3, 4, 5, 6000, time.UTC)
	mux.HandleFunc("GET /v1/audit", func(w http.ResponseWriter, r *http.Request) {
		checkQuery(t, r, "sandbox=sb-1&since=2025-01-02T03:04:05.000006Z&after_seq=7&newest=true&kind=process.exec")
		writeJSON(w, 200, api.AuditPage{Events: []api.AuditEvent{{Seq: 8, Kind: "process.exec"}}, More: true})
	})

	sb, err := c.CreateSandbox(ctx, api.CreateSandbox{Limits: sandbox.Limits{MemoryBytes: 1 << 20}, IdleTimeoutMs: 5000, Labels: map[string]string{"team": "a"}})
	if err != nil || sb.ID() != "sb-1" || sb.Snapshot().State != api.StateRunning {
		t.Fatalf("create: %v %v", sb, err)
	}
	list, err := c.ListSandboxes(ctx, api.ListSandboxes{State: api.StateRunning, Limit: 5})
	if err != nil || len(list) != 2 || list[1].ID != "sb-2" {
		t.Fatalf("list: %v %v", list, err)
	}
	info, err := sb.Info(ctx)
	if err != nil || info.ID != "sb-1" || info.Running != 2 {
		t.Fatalf("info: %+v %v", info, err)
	}
	page, err := c.Audit(ctx, api.AuditQuery{Sandbox: "sb-1", Since: since, AfterSeq: 7, Newest: true, Kind: "process.exec"})
	if err != nil || !page.More || page.Events[0].Seq != 8 {
		t.Fatalf("audit: %+v %v", page, err)
	}
	if err := sb.Delete(ctx); err != nil || sb.Snapshot().EndReason != api.EndDeleted {
		t.Fatalf("delete: %v %+v", err, sb.Snapshot())
	}
}

func TestHTTPFiles(t *testing.T) {
	c, mux := newFakeHTTP(t)
	ctx := testCtx(t)
	content := []byte{0, 1, 0xff}
	mux.HandleFunc("PUT /v1/sandboxes/sb-1/files", func(w http.ResponseWriter, r *http.Request) {
		checkQuery(t, r, "path=/workspace/a b.sh&mode=0755")
		if ct := r.Header.Get("Content-Type"); ct != "application/octet-stream" {
			t.Errorf("write Content-Type %q", ct)
		}
		b, _ := io.ReadAll(r.Body)
		if !bytes.Equal(b, content) || r.ContentLength != int64(len(content)) {
			t.Errorf("write body %q (length %d)", b, r.ContentLength)
		}
		writeJSON(w, 200, api.Written{Path: "/workspace/a b.sh", Size: int64(len(b))})
	})
	mux.HandleFunc("GET /v1/sandboxes/sb-1/files", func(w http.ResponseWriter, r *http.Request) {
		checkQuery(t, r, "path=rel/x")
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(content)
	})
	mux.HandleFunc("GET /v1/sandboxes/sb-1/files/list", func(w http.ResponseWriter, r *http.Request) {
		checkQuery(t, r, "path=/workspace")
		writeJSON(w, 200, api.DirList{Path: "/workspace", Entries: []sandbox.FileInfo{{Name: "a", Type: "file"}, {Name: "d", Type: "dir"}}})
	})
	mux.HandleFunc("GET /v1/sandboxes/sb-1/files/stat", func(w http.ResponseWriter, r *http.Request) {
		checkQuery(t, r, "path=/workspace/l")
		writeJSON(w, 200, sandbox.FileInfo{Name: "l", Type: "symlink", Target: "a"})
	})
	mux.HandleFunc("POST /v1/sandboxes/sb-1/files/mkdir", expectBody(t, api.Mkdir{Sandbox: "sb-1", Path: "/workspace/x/y", Parents: true}))
	mux.HandleFunc("POST /v1/sandboxes/sb-1/files/remove", expectBody(t, api.Remove{Sandbox: "sb-1", Path: "/workspace/x", Recursive: true}))
	mux.HandleFunc("POST /v1/sandboxes/sb-1/files/move", expectBody(t, api.Move{Sandbox: "sb-1", From: "a", To: "b"}))
	mux.HandleFunc("PUT /v1/sandboxes/sb-1/archive", func(w http.ResponseWriter, r *http.Request) {
		checkQuery(t, r, "path=/workspace/dst")
		if ct := r.Header.Get("Content-Type"); ct != "application/x-tar" {
			t.Errorf("upload Content-Type %q", ct)
		}
		b, _ := io.ReadAll(r.Body)
		if string(b) != "TAR" {
			t.Errorf("upload body %q", b)
		}
		writeJSON(w, 200, api.Written{Path: "/workspace/dst", Size: 3})
	})
	mux.HandleFunc("GET /v1/sandboxes/sb-1/archive", func(w http.ResponseWriter, r *http.Request) {
		checkQuery(t, r, "path=/workspace/src")
		w.Header().Set("Content-Type", "application/x-tar")
		io.WriteString(w, "TAR OUT")
	})

	sb := c.Sandbox("sb-1")
	if err := sb.WriteFile(ctx, "/workspace/a b.sh", content, 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := sb.ReadFile(ctx, "rel/x")
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("read %q %v", got, err)
	}
	entries, err := sb.ListDir(ctx, "/workspace")
	if err != nil || len(entries) != 2 || entries[1].Type != "dir" {
		t.Fatalf("list %+v %v", entries, err)
	}
	fi, err := sb.Stat(ctx, "/workspace/l")
	if err != nil || fi.Target != "a" {
		t.Fatalf("stat %+v %v", fi, err)
	}
	if err := sb.Mkdir(ctx, "/workspace/x/y", true); err != nil {
		t.Fatal(err)
	}
	if err := sb.Remove(ctx, "/workspace/x", true); err != nil {
		t.Fatal(err)
	}
	if err := sb.Move(ctx, "a", "b"); err != nil {
		t.Fatal(err)
	}
	// An io.Reader that is not a bytes.Reader goes chunked.
	if err := sb.Upload(ctx, "/workspace/dst", io.MultiReader(strings.NewReader("TA"), strings.NewReader("R"))); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := sb.Download(ctx, "/workspace/src", &buf); err != nil || buf.String() != "TAR OUT" {
		t.Fatalf("download %q %v", buf.String(), err)
	}
}

func TestHTTPExec(t *testing.T) {
	c, mux := newFakeHTTP(t)
	ctx := testCtx(t)
	res := sandbox.Result{ExitCode: 2, ExitReason: sandbox.ReasonExited, Stdout: "out"}
	mux.HandleFunc("POST /v1/sandboxes/{sandbox}/exec", func(w http.ResponseWriter, r *http.Request) {
		var req api.Exec
		decodeBody(t, r, &req)
		if req.Sandbox != r.PathValue("sandbox") {
			t.Errorf("exec body names sandbox %q, path %q", req.Sandbox, r.PathValue("sandbox"))
		}
		if !req.Stream {
			writeJSON(w, 200, res)
			return
		}
		if a := r.Header.Get("Accept"); !strings.Contains(a, "application/x-ndjson") {
			t.Errorf("stream Accept %q", a)
		}
		out := api.Event{Seq: 1, Type: api.EventStdout, Text: "hel"}
		errOut := api.Event{Seq: 2, Type: api.EventStderr, Data: []byte{0xff}}
		switch req.Args[0] {
		case "ok":
			writeNDJSON(w, out, errOut, api.Event{Seq: 3, Type: api.EventExit, Result: &res})
		case "fails":
			writeNDJSON(w, out, api.Event{Seq: 2, Type: api.EventError, Error: &api.Error{Code: api.CodeTimeout, Message: "too slow"}})
		case "cut":
			writeNDJSON(w, out)
		case "whole":
			writeJSON(w, 200, res)
		case "busy":
			writeJSON(w, http.StatusConflict, api.Error{Code: api.CodeBusy, Message: "another exec runs"})
		}
	})
	sb := c.Sandbox("sb-1")
	got, err := sb.Exec(ctx, api.Exec{Args: []string{"x"}, Sandbox: "ignored", Stream: true})
	if err != nil || *got != res {
		t.Fatalf("exec %+v %v", got, err)
	}

	type pair struct {
		ev  api.Event
		err error
	}
	collect := func(arg string) []pair {
		var ps []pair
		for ev, err := range sb.ExecStream(ctx, api.Exec{Args: []string{arg}}) {
			ps = append(ps, pair{ev, err})
		}
		return ps
	}
	ps := collect("ok")
	if len(ps) != 3 || ps[0].ev.Text != "hel" || !bytes.Equal(ps[1].ev.Output(), []byte{0xff}) || ps[2].ev.Type != api.EventExit || *ps[2].ev.Result != res {
		t.Fatalf("stream ok: %+v", ps)
	}
	for _, p := range ps {
		if p.err != nil {
			t.Fatalf("stream ok: %v", p.err)
		}
	}
	ps = collect("fails")
	if len(ps) != 2 || ps[1].ev.Type != api.EventError || Code(ps[1].err) != api.CodeTimeout {
		t.Fatalf("stream with an error event: %+v", ps)
	}
	ps = collect("cut")
	if len(ps) != 2 || ps[1].ev.Type != api.EventError || !errors.Is(ps[1].err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut stream: %+v", ps)
	}
	ps = collect("whole")
	if len(ps) != 1 || ps[0].ev.Type != api.EventExit || *ps[0].ev.Result != res || ps[0].err != nil {
		t.Fatalf("exec answered whole: %+v", ps)
	}
	ps = collect("busy")
	if len(ps) != 1 || ps[0].ev.Type != api.EventError || ps[0].ev.Error.Code != api.CodeBusy || !IsBusy(ps[0].err) {
		t.Fatalf("refused stream: %+v", ps)
	}
}

// TestHTTPStreamBreak: leaving the loop closes the request, which the
// server sees.
func TestHTTPStreamBreak(t *testing.T) {
	c, mux := newFakeHTTP(t)
	gone := make(chan struct{})
	mux.HandleFunc("GET /v1/sandboxes/sb-1/processes/5/output", func(w http.ResponseWriter, r *http.Request) {
		checkQuery(t, r, "after=3&follow=true")
		writeNDJSON(w, api.Event{Seq: 4, Type: api.EventStdout, Text: "x"})
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(gone)
	})
	for ev, err := range c.Sandbox("sb-1").Process(5).Output(testCtx(t), 3, true) {
		if err != nil || ev.Seq != 4 {
			t.Fatalf("%+v %v", ev, err)
		}
		break
	}
	select {
	case <-gone:
	case <-testCtx(t).Done():
		t.Fatal("the server never saw the request end")
	}
}

func TestHTTPProcesses(t *testing.T) {
	defer func(p time.Duration) { waitPause = p }(waitPause)
	waitPause = time.Millisecond
	c, mux := newFakeHTTP(t)
	ctx := testCtx(t)
	res := &sandbox.Result{ExitCode: 9}
	mux.HandleFunc("POST /v1/sandboxes/sb-1/processes", func(w http.ResponseWriter, r *http.Request) {
		var req api.Exec
		decodeBody(t, r, &req)
		if !slices.Equal(req.Args, []string{"sleep", "1"}) || req.Sandbox != "sb-1" {
			t.Errorf("start %+v", req)
		}
		writeJSON(w, 200, api.Process{ID: 5, Sandbox: "sb-1", State: api.ProcRunning, Args: req.Args})
	})
	mux.HandleFunc("GET /v1/sandboxes/sb-1/processes", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, api.ProcessList{Processes: []api.Process{{ID: 5}}})
	})
	mux.HandleFunc("GET /v1/sandboxes/sb-1/processes/5", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, api.Process{ID: 5, State: api.ProcRunning})
	})
	mux.HandleFunc("GET /v1/sandboxes/sb-1/processes/5/output", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("follow") == "true" {
			writeNDJSON(w, api.Event{Seq: 1, Type: api.EventLost}, api.Event{Seq: 2, Type: api.EventStdout, Text: "a"}, api.Event{Seq: 3, Type: api.EventExit, Result: res})
			return
		}
		checkQuery(t, r, "")
		writeNDJSON(w, api.Event{Seq: 2, Type: api.EventStdout, Text: "a"})
	})
	var stdin []api.Stdin
	mux.HandleFunc("POST /v1/sandboxes/sb-1/processes/5/stdin", func(w http.ResponseWriter, r *http.Request) {
		var req api.Stdin
		decodeBody(t, r, &req)
		stdin = append(stdin, req)
		writeJSON(w, 200, api.OK{OK: true})
	})
	mux.HandleFunc("POST /v1/sandboxes/sb-1/processes/5/signal", func(w http.ResponseWriter, r *http.Request) {
		var req api.Signal
		decodeBody(t, r, &req)
		if req.Signal != "TERM" || req.Process != 5 {
			t.Errorf("signal %+v", req)
		}
		writeJSON(w, 200, api.OK{OK: true})
	})
	waits := 0
	mux.HandleFunc("POST /v1/sandboxes/sb-1/processes/5/wait", func(w http.ResponseWriter, r *http.Request) {
		var req api.ProcessRef
		decodeBody(t, r, &req)
		if req.TimeoutMs <= 0 || req.TimeoutMs > waitSlice.Milliseconds() {
			t.Errorf("wait timeout_ms %d", req.TimeoutMs)
		}
		if waits++; waits < 3 {
			// As if the timeout had passed.
			writeJSON(w, 200, api.Process{ID: 5, State: api.ProcRunning})
			return
		}
		writeJSON(w, 200, api.Process{ID: 5, State: api.ProcExited, Result: res})
	})

	sb := c.Sandbox("sb-1")
	p, err := sb.Start(ctx, api.Exec{Args: []string{"sleep", "1"}})
	if err != nil || p.ID() != 5 || p.SandboxID() != "sb-1" || p.Snapshot().State != api.ProcRunning {
		t.Fatalf("start %v %v", p, err)
	}
	if l, err := sb.Processes(ctx); err != nil || len(l) != 1 {
		t.Fatalf("processes %v %v", l, err)
	}
	if info, err := p.Get(ctx); err != nil || info.State != api.ProcRunning {
		t.Fatalf("get %v %v", info, err)
	}
	var types []string
	for ev, err := range p.Output(ctx, 0, true) {
		if err != nil {
			t.Fatal(err)
		}
		types = append(types, ev.Type)
	}
	if !slices.Equal(types, []string{"lost", "stdout", "exit"}) {
		t.Fatalf("output %q", types)
	}
	n := 0
	for ev, err := range p.Output(ctx, 0, false) {
		if err != nil || ev.Text != "a" {
			t.Fatalf("%+v %v", ev, err)
		}
		n++
	}
	if n != 1 {
		t.Fatalf("%d events without follow", n)
	}
	events, errs := p.Events(ctx, 0)
	types = nil
	for ev := range events {
		types = append(types, ev.Type)
	}
	if err := <-errs; err != nil || !slices.Equal(types, []string{"lost", "stdout", "exit"}) {
		t.Fatalf("events %q %v", types, err)
	}
	if err := p.WriteStdin(ctx, []byte("text")); err != nil {
		t.Fatal(err)
	}
	if err := p.WriteStdin(ctx, []byte{0xff}); err != nil {
		t.Fatal(err)
	}
	if err := p.CloseStdin(ctx); err != nil {
		t.Fatal(err)
	}
	if len(stdin) != 3 || stdin[0].Data != "text" || !bytes.Equal(stdin[1].DataBase64, []byte{0xff}) || stdin[1].Data != "" || !stdin[2].EOF {
		t.Fatalf("stdin %+v", stdin)
	}
	if err := p.Signal(ctx, "TERM"); err != nil {
		t.Fatal(err)
	}
	done, err := p.Wait(ctx)
	if err != nil || done.State != api.ProcExited || done.Result.ExitCode != 9 || waits != 3 {
		t.Fatalf("wait %+v %v (%d calls)", done, err, waits)
	}
}

func TestHTTPErrors(t *testing.T) {
	c, mux := newFakeHTTP(t)
	ctx := testCtx(t)
	mux.HandleFunc("GET /v1/sandboxes/{sandbox}", func(w http.ResponseWriter, r *http.Request) {
		switch r.PathValue("sandbox") {
		case "gone":
			writeJSON(w, http.StatusNotFound, api.Error{Code: api.CodeNotFound, Message: "no sandbox gone"})
		case "proxy":
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			io.WriteString(w, "<html>upstream down</html>\nmore")
		case "a b/c":
			if r.URL.RawPath != "/v1/sandboxes/a%20b%2Fc" {
				t.Errorf("escaped path %q", r.URL.RawPath)
			}
			writeJSON(w, 200, api.Sandbox{ID: "a b/c"})
		}
	})
	mux.HandleFunc("GET /v1/sandboxes/sb/files", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, api.Error{Code: api.CodeFile, Errno: "ENOENT", Message: "no such file"})
	})

	_, err := c.Sandbox("gone").Info(ctx)
	var ae *api.Error
	if !IsNotFound(err) || !errors.Is(err, &api.Error{Code: api.CodeNotFound}) || !errors.As(err, &ae) || ae.Message != "no sandbox gone" {
		t.Fatalf("not found: %v", err)
	}
	_, err = c.Sandbox("proxy").Info(ctx)
	if Code(err) != api.CodeInternal || !strings.Contains(err.Error(), "502 Bad Gateway: <html>upstream down</html>") {
		t.Fatalf("not JSON: %v", err)
	}
	if info, err := c.Sandbox("a b/c").Info(ctx); err != nil || info.ID != "a b/c" {
		t.Fatalf("escaped id: %v %v", info, err)
	}
	_, err = c.Sandbox("sb").ReadFile(ctx, "/x")
	if !IsNotFound(err) || !errors.Is(err, &api.Error{Code: api.CodeFile, Errno: "ENOENT"}) {
		t.Fatalf("missing file: %v", err)
	}
	_, err = c.Sandbox("").Info(ctx)
	if Code(err) != api.CodeInvalidArgument {
		t.Fatalf("empty sandbox id: %v", err)
	}

	bad, err := New(WithHTTP(strings.TrimSuffix(c.t.(*httpTransport).base.String(), "/"), "wrong"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.ListSandboxes(ctx, api.ListSandboxes{}); !IsUnauthenticated(err) {
		t.Fatalf("wrong token: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListSandboxes(ctx, api.ListSandboxes{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

func TestHTTPUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	u := srv.URL
	srv.Close()
	c, err := New(WithHTTP(u, "t"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.ListSandboxes(testCtx(t), api.ListSandboxes{})
	if err == nil || Code(err) != "" || !strings.Contains(err.Error(), "sandbox.list") {
		t.Fatalf("unreachable daemon: %v", err)
	}
	for ev, err := range c.Sandbox("sb").ExecStream(testCtx(t), api.Exec{Args: []string{"true"}}) {
		if err == nil || ev.Type != api.EventError || ev.Error.Code != api.CodeUnavailable {
			t.Fatalf("stream to an unreachable daemon: %+v %v", ev, err)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := c.ListSandboxes(ctx, api.ListSandboxes{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

// TestHTTPPrefix: a base URL with a path prefixes every route.
func TestHTTPPrefix(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/moat/v1/sandboxes" {
			t.Errorf("path %q", r.URL.Path)
		}
		writeJSON(w, 200, api.SandboxList{})
	}))
	defer srv.Close()
	c, err := New(WithHTTP(srv.URL+"/moat/", "t"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListSandboxes(testCtx(t), api.ListSandboxes{}); err != nil {
		t.Fatal(err)
	}
}

// TestHTTPUnixSocket: unix:/PATH reaches a daemon on a unix socket.
func TestHTTPUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "moat.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/sandboxes" || r.Header.Get("Authorization") != "Bearer t" {
			t.Errorf("%s %v", r.URL, r.Header)
		}
		writeJSON(w, 200, api.SandboxList{Sandboxes: []api.Sandbox{{ID: "via-socket"}}})
	}))
	srv.Listener = ln
	srv.Start()
	defer srv.Close()
	c, err := New(WithHTTP("unix:"+sock, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.ListSandboxes(testCtx(t), api.ListSandboxes{})
	if err != nil || len(l) != 1 || l[0].ID != "via-socket" {
		t.Fatalf("%v %v", l, err)
	}
	if _, err := New(WithHTTP("unix:"+sock, "t"), WithHTTPClient(http.DefaultClient)); err == nil {
		t.Fatal("unix socket with WithHTTPClient accepted")
	}
}

func TestEncodeRequest(t *testing.T) {
	o := op(api.OpAuditQuery)
	path, q, err := encodeRequest(o, api.AuditQuery{Sandbox: "s", Limit: 3, Until: time.Unix(0, 1).UTC()})
	if err != nil || path != "/v1/audit" || q.Encode() != "limit=3&sandbox=s&until=1970-01-01T00%3A00%3A00.000000001Z" {
		t.Fatalf("%q %q %v", path, q.Encode(), err)
	}
	path, q, err = encodeRequest(op(api.OpOutput), api.ReadOutput{Sandbox: "s", Process: 0, Follow: true})
	if err != nil || path != "/v1/sandboxes/s/processes/0/output" || q.Encode() != "follow=true" {
		t.Fatalf("%q %q %v", path, q.Encode(), err)
	}
	// JSON bodies put nothing in the query; raw bodies never the content.
	path, q, err = encodeRequest(op(api.OpStdin), api.Stdin{Sandbox: "s", Process: 2, Data: "x"})
	if err != nil || path != "/v1/sandboxes/s/processes/2/stdin" || len(q) != 0 {
		t.Fatalf("%q %q %v", path, q.Encode(), err)
	}
	_, q, err = encodeRequest(op(api.OpFileWrite), &api.WriteFile{Sandbox: "s", Path: "/p", Content: []byte("x")})
	if err != nil || q.Encode() != "path=%2Fp" {
		t.Fatalf("%q %v", q.Encode(), err)
	}
	// A slice of strings repeats.
	vals, err := formatValue(reflect.ValueOf([]string{"a", "b"}))
	if err != nil || !slices.Equal(vals, []string{"a", "b"}) {
		t.Fatalf("%q %v", vals, err)
	}
}
