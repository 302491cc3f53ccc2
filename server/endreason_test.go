package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
)

// execRaw runs an exec and returns its result decoded and as a JSON
// object (to tell an absent field from a zero one).
func (h *harness) execRaw(token, id string, req api.Exec) (sandbox.Result, map[string]any) {
	h.t.Helper()
	r := h.do("POST", "/v1/sandboxes/"+id+"/exec", token, req)
	if r.status != http.StatusOK {
		h.t.Fatalf("exec %q: %d %s", req.Args, r.status, r.body)
	}
	var res sandbox.Result
	var raw map[string]any
	r.decode(h.t, &res)
	r.decode(h.t, &raw)
	return res, raw
}

// sandboxTimeout is the exit_reason of a call its sandbox's max age ended
// (sandbox.ReasonSandboxTimeout, spelled out so that the test also runs
// against code without it).
const sandboxTimeout sandbox.ExitReason = "sandbox_timeout"

// TestExecSandboxTimeout: a sandbox that reaches its maximum age while
// calls run ends them with exit 124 and exit_reason sandbox_timeout (not
// a 125 setup_error that looks like a crash), a streamed exec's exit
// event and a background process's record included. The control: calls
// that end before the max age are unaffected, and a call's own timeout
// is still exit_reason timeout.
func TestExecSandboxTimeout(t *testing.T) {
	h := newFakeHarness(t, func(c *Config) { c.PruneInterval = 50 * time.Millisecond })
	const maxAge = 2000
	id := h.create(tokenA, api.CreateSandbox{TimeoutMs: maxAge})
	base := "/v1/sandboxes/" + id
	m, err := h.svc.lookup(Caller{Tenant: "a"}, id)
	if err != nil {
		t.Fatal(err)
	}
	created := m.view().CreatedAt

	if res, _ := h.execRaw(tokenA, id, api.Exec{Args: []string{"echo", "ok"}}); res.ExitCode != 0 || res.ExitReason != sandbox.ReasonExited || res.Stdout != "ok\n" {
		t.Fatalf("control exec: %+v", res)
	}
	if res, _ := h.execRaw(tokenA, id, api.Exec{Args: []string{"sleep", "60"}, TimeoutMs: 100}); res.ExitCode != sandbox.ExitTimeout || res.ExitReason != sandbox.ReasonTimeout {
		t.Fatalf("the call's own timeout: exit %d (%s) %s", res.ExitCode, res.ExitReason, res.Error)
	}
	r := h.do("POST", base+"/processes", tokenA, api.Exec{Args: []string{"sleep", "60"}})
	if r.status != http.StatusCreated {
		t.Fatalf("start: %d %s", r.status, r.body)
	}
	var bg api.Process
	r.decode(t, &bg)
	// A streamed exec, known to run once its first output arrives.
	body, _ := json.Marshal(api.Exec{Args: []string{"sh", "-c", "echo go; exec sleep 60"}, Stream: true, Concurrent: true})
	req, _ := http.NewRequest("POST", h.srv.URL+base+"/exec", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tokenA)
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	stream := bufio.NewReader(resp.Body)
	if first, err := stream.ReadBytes('\n'); err != nil || !bytes.Contains(first, []byte(`"stdout"`)) {
		t.Fatalf("streamed exec: %d %s %v", resp.StatusCode, first, err)
	}

	// The sandbox's own timeout firing is the event that ends this call.
	res, raw := h.execRaw(tokenA, id, api.Exec{Args: []string{"sh", "-c", "echo before; exec sleep 60"}, Concurrent: true})
	took := time.Since(created)
	if res.ExitCode != sandbox.ExitTimeout || res.ExitReason != sandboxTimeout {
		t.Fatalf("exec at the sandbox's max age: exit %d (%s) %q; want 124 (%s)", res.ExitCode, res.ExitReason, res.Error, sandboxTimeout)
	}
	if res.Stdout != "before\n" || !strings.Contains(res.Error, "maximum age") || res.Enforcement == nil {
		t.Fatalf("exec at the sandbox's max age: stdout %q error %q enforcement %v (%v)", res.Stdout, res.Error, res.Enforcement, raw)
	}
	if took > maxAge*time.Millisecond+5*time.Second {
		t.Fatalf("the exec answered %v after the create; the max age is %d ms", took, maxAge)
	}
	rest, err := io.ReadAll(stream)
	if err != nil {
		t.Fatal(err)
	}
	evs := events(t, rest)
	if last := evs[len(evs)-1]; last.Type != api.EventExit || last.Result == nil || last.Result.ExitCode != sandbox.ExitTimeout || last.Result.ExitReason != sandboxTimeout {
		t.Fatalf("streamed exec: %s", rest)
	}
	if reason := h.waitEnd(id, within); reason != api.EndTimeout {
		t.Fatalf("end reason %q", reason)
	}
	// Another exec is refused: the sandbox is gone.
	if r := h.do("POST", base+"/exec", tokenA, api.Exec{Args: []string{"true"}}); r.status != http.StatusConflict {
		t.Fatalf("exec after the end: %d %s", r.status, r.body)
	}
	// The background process's record: written once its waiter has run
	// (the service's tasks, which Close waits for).
	if err := h.svc.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	calls, err := h.st.ListCalls(context.Background(), "a", id, 100)
	if err != nil {
		t.Fatal(err)
	}
	started := 0
	for _, c := range calls {
		if c.Kind != "start" {
			continue
		}
		started++
		if c.ExitCode == nil || *c.ExitCode != sandbox.ExitTimeout || c.ExitReason != string(sandboxTimeout) {
			t.Fatalf("background process %d: its record says exit %v (%s)", bg.ID, c.ExitCode, c.ExitReason)
		}
	}
	if started != 1 {
		t.Fatalf("%d start calls recorded: %+v", started, calls)
	}
}

