package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/bench/internal/moatd"
)

// client calls a daemon's HTTP API over keep-alive connections.
type client struct {
	base string
	hc   *http.Client
}

func newClient(base string, conns int, timeout time.Duration) *client {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         dialer.DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &client{base: base, hc: &http.Client{Transport: tr, Timeout: timeout}}
}

func (c *client) close() { c.hc.CloseIdleConnections() }

// send sends one request with token; body, when not nil, is JSON.
func (c *client) send(ctx context.Context, method, path, token string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return c.hc.Do(req)
}

// call sends one request, reads the whole answer and decodes it into out
// (when not nil) if the status is want; otherwise an error with the
// answer's start.
func (c *client) call(ctx context.Context, method, path, token string, body any, want int, out any) error {
	resp, err := c.send(ctx, method, path, token, body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, snippet(b))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decoding the answer: %w (%s)", method, path, err, snippet(b))
		}
	}
	return nil
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// create makes a sandbox with the server's defaults.
func (c *client) create(ctx context.Context, token string) (string, error) {
	var sb api.Sandbox
	if err := c.call(ctx, http.MethodPost, "/v1/sandboxes", token, map[string]any{}, http.StatusCreated, &sb); err != nil {
		return "", err
	}
	if sb.ID == "" {
		return "", fmt.Errorf("create: no sandbox id")
	}
	return sb.ID, nil
}

func (c *client) delete(ctx context.Context, token, id string) error {
	return c.call(ctx, http.MethodDelete, "/v1/sandboxes/"+id, token, nil, http.StatusOK, nil)
}

// execBody is the body of an exec of args; concurrent lets several run in
// one sandbox at once.
type execBody struct {
	Args        []string `json:"args"`
	OutputLimit int      `json:"output_limit,omitempty"`
	Concurrent  bool     `json:"concurrent,omitempty"`
}

// execResult is the part of an exec's answer the benchmark reads.
type execResult struct {
	ExitCode    int    `json:"exit_code"`
	ExitReason  string `json:"exit_reason"`
	Error       string `json:"error"`
	Stdout      string `json:"stdout"`
	StdoutBytes int64  `json:"stdout_bytes"`
	Truncated   bool   `json:"truncated"`
}

func (c *client) exec(ctx context.Context, token, id string, body *execBody) (*execResult, error) {
	var res execResult
	if err := c.call(ctx, http.MethodPost, "/v1/sandboxes/"+id+"/exec", token, body, http.StatusOK, &res); err != nil {
		return nil, err
	}
	if res.ExitCode != 0 {
		return &res, fmt.Errorf("exec %v: exit %d (%s) %s", body.Args, res.ExitCode, res.ExitReason, res.Error)
	}
	return &res, nil
}

// streamTotals is what a reader of a process's output stream received.
type streamTotals struct {
	received   int64 // bytes of stdout and stderr events
	lostBytes  int64 // the lost events' lost_bytes
	lostEvents int
	result     *execResult // from the exit event
}

// follow reads the output stream of process pid of sandbox id until its
// exit event.
func (c *client) follow(ctx context.Context, token, id string, pid uint64) (*streamTotals, error) {
	resp, err := c.send(ctx, http.MethodGet, fmt.Sprintf("/v1/sandboxes/%s/processes/%d/output?follow=true", id, pid), token, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("output: HTTP %d: %s", resp.StatusCode, snippet(b))
	}
	t := &streamTotals{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		var ev struct {
			Type      string          `json:"type"`
			LostBytes int64           `json:"lost_bytes"`
			Text      string          `json:"text"`
			Data      []byte          `json:"data"`
			Result    json.RawMessage `json:"result"`
			Error     *api.Error      `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return t, fmt.Errorf("output: not an event: %v (%s)", err, snippet(sc.Bytes()))
		}
		switch ev.Type {
		case api.EventStdout, api.EventStderr:
			t.received += int64(len(ev.Text) + len(ev.Data))
		case api.EventLost:
			t.lostBytes += ev.LostBytes
			t.lostEvents++
		case api.EventExit:
			var r execResult
			if err := json.Unmarshal(ev.Result, &r); err != nil {
				return t, fmt.Errorf("output: exit event: %v", err)
			}
			t.result = &r
			return t, nil
		case api.EventError:
			return t, fmt.Errorf("output: error event: %v", ev.Error)
		}
	}
	if err := sc.Err(); err != nil {
		return t, fmt.Errorf("output: %w", err)
	}
	return t, fmt.Errorf("output: the stream ended without an exit event")
}

// newToken is a random API token.
func newToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return "moat_bench_" + hex.EncodeToString(b[:])
}

// addTenants gives the daemon a token for each tenant but "default"
// (whose token it made itself): appended to its tokens file, which it
// reloads on SIGHUP; it returns once every token is accepted.
func addTenants(ctx context.Context, d *moatd.Daemon, c *client, tenants []string) (map[string]string, error) {
	tok := map[string]string{}
	var lines strings.Builder
	for _, t := range tenants {
		if t == "default" {
			tok[t] = d.Token
			continue
		}
		tok[t] = newToken()
		fmt.Fprintf(&lines, "%s %s\n", t, tok[t])
	}
	if lines.Len() == 0 {
		return tok, nil
	}
	f, err := os.OpenFile(filepath.Join(d.DataDir(), "tokens"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil, err
	}
	_, err = f.WriteString(lines.String())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	if err := syscall.Kill(d.PID, syscall.SIGHUP); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(15 * time.Second)
	for _, t := range tenants {
		for {
			err := c.call(ctx, http.MethodGet, "/v1/sandboxes", tok[t], nil, http.StatusOK, nil)
			if err == nil {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return nil, fmt.Errorf("tenant %s's token not accepted after SIGHUP: %v", t, err)
			}
			// Polling for the reload, which has no other signal.
			time.Sleep(20 * time.Millisecond)
		}
	}
	return tok, nil
}
