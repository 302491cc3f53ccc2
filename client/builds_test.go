package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
)

// TestBuildHTTP: Build sends a multipart body, the settings as its JSON
// part (nothing in the URL: env values may be secrets) and the source,
// streamed, as the second; the other calls travel as api.Ops says.
func TestBuildHTTP(t *testing.T) {
	c, mux := newFakeHTTP(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := api.CreateBuild{Command: []string{"make", "all"}, Outputs: []string{"out"}, Env: []string{"TOKEN=secret"},
		Labels: map[string]string{"a": "b"}, CPUs: 1.5, Detach: true}
	source := strings.Repeat("tar bytes ", 100_000)
	mux.HandleFunc("POST /v1/builds", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawQuery != "" {
			t.Errorf("query %q: the settings go in the settings part", r.URL.RawQuery)
		}
		mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || mt != "multipart/form-data" {
			t.Errorf("Content-Type %q", r.Header.Get("Content-Type"))
		}
		mr := multipart.NewReader(r.Body, params["boundary"])
		p, err := mr.NextPart()
		if err != nil || p.FormName() != "settings" || p.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("first part: %v %v", p, err)
		}
		dec := json.NewDecoder(p)
		dec.DisallowUnknownFields()
		var got api.CreateBuild
		if err := dec.Decode(&got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, req) {
			t.Errorf("settings %+v, want %+v", got, req)
		}
		if p, err = mr.NextPart(); err != nil || p.FormName() != "source" {
			t.Fatalf("second part: %v %v", p, err)
		}
		b, _ := io.ReadAll(p)
		if string(b) != source {
			t.Errorf("source: %d bytes", len(b))
		}
		if _, err := mr.NextPart(); err != io.EOF {
			t.Errorf("a third part: %v", err)
		}
		writeJSON(w, http.StatusCreated, api.Build{ID: "bld-1", Status: api.BuildRunning, Settings: got})
	})
	b, err := c.Build(ctx, req, strings.NewReader(source))
	if err != nil || b.ID != "bld-1" || b.Status != api.BuildRunning || b.Settings.CPUs != 1.5 {
		t.Fatalf("Build: %+v %v", b, err)
	}
	// With no reader, Content is the source.
	withContent := req
	withContent.Content = []byte(source)
	if b, err := c.Build(ctx, withContent, nil); err != nil || b.ID != "bld-1" {
		t.Fatalf("Build with Content: %+v %v", b, err)
	}

	mux.HandleFunc("GET /v1/builds/{id}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") == "missing" {
			writeJSON(w, http.StatusNotFound, api.Error{Code: api.CodeNotFound, Message: "no build"})
			return
		}
		st := api.BuildRunning
		if r.URL.Query().Get("wait") == "true" {
			st = api.BuildSucceeded
		}
		writeJSON(w, http.StatusOK, api.Build{ID: r.PathValue("id"), Status: st})
	})
	if b, err := c.GetBuild(ctx, "bld-1", true); err != nil || b.Status != api.BuildSucceeded {
		t.Errorf("GetBuild wait: %+v %v", b, err)
	}
	if b, err := c.GetBuild(ctx, "bld-1", false); err != nil || b.Status != api.BuildRunning {
		t.Errorf("GetBuild: %+v %v", b, err)
	}
	if _, err := c.GetBuild(ctx, "missing", false); !IsNotFound(err) {
		t.Errorf("GetBuild missing: %v", err)
	}

	mux.HandleFunc("GET /v1/builds", func(w http.ResponseWriter, r *http.Request) {
		if q := r.URL.Query(); q.Get("status") != "failed" || q.Get("limit") != "5" {
			t.Errorf("list query %v", q)
		}
		writeJSON(w, http.StatusOK, api.BuildList{Builds: []api.Build{{ID: "bld-2"}, {ID: "bld-1"}}})
	})
	if l, err := c.Builds(ctx, api.ListBuilds{Status: api.BuildFailed, Limit: 5}); err != nil || len(l) != 2 || l[0].ID != "bld-2" {
		t.Errorf("Builds: %+v %v", l, err)
	}

	mux.HandleFunc("GET /v1/builds/{id}/log", func(w http.ResponseWriter, r *http.Request) {
		if q := r.URL.Query(); q.Get("offset") != "3" || q.Get("follow") != "true" {
			t.Errorf("log query %v", q)
		}
		writeNDJSON(w, api.Event{Seq: 1, Type: api.EventStdout, Text: "cc -o hello\n"},
			api.Event{Seq: 2, Type: api.EventStdout, Data: []byte{0xff, '\n'}})
	})
	var log bytes.Buffer
	if b, err := c.BuildLog(ctx, "bld-1", 3, true, &log); err != nil || b.ID != "bld-1" || log.String() != "cc -o hello\n\xff\n" {
		t.Errorf("BuildLog: %+v %v %q", b, err, log.String())
	}
	// A writer that fails ends the stream with its error.
	werr := errors.New("disk full")
	if _, err := c.BuildLog(ctx, "bld-1", 3, true, failWriter{werr}); !errors.Is(err, werr) {
		t.Errorf("BuildLog to a failing writer: %v", err)
	}

	digest := strings.Repeat("0f", 32)
	mux.HandleFunc("GET /v1/builds/{id}/artifacts/{digest}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("digest") != digest {
			writeJSON(w, http.StatusNotFound, api.Error{Code: api.CodeNotFound, Message: "no artifact"})
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		io.WriteString(w, "\x7fELF")
	})
	var art bytes.Buffer
	if err := c.BuildArtifact(ctx, "bld-1", digest, &art); err != nil || art.String() != "\x7fELF" {
		t.Errorf("BuildArtifact: %v %q", err, art.String())
	}
	if err := c.BuildArtifact(ctx, "bld-1", "00", io.Discard); !IsNotFound(err) {
		t.Errorf("BuildArtifact unknown digest: %v", err)
	}

	mux.HandleFunc("DELETE /v1/builds/{id}", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, api.Build{ID: r.PathValue("id"), Status: api.BuildSucceeded})
	})
	if b, err := c.DeleteBuild(ctx, "bld-1"); err != nil || b.ID != "bld-1" {
		t.Errorf("DeleteBuild: %+v %v", b, err)
	}
}

