package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// apiClient calls the daemon's HTTP API the way an SDK does: one
// http.Client whose transport keeps its connections alive between calls.
type apiClient struct {
	base, auth string
	hc         *http.Client
}

// dials counts the TCP connections every client opened: with keep-alive
// working it stays near the number of clients × their concurrency.
var dials atomic.Int64

// newClient returns a client with a transport of its own that keeps up to
// conns idle connections to the daemon.
func newClient(base, token string, conns int, timeout time.Duration) *apiClient {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return dialer.DialContext(ctx, network, addr)
		},
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &apiClient{base: base, auth: "Bearer " + token, hc: &http.Client{Transport: tr, Timeout: timeout}}
}

func (c *apiClient) close() { c.hc.CloseIdleConnections() }

// callError is an answer with an unexpected status or body.
type callError struct {
	op     string
	status int
	body   string
}

func (e *callError) Error() string {
	if e.status == 0 {
		return e.op + ": " + e.body
	}
	return fmt.Sprintf("%s: HTTP %d: %s", e.op, e.status, e.body)
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// do sends one request and reads the whole answer (so the connection goes
// back to the pool), failing unless the status is want.
func (c *apiClient) do(ctx context.Context, op, method, path, ctype string, body []byte, want int) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", c.auth)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("%s: reading the answer: %w", op, err)
	}
	if resp.StatusCode != want {
		return nil, &callError{op: op, status: resp.StatusCode, body: snippet(b)}
	}
	return b, nil
}

var createBody = []byte(`{}`)

// create makes a sandbox with the server's defaults and returns its id.
func (c *apiClient) create(ctx context.Context) (string, error) {
	b, err := c.do(ctx, "create", http.MethodPost, "/v1/sandboxes", "application/json", createBody, http.StatusCreated)
	if err != nil {
		return "", err
	}
	var sb struct {
		ID    string `json:"id"`
		State string `json:"state"`
	}
	if err := json.Unmarshal(b, &sb); err != nil || sb.ID == "" {
		return "", &callError{op: "create", status: http.StatusCreated, body: "no sandbox id in " + snippet(b)}
	}
	if sb.State != "running" {
		return sb.ID, &callError{op: "create", status: http.StatusCreated, body: "state " + sb.State + ", not running"}
	}
	return sb.ID, nil
}

// createExecBody is a create that carries exec ["echo", "hello"].
var createExecBody = []byte(`{"exec":{"args":["echo","hello"]}}`)

// createExec makes a sandbox with the server's defaults that runs
// createExecBody's echo as its first call, in one request, and returns
// its id (whenever the answer names one) once the echo is checked.
func (c *apiClient) createExec(ctx context.Context) (string, error) {
	b, err := c.do(ctx, "create+exec", http.MethodPost, "/v1/sandboxes", "application/json", createExecBody, http.StatusCreated)
	if err != nil {
		return "", err
	}
	var sb struct {
		ID    string `json:"id"`
		State string `json:"state"`
		Exec  *struct {
			Result *struct {
				ExitCode   int    `json:"exit_code"`
				ExitReason string `json:"exit_reason"`
				Stdout     string `json:"stdout"`
				Stderr     string `json:"stderr"`
			} `json:"result"`
			Error json.RawMessage `json:"error"`
		} `json:"exec"`
	}
	if err := json.Unmarshal(b, &sb); err != nil || sb.ID == "" {
		return "", &callError{op: "create+exec", status: http.StatusCreated, body: "no sandbox id in " + snippet(b)}
	}
	switch {
	case sb.State != "running":
		return sb.ID, &callError{op: "create+exec", status: http.StatusCreated, body: "state " + sb.State + ", not running"}
	case sb.Exec == nil || sb.Exec.Result == nil:
		return sb.ID, &callError{op: "create+exec", status: http.StatusCreated, body: "no exec result in " + snippet(b)}
	}
	if r := sb.Exec.Result; r.ExitCode != 0 || r.Stdout != "hello\n" {
		return sb.ID, &callError{op: "create+exec", status: http.StatusCreated,
			body: fmt.Sprintf("echo hello: exit %d (%s), stdout %q, stderr %q", r.ExitCode, r.ExitReason, r.Stdout, r.Stderr)}
	}
	return sb.ID, nil
}

// execBody is the body of exec ["echo", word].
func execBody(word string) []byte {
	b, _ := json.Marshal(struct {
		Args []string `json:"args"`
	}{[]string{"echo", word}})
	return b
}

// echo runs body (from execBody(word)) to completion in sandbox id and
// checks that it exited 0 having printed word and a newline.
func (c *apiClient) echo(ctx context.Context, id string, body []byte, word string) error {
	b, err := c.do(ctx, "exec", http.MethodPost, "/v1/sandboxes/"+id+"/exec", "application/json", body, http.StatusOK)
	if err != nil {
		return err
	}
	var res struct {
		ExitCode   int    `json:"exit_code"`
		ExitReason string `json:"exit_reason"`
		Stdout     string `json:"stdout"`
		Stderr     string `json:"stderr"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		return &callError{op: "exec", status: http.StatusOK, body: "not a result: " + snippet(b)}
	}
	if res.ExitCode != 0 || res.Stdout != word+"\n" {
		return &callError{op: "exec", status: http.StatusOK,
			body: fmt.Sprintf("echo %s: exit %d (%s), stdout %q, stderr %q", word, res.ExitCode, res.ExitReason, res.Stdout, res.Stderr)}
	}
	return nil
}

func (c *apiClient) delete(ctx context.Context, id string) error {
	_, err := c.do(ctx, "delete", http.MethodDelete, "/v1/sandboxes/"+id, "", nil, http.StatusOK)
	return err
}

func filePath(id, path string) string {
	return "/v1/sandboxes/" + id + "/files?path=" + url.QueryEscape(path)
}

func (c *apiClient) writeFile(ctx context.Context, id, path string, data []byte) error {
	_, err := c.do(ctx, "file.write", http.MethodPut, filePath(id, path), "application/octet-stream", data, http.StatusOK)
	return err
}

// readFile reads path and checks it holds want.
func (c *apiClient) readFile(ctx context.Context, id, path string, want []byte) error {
	b, err := c.do(ctx, "file.read", http.MethodGet, filePath(id, path), "", nil, http.StatusOK)
	if err != nil {
		return err
	}
	if !bytes.Equal(b, want) {
		return &callError{op: "file.read", status: http.StatusOK, body: fmt.Sprintf("read %q, wrote %q", snippet(b), want)}
	}
	return nil
}

// metrics returns the daemon's /metrics text.
func (c *apiClient) metrics(ctx context.Context) (string, error) {
	b, err := c.do(ctx, "metrics", http.MethodGet, "/metrics", "", nil, http.StatusOK)
	return string(b), err
}
