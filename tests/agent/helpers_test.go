//go:build linux

package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/internal/testutil"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.Cleanup()
	os.Exit(code)
}

// hangGuard bounds one moat command: a run here takes a second or two.
const hangGuard = 60 * time.Second

// env is the environment moat runs with: this one without moat's own
// variables (no daemon is reached by accident), plus extra.
func env(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MOAT_") {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}

// result is one moat command: its exit code and output.
type result struct {
	code           int
	stdout, stderr string
}

// moat runs the moat binary with args and the environment e.
func moat(t *testing.T, e []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, testutil.Moat(t), args...)
	cmd.Env, cmd.Dir = e, t.TempDir()
	var o, eb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &eb
	err := cmd.Run()
	r := result{stdout: o.String(), stderr: eb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("moat %q: %v", args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("moat %q: still running after %s\nstderr: %s", args, hangGuard, r.stderr)
	}
	return r
}

// private is the environment of a private daemon with its data in a new
// temporary directory (returned).
func private(t *testing.T) ([]string, string) {
	t.Helper()
	testutil.RequireRoot(t)
	data := t.TempDir()
	return env("MOAT_DATA=" + data), data
}

// provider is one providers entry of an agents file.
type provider struct {
	name, kind, url, model string
	tags                   []string
	maxConcurrency         int
}

// agentsFile writes an agents file with providers ps and the agents
// section agents (YAML, indented as under "agents:") and returns its
// path.
func agentsFile(t *testing.T, ps []provider, agents string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("providers:\n")
	for _, p := range ps {
		fmt.Fprintf(&b, "  - name: %s\n    kind: %s\n    base_url: %s\n    model: %s\n", p.name, p.kind, p.url, p.model)
		if len(p.tags) > 0 {
			fmt.Fprintf(&b, "    tags: [%s]\n", strings.Join(p.tags, ", "))
		}
		if p.maxConcurrency > 0 {
			fmt.Fprintf(&b, "    max_concurrency: %d\n", p.maxConcurrency)
		}
	}
	b.WriteString("agents:\n" + agents)
	path := filepath.Join(t.TempDir(), "agents.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// jsonRun decodes the output of moat agent run --json: NDJSON of the
// run's events, then the run on the last line; anything else fails the
// test.
func jsonRun(t *testing.T, r result) ([]api.AgentEvent, *api.AgentRun) {
	t.Helper()
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) < 2 {
		t.Fatalf("--json printed %d lines (exit %d)\nstdout: %s\nstderr: %s", len(lines), r.code, r.stdout, r.stderr)
	}
	var evs []api.AgentEvent
	var last uint64
	for i, l := range lines[:len(lines)-1] {
		var ev api.AgentEvent
		dec := json.NewDecoder(strings.NewReader(l))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ev); err != nil || ev.Type == "" || ev.Seq <= last {
			t.Fatalf("line %d is not the next event (%v): %s", i+1, err, l)
		}
		last = ev.Seq
		evs = append(evs, ev)
	}
	var run api.AgentRun
	dec := json.NewDecoder(strings.NewReader(lines[len(lines)-1]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&run); err != nil || run.ID == "" {
		t.Fatalf("the last line is not the run (%v): %s", err, lines[len(lines)-1])
	}
	return evs, &run
}

// runID is the run's id moat agent run printed on stderr.
func runID(t *testing.T, stderr string) string {
	t.Helper()
	_, rest, ok := strings.Cut(stderr, "moat: agent run ")
	id, _, _ := strings.Cut(rest, " ")
	if !ok || id == "" {
		t.Fatalf("no run id on stderr:\n%s", stderr)
	}
	return id
}

// ofType are the events of type typ.
func ofType(evs []api.AgentEvent, typ string) []api.AgentEvent {
	var out []api.AgentEvent
	for _, ev := range evs {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}
