package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/agent"
	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/client"
)

// These tests cover `moat agent` against a fake daemon (no root, no
// model): the command line, what each subcommand prints (everything a
// model chose escaped), its exit codes. The end-to-end tests with the
// real binary, a daemon and fake model providers are in tests/agent.

// agRunCLI runs `moat agent ARGS...` in-process.
func agRunCLI(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	return cliRun("agent", runAgent, stdin, args...)
}

// agentsDoc is a valid agents file with providers (the fake daemon
// answers in place of any model).
const agentsDoc = `providers:
  - name: local
    kind: openai
    base_url: http://127.0.0.1:1/v1
    model: small
agents:
  - name: coder
    model: small
    system: You write code.
    tools: [shell_exec, write_file, read_file]
max_turns: 5
`

// writeAgentsFile writes doc to a file and returns its path.
func writeAgentsFile(t *testing.T, doc string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "agents.yaml")
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAgentCLIUsage(t *testing.T) {
	t.Setenv("MOAT_URL", "http://127.0.0.1:1") // nothing is dialled
	t.Setenv("MOAT_TOKEN", "tok")
	t.Setenv("MOAT_MODE", "")
	for _, sub := range []string{"run", "ls", "logs", "resume", "cancel"} {
		out, _, code := agRunCLI(t, "", sub, "--help")
		if code != 0 || !strings.Contains(out, "Usage:\n  moat agent "+sub) {
			t.Errorf("%s --help (%d):\n%s", sub, code, out)
		}
	}
	out, _, code := agRunCLI(t, "", "help")
	if code != 0 || !strings.Contains(out, "Exit codes:") || !strings.Contains(out, "resume") {
		t.Errorf("help (%d):\n%s", code, out)
	}
	out, _, _ = agRunCLI(t, "", "run", "--help")
	for _, want := range []string{"125", "--config", "--agent", "--json", "--local", "--label", "130"} {
		if !strings.Contains(out, want) {
			t.Errorf("run --help lacks %q", want)
		}
	}
	file := writeAgentsFile(t, agentsDoc)
	for _, args := range [][]string{
		{}, {"bogus"}, {"run"}, {"run", "task"}, {"run", "--config", file, "task"}, {"run", "--agent", "coder", "task"},
		{"run", "--config", file, "--agent", "coder"}, {"run", "--config", file, "--agent", "coder", "a", "b"},
		{"run", "--config", file, "--agent", "coder", ""},
		{"run", "--config", file, "--agent", "coder", "--label", "novalue", "task"},
		{"run", "--config", filepath.Join(t.TempDir(), "missing.yaml"), "--agent", "coder", "task"},
		{"run", "--config", file, "--agent", "nobody", "task"}, {"run", "--bogus", "--config", file, "--agent", "coder", "task"},
		{"ls", "x"}, {"ls", "--state", "bogus"}, {"ls", "--limit", "-1"},
		{"logs"}, {"logs", "a", "b"}, {"cancel"}, {"resume"}, {"resume", "a", "b", "c"},
	} {
		_, errOut, code := agRunCLI(t, "", args...)
		if code != 125 || errOut == "" {
			t.Errorf("%q: exit %d, stderr %q", args, code, errOut)
		}
	}
	t.Setenv("MOAT_MODE", "stdio")
	if _, errOut, code := agRunCLI(t, "", "ls"); code != 125 || !strings.Contains(errOut, "MOAT_MODE=stdio") {
		t.Errorf("ls in stdio mode: %d %q", code, errOut)
	}
	// A private daemon takes the file's providers: a file without them
	// cannot be run there; nor can a run be resumed without MOAT_DATA.
	noProviders := writeAgentsFile(t, agentsDoc[strings.Index(agentsDoc, "agents:"):])
	if _, errOut, code := agRunCLI(t, "", "run", "--config", noProviders, "--agent", "coder", "task"); code != 125 || !strings.Contains(errOut, "no providers") {
		t.Errorf("a private daemon without providers: %d %q", code, errOut)
	}
	t.Setenv("MOAT_DATA", "")
	if _, errOut, code := agRunCLI(t, "", "resume", "--config", file, "ag-1"); code != 125 || !strings.Contains(errOut, "MOAT_DATA") {
		t.Errorf("resume in a private daemon without MOAT_DATA: %d %q", code, errOut)
	}
}

