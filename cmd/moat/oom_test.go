//go:build linux

package main

import (
	"encoding/json"
	"testing"

	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/sandbox"
)

// runRaw runs `moat run --json` and returns the result both decoded and
// as a JSON object, to tell an absent field from a zero one.
func runRaw(t *testing.T, args ...string) (*sandbox.Result, map[string]any) {
	t.Helper()
	testutil.RequireRoot(t)
	o := testutil.Exec(t, append([]string{"run", "--json"}, args...)...)
	var res sandbox.Result
	var raw map[string]any
	if err := json.Unmarshal([]byte(o.Stdout), &res); err != nil {
		t.Fatalf("moat run %v: exit %d, not a JSON result: %v\nstdout: %s\nstderr: %s", args, o.Code, err, o.Stdout, o.Stderr)
	}
	_ = json.Unmarshal([]byte(o.Stdout), &raw)
	if res.ExitCode != o.Code {
		t.Fatalf("moat run %v: JSON exit_code %d but process exit %d", args, res.ExitCode, o.Code)
	}
	return &res, raw
}

// oomKills is the result's oom_kills (0 when absent).
func oomKills(raw map[string]any) float64 {
	n, _ := raw["oom_kills"].(float64)
	return n
}

// TestOOMKillOfChild: a child the OOM killer ends is counted in the
// result's oom_kills even though the main process (the shell) survives
// and exits 0; without the hungry child nothing is counted, and an OOM
// kill of the main process is still exit 137, exit_reason oom.
func TestOOMKillOfChild(t *testing.T) {
	res, raw := runRaw(t, "--memory", "64m", "--sh", `python3 -c "b=bytearray(200<<20)"; echo survived`)
	if res.ExitCode != 0 || res.ExitReason != sandbox.ReasonExited || res.Stdout != "survived\n" {
		t.Fatalf("child OOM: exit %d (%s) stdout %q: %s", res.ExitCode, res.ExitReason, res.Stdout, res.Error)
	}
	if oomKills(raw) < 1 {
		t.Fatalf("child OOM: oom_kills %v, want >= 1 (result %v)", raw["oom_kills"], raw)
	}

	ctl, raw := runRaw(t, "--memory", "64m", "--sh", `python3 -c "b=bytearray(8<<20)"; echo survived`)
	if ctl.ExitCode != 0 || ctl.Stdout != "survived\n" {
		t.Fatalf("control: exit %d stdout %q: %s", ctl.ExitCode, ctl.Stdout, ctl.Error)
	}
	if _, ok := raw["oom_kills"]; ok {
		t.Fatalf("control: oom_kills %v, want it absent", raw["oom_kills"])
	}

	main, raw := runRaw(t, "--memory", "64m", "--", "python3", "-c", allocPy, "300")
	if main.ExitCode != 137 || main.ExitReason != sandbox.ReasonOOM || oomKills(raw) < 1 {
		t.Fatalf("main OOM: exit %d (%s) oom_kills %v: %s", main.ExitCode, main.ExitReason, raw["oom_kills"], main.Error)
	}
}
