package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/bench/internal/cli"
)

func TestFlagsRefused(t *testing.T) {
	for _, args := range [][]string{
		{"--calls", "1"},
		{"--runs", "-1"},
		{"--concurrent-calls", "1"},
		{"--max-concurrency", "0"},
		{"--call-timeout", "0s"},
		{"--rounds", "0", "--runs", "0"},
	} {
		if _, err := parseFlags(append([]string{"--moat", "/bin/true"}, args...), io.Discard); !errors.Is(err, cli.ErrUsage) {
			t.Errorf("%v: %v", args, err)
		}
	}
	o, err := parseFlags([]string{"--moat", "/bin/true", "--runs", "0", "--calls", "3"}, io.Discard)
	if err != nil || o.runs != 0 || o.calls != 3 || o.maxConcurrency != 16 || o.Rounds != 10 {
		t.Errorf("valid flags: %+v, %v", o, err)
	}
}

// post sends one Chat Completions request of a run that has done tool
// results, as JSON or a stream, and returns the answer's body.
func post(t *testing.T, f *fakeModel, marker string, done int, stream bool) string {
	t.Helper()
	msgs := []map[string]any{{"role": "system", "content": "be brief"}, {"role": "user", "content": []map[string]string{{"type": "text", "text": marker + ": go"}}}}
	for i := range done {
		msgs = append(msgs, map[string]any{"role": "assistant", "content": nil}, map[string]any{"role": "tool", "content": "exit 0", "tool_call_id": i})
	}
	body, _ := json.Marshal(map[string]any{"model": "m", "stream": stream, "messages": msgs})
	resp, err := http.Post(f.baseURL()+"/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	return string(out)
}

// The fake provider asks for the run's tool calls, then answers; it
// times the gaps between its answers and the next requests of a run, and
// refuses a request of no run.
func TestFakeModel(t *testing.T) {
	f, err := newFakeModel("true")
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	f.expect("bench-run-1", 2)
	var first struct {
		Choices []struct {
			Message struct {
				ToolCalls []struct {
					ID       string `json:"id"`
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			}
			FinishReason string `json:"finish_reason"`
		}
	}
	if err := json.Unmarshal([]byte(post(t, f, "bench-run-1", 0, false)), &first); err != nil {
		t.Fatal(err)
	}
	if c := first.Choices[0]; c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1 ||
		c.Message.ToolCalls[0].Function.Name != "shell_exec" || c.Message.ToolCalls[0].Function.Arguments != `{"command":"true"}` {
		t.Errorf("first answer %+v", first)
	}
	// The second, streamed: SSE chunks with the tool call, then [DONE].
	sse := post(t, f, "bench-run-1", 1, true)
	var events []string
	sc := bufio.NewScanner(strings.NewReader(sse))
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events = append(events, d)
		}
	}
	if len(events) != 4 || events[3] != "[DONE]" || !strings.Contains(events[0], `"call_2"`) || !strings.Contains(events[1], `"tool_calls"`) {
		t.Errorf("stream %q", sse)
	}
	if last := post(t, f, "bench-run-1", 2, false); !strings.Contains(last, `"content":"done"`) {
		t.Errorf("last answer %s", last)
	}
	gaps, model, peak, bad := f.take()
	if len(gaps) != 2 || gaps[0].call != 1 || gaps[1].call != 2 || gaps[0].ms <= 0 || len(model) != 3 || peak != 1 || len(bad) != 0 {
		t.Errorf("gaps %+v, model %v, peak %d, bad %v", gaps, model, peak, bad)
	}
	body, _ := json.Marshal(map[string]any{"model": "m", "messages": []map[string]any{{"role": "user", "content": "hello"}}})
	resp, err := http.Post(f.baseURL()+"/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, _, _, bad := f.take(); resp.StatusCode != 400 || len(bad) != 1 {
		t.Errorf("a request of no run: %d, %v", resp.StatusCode, bad)
	}
}