// TestAgentFileInvalid: an invalid agents file is refused here, before
// any daemon is asked, with the line at fault; exit 125.
func TestAgentFileInvalid(t *testing.T) {
	fakeDaemon(t).HandleFunc("POST /v1/agents/runs", func(w http.ResponseWriter, r *http.Request) {
		t.Error("an invalid document was sent")
	})
	bad := writeAgentsFile(t, agentsDoc+"bogus_key: 1\n")
	_, errOut, code := agRunCLI(t, "", "run", "--config", bad, "--agent", "coder", "task")
	if code != 125 || !strings.Contains(errOut, "moat agent run: "+bad+": ") || !strings.Contains(errOut, "line") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

// agFake is a fake daemon with one agent run: the events it streams and
// the run it describes.
type agFake struct {
	mux     *http.ServeMux
	created api.CreateAgentRun
	resumed *api.ResumeAgentRun
	events  []api.AgentEvent
	run     api.AgentRun
	// stream, when set, serves the event stream instead of events.
	stream http.HandlerFunc
	// refuse, when set, is the error agent.create answers.
	refuse *api.Error
	// onCancel, when set, is called by agent.cancel.
	onCancel func()
}

func newAgFake(t *testing.T, run api.AgentRun, events ...api.AgentEvent) *agFake {
	f := &agFake{mux: fakeDaemon(t), run: run, events: events}
	f.mux.HandleFunc("POST /v1/agents/runs", func(w http.ResponseWriter, r *http.Request) {
		json.NewDecoder(r.Body).Decode(&f.created)
		if f.refuse != nil {
			replyJSON(w, 400, f.refuse)
			return
		}
		replyJSON(w, 201, api.AgentRun{ID: f.run.ID, Agent: f.run.Agent, State: api.AgentPending})
	})
	f.mux.HandleFunc("GET /v1/agents/runs", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 200, api.AgentRunList{Runs: []api.AgentRun{f.run}})
	})
	f.mux.HandleFunc("GET /v1/agents/runs/{run}/events", func(w http.ResponseWriter, r *http.Request) {
		if f.stream != nil {
			f.stream(w, r)
			return
		}
		after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
		var evs []api.Event
		for i := range f.events {
			if f.events[i].Seq > after {
				evs = append(evs, api.Event{Type: "agent", Agent: &f.events[i]})
			}
		}
		replyEvents(w, evs...)
	})
	f.mux.HandleFunc("GET /v1/agents/runs/{run}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("run") != f.run.ID {
			replyJSON(w, 404, api.Error{Code: api.CodeNotFound, Message: "no run " + r.PathValue("run")})
			return
		}
		replyJSON(w, 200, f.run)
	})
	f.mux.HandleFunc("POST /v1/agents/runs/{run}/cancel", func(w http.ResponseWriter, r *http.Request) {
		f.run.State = api.AgentCancelled
		if f.onCancel != nil {
			f.onCancel()
		}
		replyJSON(w, 200, f.run)
	})
	f.mux.HandleFunc("POST /v1/agents/runs/{run}/resume", func(w http.ResponseWriter, r *http.Request) {
		f.resumed = &api.ResumeAgentRun{}
		json.NewDecoder(r.Body).Decode(f.resumed)
		replyJSON(w, 200, f.run)
	})
	return f
}

var agT0 = time.Date(2030, 1, 2, 12, 0, 0, 0, time.UTC)

func exitCodeOf(n int) *int { return &n }

