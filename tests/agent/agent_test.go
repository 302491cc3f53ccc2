//go:build linux

package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/moat-sandbox/moat/agent/model"
	"github.com/moat-sandbox/moat/agent/model/modeltest"
	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// call is a scripted tool call.
func call(name, args string) []model.ToolCall {
	return []model.ToolCall{{Name: name, Arguments: json.RawMessage(args)}}
}

// lastToolResult is the text of the last tool message of req ("" if none).
func lastToolResult(req modeltest.Received) (string, bool) {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if m := req.Messages[i]; m.Role == model.RoleTool {
			return m.Text, m.IsError
		}
	}
	return "", false
}

// toolLoop answers a request whose conversation ends with a tool result
// with text, and any other with a shell_exec of command: one tool call,
// then the answer, whatever the order requests come in.
func toolLoop(command, text string) modeltest.Responder {
	return func(req modeltest.Received) modeltest.Turn {
		if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == model.RoleTool {
			return modeltest.Turn{Text: text}
		}
		return modeltest.Turn{ToolCalls: call("shell_exec", `{"command":`+strconv.Quote(command)+`}`)}
	}
}

const coder = `  - name: coder
    model: small
    system: You write and run small programs.
    tools: [shell_exec, write_file, read_file]
`

// TestAgentWritesRunsReads: a task that writes a file, runs it and reads
// its output, through moat agent run with a private daemon and a fake
// OpenAI-compatible provider: exit 0, the answer on stdout, each tool
// call and its result on stderr, and the model got each tool's result.
func TestAgentWritesRunsReads(t *testing.T) {
	e, _ := private(t)
	script := "echo hello from the sandbox\necho $((6 * 7))\n"
	srv := modeltest.NewOpenAI(t,
		modeltest.Turn{ToolCalls: call("write_file", `{"path":"hello.sh","content":`+strconv.Quote(script)+`}`)},
		modeltest.Turn{ToolCalls: call("shell_exec", `{"command":"sh hello.sh > out.txt; echo ran"}`)},
		modeltest.Turn{ToolCalls: call("read_file", `{"path":"out.txt"}`)},
		modeltest.Turn{Text: "The script printed hello and 42.", Check: func(req modeltest.Received) error {
			if out, isErr := lastToolResult(req); isErr || !strings.Contains(out, "hello from the sandbox\n42") {
				return fmt.Errorf("read_file's result (error %v): %q", isErr, out)
			}
			return nil
		}},
	)
	file := agentsFile(t, []provider{{name: "local", kind: "openai", url: srv.URL, model: "small"}}, coder)
	r := moat(t, e, "agent", "run", "--config", file, "--agent", "coder", "write hello.sh, run it, tell me what it printed")
	if r.code != 0 || r.stdout != "The script printed hello and 42.\n" {
		t.Fatalf("exit %d\nstdout: %q\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{
		"[coder] model: local/small, 10→5 tokens\n",
		"[coder] tool write_file {\"path\":\"hello.sh\"",
		"[coder] tool shell_exec {\"command\":\"sh hello.sh > out.txt; echo ran\"}\n[coder] → allow, exit 0, ",
		"[coder] tool read_file {\"path\":\"out.txt\"}\n[coder] → allow, 2 lines\n",
		"succeeded: 4 turns, 40→20 tokens\n",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	got := srv.Received()
	if len(got) != 4 {
		t.Fatalf("the provider got %d requests, want 4", len(got))
	}
	if out, isErr := lastToolResult(got[2]); isErr || !strings.Contains(out, "ran") {
		t.Errorf("shell_exec's result as the model got it (error %v): %q", isErr, out)
	}
	if len(got[0].Tools) != 3 || got[0].System != "You write and run small programs." {
		t.Errorf("first request: tools %v, system %q", got[0].Tools, got[0].System)
	}
}

// TestAgentConcurrentRuns: four runs at once against one moat serve share
// its model client: the provider's max_concurrency 2 holds (the fake
// never has more than 2 requests in flight, and has 2 while the four
// runs all wait for the model), and every run succeeds. The provider is
// of the Anthropic kind.
func TestAgentConcurrentRuns(t *testing.T) {
	testutil.RequireRoot(t)
	const runs = 4
	release := make(chan struct{})
	srv := modeltest.NewAnthropic(t)
	srv.Respond(modeltest.Always(modeltest.Turn{Text: "done", Hold: release}))
	file := agentsFile(t, []provider{{name: "claude", kind: "anthropic", url: srv.URL, model: "small", maxConcurrency: 2}}, coder)
	data := t.TempDir()
	d := testutil.StartDaemon(t, data, "--listen", "127.0.0.1:0", "--models", file)
	e := env("MOAT_URL="+d.URL, "MOAT_TOKEN="+d.Token)

	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	ids := make(chan string, runs)
	var wg sync.WaitGroup
	results := make([]result, runs)
	for i := range runs {
		cmd := exec.CommandContext(ctx, testutil.Moat(t), "agent", "run", "--config", file, "--agent", "coder", "task "+strconv.Itoa(i))
		cmd.Env, cmd.Dir = e, t.TempDir()
		var out strings.Builder
		cmd.Stdout = &out
		pr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var errOut strings.Builder
			sc := bufio.NewScanner(pr)
			sent := false
			for sc.Scan() {
				errOut.WriteString(sc.Text() + "\n")
				if rest, ok := strings.CutPrefix(sc.Text(), "moat: agent run "); ok && !sent {
					id, _, _ := strings.Cut(rest, " ")
					ids <- id
					sent = true
				}
			}
			if !sent {
				ids <- ""
			}
			_ = cmd.Wait() // the exit code (-1 if killed) says how it ended
			results[i] = result{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errOut.String()}
		}()
	}
	// Every run asks the model (model.request comes before the client
	// waits for room), and two requests are in flight: the other two wait.
	c, err := client.New(client.WithHTTP(d.URL, d.Token))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	errAsked := errors.New("asked")
	for range runs {
		id := <-ids
		if id == "" {
			close(release)
			wg.Wait()
			t.Fatalf("a run did not start: %+v", results)
		}
		_, err := c.AgentEvents(ctx, api.AgentEvents{Run: id, Follow: true}, func(ev api.AgentEvent) error {
			if ev.Type == api.AgentEvModelRequest {
				return errAsked
			}
			return nil
		})
		if !errors.Is(err, errAsked) {
			t.Errorf("run %s never asked the model: %v", id, err)
		}
	}
	if err := srv.WaitInFlight(ctx, 2); err != nil {
		t.Error(err)
	}
	close(release)
	wg.Wait()
	for i, r := range results {
		if r.code != 0 || r.stdout != "done\n" {
			t.Errorf("run %d: exit %d\nstdout: %q\nstderr: %s", i, r.code, r.stdout, r.stderr)
		}
	}
	if n, m := srv.Requests(), srv.MaxInFlight(); n != runs || m != 2 {
		t.Errorf("the provider got %d requests, at most %d at once; want %d, 2", n, m, runs)
	}
}

// TestAgentFailover: two providers of one model, one failing with 500:
// the run succeeds, both were asked, and the failing one's error is among
// the run's events. The output is --json: NDJSON of the events, then the
// run.
func TestAgentFailover(t *testing.T) {
	e, _ := private(t)
	flaky := modeltest.NewOpenAI(t, modeltest.Turn{Status: http.StatusInternalServerError})
	flaky.Respond(toolLoop("echo via flaky", "answered by flaky"))
	steady := modeltest.NewAnthropic(t)
	steady.Respond(toolLoop("echo via steady", "answered by steady"))
	// a-flaky comes first among equals: the first request goes to it.
	file := agentsFile(t, []provider{
		{name: "a-flaky", kind: "openai", url: flaky.URL, model: "small"},
		{name: "b-steady", kind: "anthropic", url: steady.URL, model: "small"},
	}, coder)
	r := moat(t, e, "agent", "run", "--json", "--config", file, "--agent", "coder", "say hi")
	evs, run := jsonRun(t, r)
	if r.code != 0 || run.State != api.AgentSucceeded || !strings.HasPrefix(run.Answer, "answered by ") {
		t.Fatalf("exit %d, run %+v\nstderr: %s", r.code, run, r.stderr)
	}
	if flaky.Requests() == 0 || steady.Requests() == 0 {
		t.Errorf("requests: a-flaky %d, b-steady %d; want both asked", flaky.Requests(), steady.Requests())
	}
	// The attempt that failed over is a model.error event of its
	// provider, before the answer of the other.
	failedAttempts(t, evs, "a-flaky")
	answered := map[string]bool{}
	for _, ev := range ofType(evs, api.AgentEvModelResponse) {
		answered[ev.Provider] = true
	}
	if !answered["b-steady"] {
		t.Errorf("no model.response from b-steady: %v", answered)
	}
	if got := evs[len(evs)-1].Type; got != api.AgentEvRunSucceeded {
		t.Errorf("the last event is %s", got)
	}
	if strings.Contains(r.stderr, "[coder]") {
		t.Errorf("--json printed event lines on stderr:\n%s", r.stderr)
	}
}

// TestAgentGreenTea: an agent tagged green-tea, with one local provider
// tagged green-tea and one remote without the tag: the remote gets no
// request, even while the local one answers 429 once; control: an
// untagged agent's run reaches the remote.
func TestAgentGreenTea(t *testing.T) {
	e, _ := private(t)
	local := modeltest.NewAnthropic(t, modeltest.Turn{Status: http.StatusTooManyRequests})
	local.Respond(toolLoop("echo local", "answered locally"))
	remote := modeltest.NewOpenAI(t)
	remote.Respond(toolLoop("echo remote", "answered remotely"))
	// a-remote comes first among equals: without the tag it would be asked.
	file := agentsFile(t, []provider{
		{name: "a-remote", kind: "openai", url: remote.URL, model: "small"},
		{name: "b-local", kind: "anthropic", url: local.URL, model: "small", tags: []string{"local", "green-tea"}},
	}, coder+`  - name: secret
    model: small
    tags: [green-tea]
    tools: [shell_exec]
`)
	r := moat(t, e, "agent", "run", "--json", "--config", file, "--agent", "secret", "summarise the secret")
	evs, run := jsonRun(t, r)
	if r.code != 0 || run.Answer != "answered locally" {
		t.Fatalf("green-tea: exit %d, run %+v\nstderr: %s", r.code, run, r.stderr)
	}
	if n := remote.Requests(); n != 0 {
		t.Fatalf("a green-tea run sent %d requests to the untagged provider", n)
	}
	failedAttempts(t, evs, "b-local")
	for _, ev := range evs {
		if ev.Provider != "" && ev.Provider != "b-local" {
			t.Errorf("a green-tea run's event names provider %s: %+v", ev.Provider, ev)
		}
	}

	r = moat(t, e, "agent", "run", "--json", "--config", file, "--agent", "coder", "anything")
	if _, run := jsonRun(t, r); r.code != 0 || remote.Requests() == 0 {
		t.Errorf("control: exit %d, answer %q, the remote got %d requests", r.code, run.Answer, remote.Requests())
	}
}

// TestAgentResumeAfterKill: the private daemon of moat agent run is
// killed (SIGKILL) while the model holds its second turn; moat agent
// resume with the same MOAT_DATA takes the run up in a new private
// daemon, which repeats the interrupted model call with the whole
// conversation, and the run finishes.
func TestAgentResumeAfterKill(t *testing.T) {
	e, _ := private(t)
	reached := make(chan struct{})
	never := make(chan struct{})
	srv := modeltest.NewOpenAI(t,
		modeltest.Turn{ToolCalls: call("shell_exec", `{"command":"echo step one"}`)},
		modeltest.Turn{Hold: never, Check: func(modeltest.Received) error { close(reached); return nil }},
	)
	srv.Respond(func(req modeltest.Received) modeltest.Turn {
		out, _ := lastToolResult(req)
		if !strings.Contains(out, "step one") {
			t.Errorf("the repeated model call lacks the tool's result: %+v", req.Messages)
		}
		return modeltest.Turn{Text: "finished after the restart"}
	})
	file := agentsFile(t, []provider{{name: "local", kind: "openai", url: srv.URL, model: "small"}}, coder)

	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, testutil.Moat(t), "agent", "run", "--config", file, "--agent", "coder", "run step one")
	cmd.Env, cmd.Dir = e, t.TempDir()
	var errOut strings.Builder
	cmd.Stderr = &errOut
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reached:
	case <-ctx.Done():
		t.Fatalf("the model's second turn never came")
	}
	daemon := childOf(t, cmd.Process.Pid)
	if err := syscall.Kill(daemon, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if cmd.ProcessState.ExitCode() != 125 {
		t.Errorf("moat agent run after its daemon died: %v\nstderr: %s", err, errOut.String())
	}
	id := runID(t, errOut.String())

	r := moat(t, e, "agent", "resume", "--local", "--config", file, id)
	if r.code != 0 || r.stdout != "finished after the restart\n" {
		t.Fatalf("resume: exit %d\nstdout: %q\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if n := srv.Requests(); n != 3 {
		t.Errorf("the provider got %d requests, want 3 (the held one repeated once)", n)
	}
}

// childOf is the pid of the one child of process pid (moat agent run's
// private daemon).
func childOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) != 1 {
		t.Fatalf("process %d has children %q, want its daemon only", pid, f)
	}
	child, err := strconv.Atoi(f[0])
	if err != nil {
		t.Fatal(err)
	}
	return child
}

// failedAttempts checks that a run that succeeded after a failed
// attempt has model.error events for it, each naming provider (the one
// that failed) and no other: the engine reports the attempts the model
// client retried or failed over (model.Request.OnAttempt).
func failedAttempts(t *testing.T, evs []api.AgentEvent, provider string) {
	t.Helper()
	seen := false
	for _, ev := range ofType(evs, api.AgentEvModelError) {
		if ev.Provider != provider {
			t.Errorf("model.error of provider %q, want only %s: %+v", ev.Provider, provider, ev)
		}
		seen = true
	}
	if !seen {
		t.Errorf("no model.error event for the failed attempt of %s", provider)
	}
}
