package client

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/api"
)

// clearEnv unsets every MOAT_* variable for the test.
func clearEnv(t *testing.T) {
	for _, v := range []string{"MOAT_MODE", "MOAT_URL", "MOAT_TOKEN", "MOAT_TOKEN_FILE", "MOAT_BIN", "MOAT_DATA"} {
		t.Setenv(v, "")
	}
}

func TestEnvErrors(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"MOAT_MODE": "grpc"}, `MOAT_MODE="grpc"`},
		{map[string]string{"MOAT_URL": "ftp://h", "MOAT_TOKEN": "t"}, `daemon URL "ftp://h"`},
		{map[string]string{"MOAT_URL": "127.0.0.1:7070", "MOAT_TOKEN": "t"}, `want http://HOST:PORT`},
		{map[string]string{"MOAT_MODE": "http", "MOAT_TOKEN_FILE": "/nonexistent/token"}, "no API token: MOAT_TOKEN is empty and the token file cannot be read (open /nonexistent/token: no such file"},
		{map[string]string{"MOAT_MODE": "stdio", "MOAT_BIN": "/nonexistent/moat"}, "starting /nonexistent/moat serve --stdio"},
	} {
		clearEnv(t)
		for k, v := range tc.env {
			t.Setenv(k, v)
		}
		c, err := New()
		if err == nil {
			c.Close()
			t.Errorf("%v: no error", tc.env)
		} else if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.env, err, tc.want)
		}
	}
	empty := filepath.Join(t.TempDir(), "token")
	os.WriteFile(empty, []byte(" \n"), 0o600)
	clearEnv(t)
	t.Setenv("MOAT_URL", "http://h")
	t.Setenv("MOAT_TOKEN_FILE", empty)
	if _, err := New(); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Errorf("empty token file: %v", err)
	}
	if _, err := New(WithHTTP("http://h", "")); err == nil || !strings.Contains(err.Error(), "no API token") {
		t.Errorf("WithHTTP without a token: %v", err)
	}
}

// TestEnvHTTP: MOAT_URL alone chooses HTTP; the token comes from the file.
func TestEnvHTTP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer from-file" {
			writeJSON(w, 401, api.Error{Code: api.CodeUnauthenticated, Message: "no"})
			return
		}
		writeJSON(w, 200, api.SandboxList{Sandboxes: []api.Sandbox{{ID: "a"}}})
	}))
	defer srv.Close()
	tok := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tok, []byte("from-file\n"), 0o600)
	clearEnv(t)
	t.Setenv("MOAT_URL", srv.URL)
	t.Setenv("MOAT_TOKEN_FILE", tok)
	for _, opts := range [][]Option{nil, {WithHTTPFromEnv()}} {
		c, err := New(opts...)
		if err != nil {
			t.Fatal(err)
		}
		l, err := c.ListSandboxes(testCtx(t), api.ListSandboxes{})
		if err != nil || len(l) != 1 {
			t.Fatalf("%v %v", l, err)
		}
		c.Close()
	}
	// WithHTTPFromEnv ignores MOAT_MODE=stdio.
	t.Setenv("MOAT_MODE", "stdio")
	c, err := New(WithHTTPFromEnv(), WithHTTPClient(srv.Client()))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.t.(*httpTransport); !ok {
		t.Fatalf("transport %T", c.t)
	}
	c.Close()
}

// TestEnvStdio: without MOAT_URL the client starts MOAT_BIN with --data.
func TestEnvStdio(t *testing.T) {
	clearEnv(t)
	t.Setenv(fakeEnv, "stdio")
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	t.Setenv("MOAT_BIN", osArgs0())
	t.Setenv("MOAT_DATA", "/var/lib/x")
	c, err := New(WithStderr(os.Stderr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var args []string
	if err := c.t.call(testCtx(t), api.Op{Name: "test.args"}, nil, &args); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(args, []string{"serve", "--stdio", "--data", "/var/lib/x"}) {
		t.Fatalf("child args %q", args)
	}
}