// hostileEvents is a run in which the model writes escape sequences, a
// forged line and a bidi override everywhere it can.
func hostileEvents() []api.AgentEvent {
	const evil = "\x1b[2J\x1b]52;c;Zm9v\x07red\rforged\u202eevil"
	ev := func(seq uint64, typ string, e api.AgentEvent) api.AgentEvent {
		e.Seq, e.Time, e.Type = seq, agT0.Add(time.Duration(seq)*time.Second), typ
		if e.Agent == "" {
			e.Agent = "coder"
		}
		return e
	}
	return []api.AgentEvent{
		ev(1, api.AgentEvRunStarted, api.AgentEvent{}),
		ev(2, api.AgentEvMessage, api.AgentEvent{Text: "make hello.py and run it"}),
		ev(3, api.AgentEvModelRequest, api.AgentEvent{Provider: "local"}),
		ev(4, api.AgentEvModelResponse, api.AgentEvent{Provider: "local", Model: "small", Usage: &api.AgentUsage{InputTokens: 120, OutputTokens: 30},
			Text: "I will write it.\n" + evil}),
		ev(5, api.AgentEvToolCall, api.AgentEvent{Tool: &api.AgentToolCall{ID: "c1", Name: "shell_exec",
			Arguments: json.RawMessage(`{"command": "python3 hello.py \u003e out \u0026\u0026 printf '\u001b[31m \\u003e'"}`)}}),
		ev(6, api.AgentEvToolResult, api.AgentEvent{Tool: &api.AgentToolCall{ID: "c1", Name: "shell_exec", Decision: "allow",
			Result: strings.Repeat("line\n", 12), ExitCode: exitCodeOf(0)}}),
		ev(7, api.AgentEvToolCall, api.AgentEvent{Tool: &api.AgentToolCall{ID: "c2", Name: "fetch_url",
			Arguments: json.RawMessage(`{"url":"http://169.254.169.254/"}`), Decision: "deny", Rule: "no-metadata"}}),
		ev(8, api.AgentEvToolResult, api.AgentEvent{Tool: &api.AgentToolCall{ID: "c2", Name: "fetch_url", Decision: "deny",
			Rule: "no-metadata", Error: "policy_denied: " + evil}}),
		ev(9, api.AgentEvHandoff, api.AgentEvent{Tool: &api.AgentToolCall{ID: "c3", Name: "handoff",
			Arguments: json.RawMessage(`{"to":"reviewer","task":"review hello.py"}`)}}),
		ev(10, api.AgentEvModelResponse, api.AgentEvent{Agent: "reviewer", Provider: "local", Model: "small", Text: "LGTM"}),
		ev(11, api.AgentEvHandoffResult, api.AgentEvent{Tool: &api.AgentToolCall{ID: "c3", Name: "handoff",
			Arguments: json.RawMessage(`{"to":"reviewer","task":"review hello.py"}`), Result: "LGTM"}}),
		ev(12, api.AgentEvModelError, api.AgentEvent{Provider: "remote", Model: "big", Text: "status 429: " + evil}),
		ev(13, api.AgentEvRunSucceeded, api.AgentEvent{Text: "done"}),
	}
}