// TestExecOOMKills: in a daemon's sandbox a child the OOM killer ends is
// counted in the exec's oom_kills while the shell survives (exit 0); the
// count is the call's (the next call counts none), and an OOM kill of the
// main process is still exit 137, exit_reason oom.
func TestExecOOMKills(t *testing.T) {
	h := newHarness(t, nil)
	id := h.create(tokenA, api.CreateSandbox{Limits: sandbox.Limits{MemoryBytes: 64 << 20}})
	res, raw := h.execRaw(tokenA, id, api.Exec{Args: []string{"sh", "-c", `python3 -c "b=bytearray(200<<20)"; echo survived`}})
	if res.ExitCode != 0 || res.ExitReason != sandbox.ReasonExited || res.Stdout != "survived\n" {
		t.Fatalf("child OOM: exit %d (%s) stdout %q: %s", res.ExitCode, res.ExitReason, res.Stdout, res.Error)
	}
	if n, _ := raw["oom_kills"].(float64); n < 1 {
		t.Fatalf("child OOM: oom_kills %v, want >= 1", raw["oom_kills"])
	}
	ctl, raw := h.execRaw(tokenA, id, api.Exec{Args: []string{"sh", "-c", "echo survived"}})
	if ctl.ExitCode != 0 || ctl.Stdout != "survived\n" {
		t.Fatalf("control: %+v", ctl)
	}
	if _, ok := raw["oom_kills"]; ok {
		t.Fatalf("control: oom_kills %v, want it absent", raw["oom_kills"])
	}
	main, raw := h.execRaw(tokenA, id, api.Exec{Args: []string{"python3", "-c", "b = bytearray(300 << 20)"}})
	if main.ExitCode != 137 || main.ExitReason != sandbox.ReasonOOM {
		t.Fatalf("main OOM: exit %d (%s): %s", main.ExitCode, main.ExitReason, main.Error)
	}
	if n, _ := raw["oom_kills"].(float64); n < 1 {
		t.Fatalf("main OOM: oom_kills %v, want >= 1", raw["oom_kills"])
	}
	var audited map[string]any
	for _, ev := range h.auditEvents(tokenA, "process.exec") {
		if ev.Sandbox == id {
			_ = json.Unmarshal(ev.Result, &audited)
			break
		}
	}
	if n, _ := audited["oom_kills"].(float64); n < 1 {
		t.Fatalf("the audit of the first exec: %v", audited)
	}
}