// TestBuildHTTPEarlyAnswer: a daemon that answers before reading the
// whole source (a refusal) ends Build with its answer, and the goroutine
// writing the body ends with it.
func TestBuildHTTPEarlyAnswer(t *testing.T) {
	c, mux := newFakeHTTP(t)
	mux.HandleFunc("POST /v1/builds", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusBadRequest, api.Error{Code: api.CodeInvalidArgument, Message: "max_files above the operator's 50000"})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A source that never ends: only the answer can end the call.
	_, err := c.Build(ctx, api.CreateBuild{Command: []string{"true"}, MaxFiles: 1 << 30}, endless{})
	if Code(err) != api.CodeInvalidArgument {
		t.Fatalf("Build: %v", err)
	}
}

// TestBuildStdio: over JSON-RPC the source travels in content, the log
// events come as notifications and the final build is the response; a
// source above MaxStdioBuildSource is refused before it is sent.
func TestBuildStdio(t *testing.T) {
	c := newStdio(t, "stdio")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := c.Build(ctx, api.CreateBuild{Command: []string{"make"}}, strings.NewReader("TAR"))
	if err != nil || b.ID != "bld-stdio" || b.Message != "make: 3 bytes" {
		t.Fatalf("Build: %+v %v", b, err)
	}
	var log bytes.Buffer
	if b, err := c.BuildLog(ctx, "bld-stdio", 0, true, &log); err != nil || b.Status != api.BuildSucceeded || log.String() != "one\ntwo\n" {
		t.Errorf("BuildLog: %+v %v %q", b, err, log.String())
	}
	var art bytes.Buffer
	if err := c.BuildArtifact(ctx, "bld-stdio", "abc", &art); err != nil || art.String() != "artifact abc" {
		t.Errorf("BuildArtifact: %v %q", err, art.String())
	}
	_, err = c.Build(ctx, api.CreateBuild{Command: []string{"make"}}, io.LimitReader(endless{}, MaxStdioBuildSource+1))
	if Code(err) != api.CodeTooLarge {
		t.Errorf("a source above the stdio cap: %v", err)
	}
}

// endless reads forever.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

type failWriter struct{ err error }

func (f failWriter) Write([]byte) (int, error) { return 0, f.err }