// TestAgentRunPrints: moat agent run against a daemon sends the document
// without its providers (and says so), prints the events on stderr and
// the answer on stdout, every string a model chose escaped; exit 0.
func TestAgentRunPrints(t *testing.T) {
	run := api.AgentRun{ID: "ag-00000000000a", Agent: "coder", State: api.AgentSucceeded, Created: agT0, Turns: 3,
		Usage: api.AgentUsage{InputTokens: 300, OutputTokens: 70}, Answer: "It prints hello.\n\x1b[31mgotcha\u202e"}
	f := newAgFake(t, run, hostileEvents()...)
	file := writeAgentsFile(t, agentsDoc)
	out, errOut, code := agRunCLI(t, "", "run", "--config", file, "--agent", "coder", "--label", "team=infra", "make hello.py and run it")
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if f.created.Agent != "coder" || f.created.Task != "make hello.py and run it" || f.created.Labels["team"] != "infra" {
		t.Errorf("request %+v", f.created)
	}
	if strings.Contains(f.created.Document, "providers") || !strings.Contains(f.created.Document, "coder") {
		t.Errorf("the daemon was sent:\n%s", f.created.Document)
	}
	for _, want := range []string{
		"moat: agent run ag-00000000000a (agent coder)\n",
		"providers section is not sent",
		"[coder] task:\n  make hello.py and run it\n",
		"[coder] model: local/small, 120→30 tokens\n  I will write it.\n  \\x1b[2J\\x1b]52;c;Zm9v\\ared\\rforged\\u202eevil\n",
		`[coder] tool shell_exec {"command":"python3 hello.py > out && printf '\\u001b[31m \\\\u003e'"}` + "\n",
		"[coder] → allow, exit 0, 12 lines\n",
		"[coder] tool fetch_url {\"url\":\"http://169.254.169.254/\"} deny (rule no-metadata)\n",
		"[coder] → refused (rule no-metadata): policy_denied: \\x1b[2J",
		"[coder] handoff to reviewer:\n  review hello.py\n",
		"[reviewer] model: local/small\n  LGTM\n",
		"[coder] ← reviewer answered (1 line)\n",
		"[coder] model error: remote/big: status 429: \\x1b[2J",
		"[coder] run succeeded\n",
		"moat: agent run ag-00000000000a succeeded: 3 turns, 300→70 tokens\n",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if want := "It prints hello.\n\\x1b[31mgotcha\\u202e\n"; out != want {
		t.Errorf("stdout %q, want the answer %q", out, want)
	}
	for _, s := range []string{out, errOut} {
		if strings.ContainsAny(s, "\x1b\r\a\u202e") {
			t.Errorf("raw control character in the output: %q", s)
		}
	}
}

// TestAgentRunExitCodes: a run that failed or was cancelled exits 1 with
// why on stderr; a document the daemon refuses exits 125 with its line;
// an unreachable daemon exits 125.
func TestAgentRunExitCodes(t *testing.T) {
	file := writeAgentsFile(t, agentsDoc)
	run := []string{"run", "--config", file, "--agent", "coder", "task"}
	for _, state := range []string{api.AgentFailed, api.AgentCancelled} {
		typ := api.AgentEvRunFailed
		if state == api.AgentCancelled {
			typ = api.AgentEvRunCancelled
		}
		newAgFake(t, api.AgentRun{ID: "ag-00000000000b", Agent: "coder", State: state, Error: "max_turns reached"},
			api.AgentEvent{Seq: 1, Type: typ, Agent: "coder", Text: "max_turns reached"})
		out, errOut, code := agRunCLI(t, "", run...)
		if code != 1 || out != "" || !strings.Contains(errOut, "moat: agent run ag-00000000000b "+state+": max_turns reached") {
			t.Errorf("%s: exit %d\nstdout: %q\nstderr: %s", state, code, out, errOut)
		}
	}
	f := newAgFake(t, api.AgentRun{ID: "ag-00000000000b"})
	f.refuse = &api.Error{Code: api.CodeInvalidArgument, Message: `line 7: agent "coder": unknown tool "rm_rf"`}
	if _, errOut, code := agRunCLI(t, "", run...); code != 125 || !strings.Contains(errOut, file+`: line 7: agent "coder": unknown tool`) {
		t.Errorf("refused document: exit %d, stderr %q", code, errOut)
	}
	f.refuse = &api.Error{Code: api.CodeUnimplemented, Message: "no model providers configured (models_file)"}
	if _, errOut, code := agRunCLI(t, "", run...); code != 125 || !strings.Contains(errOut, "no model providers configured") {
		t.Errorf("a daemon without providers: exit %d, stderr %q", code, errOut)
	}
	t.Setenv("MOAT_URL", "http://127.0.0.1:1")
	if _, errOut, code := agRunCLI(t, "", run...); code != 125 || !strings.Contains(errOut, "moat serve") {
		t.Errorf("no daemon: exit %d, stderr %q", code, errOut)
	}
}

// TestAgentRunJSON: --json prints the events as NDJSON on stdout, then
// the run on one line; nothing else goes to stdout.
func TestAgentRunJSON(t *testing.T) {
	run := api.AgentRun{ID: "ag-00000000000c", Agent: "coder", State: api.AgentSucceeded, Answer: "42\x1b[0m"}
	newAgFake(t, run, hostileEvents()...)
	file := writeAgentsFile(t, agentsDoc)
	out, errOut, code := agRunCLI(t, "", "run", "--json", "--config", file, "--agent", "coder", "task")
	if code != 0 {
		t.Fatalf("exit %d\nstderr: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(hostileEvents())+1 {
		t.Fatalf("%d lines, want %d events and the run:\n%s", len(lines), len(hostileEvents())+1, out)
	}
	for i, l := range lines[:len(lines)-1] {
		var ev api.AgentEvent
		if err := json.Unmarshal([]byte(l), &ev); err != nil || ev.Seq != uint64(i+1) {
			t.Errorf("line %d: %v, seq %d: %s", i+1, err, ev.Seq, l)
		}
	}
	var got api.AgentRun
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil || got.ID != run.ID || got.Answer != run.Answer {
		t.Errorf("last line: %v, %+v", err, got)
	}
	if strings.Contains(out, "\x1b") || strings.Contains(out, "\u202e") {
		t.Errorf("raw control character in the JSON: %q", out)
	}
	if strings.Contains(errOut, "[coder]") {
		t.Errorf("--json printed event lines on stderr:\n%s", errOut)
	}
}

// TestAgentRunEndBeforeRecord: the run's end announced by an event
// counts even when the record read after it still says running.
func TestAgentRunEndBeforeRecord(t *testing.T) {
	newAgFake(t, api.AgentRun{ID: "ag-00000000000d", Agent: "coder", State: api.AgentRunning},
		api.AgentEvent{Seq: 1, Type: api.AgentEvRunFailed, Agent: "coder", Text: "model error"})
	file := writeAgentsFile(t, agentsDoc)
	if _, errOut, code := agRunCLI(t, "", "run", "--config", file, "--agent", "coder", "task"); code != 1 {
		t.Errorf("exit %d, stderr %s", code, errOut)
	}
}

// TestAgentListLogsCancelResume: ls, logs (and --follow, --json), cancel
// and resume against a daemon.
func TestAgentListLogsCancelResume(t *testing.T) {
	ended := agT0.Add(42 * time.Second)
	run := api.AgentRun{ID: "ag-00000000000e", Agent: "coder\x1b[1m", State: api.AgentSucceeded, Created: agT0, Ended: &ended, Turns: 4,
		Usage: api.AgentUsage{InputTokens: 1000, OutputTokens: 200}}
	f := newAgFake(t, run, hostileEvents()...)

	out, _, code := agRunCLI(t, "", "ls", "--state", "succeeded")
	if code != 0 || !strings.Contains(out, "ID") || !strings.Contains(out, "ag-00000000000e  coder\\x1b[1m  succeeded  4      1000→200  ") {
		t.Errorf("ls (%d):\n%s", code, out)
	}
	out, _, code = agRunCLI(t, "", "ls", "--json")
	var list []api.AgentRun
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 {
		t.Errorf("ls --json (%d):\n%s", code, out)
	}

	out, _, code = agRunCLI(t, "", "logs", run.ID)
	stamp := agT0.Add(5 * time.Second).Local().Format(time.TimeOnly)
	if code != 0 || !strings.Contains(out, stamp+" [coder] tool shell_exec") || strings.Contains(out, "\x1b") {
		t.Errorf("logs (%d):\n%s", code, out)
	}
	out, _, code = agRunCLI(t, "", "logs", "--follow", "--json", run.ID)
	if n := strings.Count(out, "\n"); code != 0 || n != len(hostileEvents())+1 {
		t.Errorf("logs --follow --json (%d): %d lines:\n%s", code, n, out)
	}

	out, _, code = agRunCLI(t, "", "cancel", run.ID)
	if code != 0 || out != "ag-00000000000e cancelled\n" {
		t.Errorf("cancel (%d): %q", code, out)
	}
	f.run.State = api.AgentSucceeded
	_, errOut, code := agRunCLI(t, "", "resume", run.ID, "and now in Go")
	if code != 0 || f.resumed == nil || f.resumed.Task != "and now in Go" || !strings.Contains(errOut, "resumed") {
		t.Errorf("resume (%d): %+v\n%s", code, f.resumed, errOut)
	}
	// The resumed run is followed from the resume on: the events before
	// it are not shown again.
	if strings.Contains(errOut, "tool shell_exec") {
		t.Errorf("resume showed the events before it:\n%s", errOut)
	}
	// A run still going is followed, not resumed.
	f.resumed = nil
	f.run.State = api.AgentRunning
	f.stream = func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("follow") != "true" {
			replyEvents(w, api.Event{Type: "agent", Agent: &api.AgentEvent{Seq: 13, Type: api.AgentEvRunInterrupted, Agent: "coder"}})
			return
		}
		replyEvents(w, api.Event{Type: "agent", Agent: &api.AgentEvent{Seq: 14, Type: api.AgentEvRunSucceeded, Agent: "coder"}})
	}
	_, errOut, code = agRunCLI(t, "", "resume", run.ID)
	if code != 0 || f.resumed != nil || !strings.Contains(errOut, "following it") || !strings.Contains(errOut, "[coder] run succeeded") {
		t.Errorf("resume of a running run (%d): %+v\n%s", code, f.resumed, errOut)
	}
	if _, errOut, code := agRunCLI(t, "", "logs", "ag-nope"); code != 125 || !strings.Contains(errOut, "no run") {
		t.Errorf("logs of no run: %d %q", code, errOut)
	}
}

// TestAgentInterrupt: ^C while a run is followed stops following a
// daemon's run (which goes on, and the message says how to cancel it),
// and cancels a private daemon's run, then waits for its end; either way
// the exit is 130.
func TestAgentInterrupt(t *testing.T) {
	for _, local := range []bool{false, true} {
		run := api.AgentRun{ID: "ag-00000000000f", Agent: "coder", State: api.AgentRunning, Created: agT0}
		f := newAgFake(t, run)
		cancelled := make(chan struct{})
		f.onCancel = func() { close(cancelled) }
		f.stream = func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			// followAgent watches for signals before it asks for events.
			if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
				t.Error(err)
			}
			select {
			case <-r.Context().Done():
			case <-cancelled:
				replyEvents(w, api.Event{Type: "agent", Agent: &api.AgentEvent{Seq: 1, Time: agT0, Type: api.AgentEvRunCancelled, Agent: "coder"}})
			}
		}
		c, err := client.New(client.WithHTTP(os.Getenv("MOAT_URL"), "tok"))
		if err != nil {
			t.Fatal(err)
		}
		var out, errOut strings.Builder
		final, err := followAgent(context.Background(), c, target{local: local}, run.ID, 0, false, sandboxIO{nil, &out, &errOut})
		c.Close()
		var ee *exitError
		if final != nil || !errors.As(err, &ee) || ee.code != exitInterrupted {
			t.Fatalf("local %v: %v, %v", local, final, err)
		}
		select {
		case <-cancelled:
			if !local {
				t.Error("a daemon's run was cancelled by ^C")
			}
			if !strings.Contains(errOut.String(), "moat: cancelling agent run ag-00000000000f") || !strings.Contains(errOut.String(), "cancelled") {
				t.Errorf("local: stdout %q, stderr %q", out.String(), errOut.String())
			}
		default:
			if local {
				t.Error("a private daemon's run was not cancelled by ^C")
			}
			if !strings.Contains(errOut.String(), "'moat agent cancel ag-00000000000f' ends it") {
				t.Errorf("daemon: stderr %q", errOut.String())
			}
		}
	}
}

