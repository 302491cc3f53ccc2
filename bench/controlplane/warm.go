package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/bench/internal/moatd"
)

// The warm-pool row: a second daemon, started with a config that keeps a
// warm pool of the built-in host template, times create → first echo
// when the create is served by the pool. Each sample waits (untimed) until
// the pool is full again, so every sample is a claim, never a miss; the
// create's answer must say pooled.

// warmPoolSize is the warm daemon's pool.
const warmPoolSize = 2

// warmDaemon is the daemon that serves the warm-pool row.
type warmDaemon struct {
	d   *moatd.Daemon
	c   *apiClient
	dir string // holds its config file
}

// startWarm starts bin serve with a config holding one warm pool.
func startWarm(ctx context.Context, bin string, extra []string, callTimeout time.Duration) (*warmDaemon, error) {
	dir, err := os.MkdirTemp("", "moat-bench-controlplane-warm-cfg-")
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "config.toml")
	body := fmt.Sprintf("[[pool]]\ntemplate = \"host\"\nsize = %d\n", warmPoolSize)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	d, err := moatd.Start(ctx, bin, "moat-bench-controlplane-warm-", append([]string{"--config", cfg}, extra...), 30*time.Second)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &warmDaemon{d: d, c: newClient(d.URL, d.Token, 2, callTimeout), dir: dir}, nil
}

// stop stops the daemon and removes its config.
func (w *warmDaemon) stop() error {
	w.c.close()
	_, err := w.d.Stop(30 * time.Second)
	os.RemoveAll(w.dir)
	return err
}

// errPoolSlow is a pool that did not fill within the call timeout.
var errPoolSlow = errors.New("the warm pool did not fill in time")

// waitFull polls the daemon's moat_pool_ready until the pool holds
// warmPoolSize sandboxes (untimed, between samples).
func (w *warmDaemon) waitFull(ctx context.Context) error {
	for {
		n, err := w.ready(ctx)
		if err != nil {
			return err
		}
		if n >= warmPoolSize {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (%d of %d ready)", errPoolSlow, n, warmPoolSize)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// ready reads the host pool's ready count from /metrics.
func (w *warmDaemon) ready(ctx context.Context) (int, error) {
	text, err := w.c.metrics(ctx)
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "moat_pool_ready{") || !strings.Contains(line, `"host"`) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("moat_pool_ready: %q: %w", line, err)
		}
		return int(v), nil
	}
	return 0, errors.New("no moat_pool_ready sample for the host template in /metrics")
}

// claimTTI waits for a full pool, then times create (which must be
// served by the pool) → first echo, and deletes the sandbox untimed.
func (w *warmDaemon) claimTTI(ctx context.Context, timeout time.Duration) (total, create, first time.Duration, err error) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := w.waitFull(cctx); err != nil {
		return 0, 0, 0, err
	}
	begin := time.Now()
	b, err := w.c.do(cctx, "create", http.MethodPost, "/v1/sandboxes", "application/json", createBody, http.StatusCreated)
	create = time.Since(begin)
	var sb struct {
		ID     string `json:"id"`
		Pooled bool   `json:"pooled"`
	}
	if err == nil {
		if jerr := json.Unmarshal(b, &sb); jerr != nil || sb.ID == "" {
			err = &callError{op: "create", status: http.StatusCreated, body: "no sandbox id in " + snippet(b)}
		}
	}
	if err == nil {
		err = w.c.echo(cctx, sb.ID, helloBody, "hello")
	}
	total = time.Since(begin)
	first = total - create
	if err == nil && !sb.Pooled {
		err = &callError{op: "create", status: http.StatusCreated, body: "not served by the warm pool"}
	}
	if sb.ID != "" {
		if derr := w.c.delete(cctx, sb.ID); derr != nil && err == nil {
			err = fmt.Errorf("after a good sample: %w", derr)
		}
	}
	return total, create, first, err
}