// TestStripProviders: the document a daemon gets keeps everything but
// the providers section, from YAML and from JSON.
func TestStripProviders(t *testing.T) {
	for _, doc := range []string{agentsDoc, `{"providers": [{"name": "p"}], "agents": [{"name": "coder", "model": "small"}], "max_turns": 5}`} {
		got, err := stripProviders([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		d, err := agent.Compile([]byte(got))
		if err != nil || strings.Contains(got, "providers") || len(d.Providers.Providers) != 0 || d.Agent("coder") == nil || d.MaxTurns != 5 {
			t.Errorf("%s\n→ (%v)\n%s", doc, err, got)
		}
	}
	if _, err := stripProviders([]byte("- a\n- b\n")); err == nil {
		t.Error("a list was taken for a document")
	}
}

// TestAgentBlockCap: a model's text longer than maxTextLines shows its
// first lines and how many more there are; a long line is cut.
func TestAgentBlockCap(t *testing.T) {
	var b strings.Builder
	p := &agentPrinter{w: &b}
	p.event(api.AgentEvent{Type: api.AgentEvModelResponse, Agent: "coder", Text: strings.Repeat("x\n", 100) + strings.Repeat("y", 5000)})
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	n := 0
	for sc.Scan() {
		n++
	}
	if n != maxTextLines+2 || !strings.Contains(b.String(), "… (61 more lines)") {
		t.Errorf("%d lines:\n%s", n, b.String())
	}
}
