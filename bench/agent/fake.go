package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"
)

// fakeModel is an OpenAI-compatible Chat Completions provider in the
// benchmark's process that answers at once: a run's conversation (named
// by the marker "bench-run-N" in its first user message) gets a tool
// call of shell_exec per request until it holds calls tool results, then
// the final answer "done". It answers as JSON or, when the request asks
// for a stream, as the API's server-sent events. Per run it notes when
// each answer left (written and flushed) and, when the next request of
// that run arrives, the time between: the tool call's time outside the
// model (the answer parsed, the call judged, run in the sandbox and
// journalled, the next request made and sent).
type fakeModel struct {
	srv  *http.Server
	ln   net.Listener
	tool string // the shell_exec command asked for

	mu       sync.Mutex
	calls    map[string]int       // a run's tool calls, by its marker
	sent     map[string]time.Time // when a run's last answer left
	gaps     []gap                // every gap, in arrival order
	model    []float64            // each request's time in the fake, ms
	inFlight int
	peak     int
	bad      []string // requests that could not be answered
}

// gap is one tool call's time outside the model.
type gap struct {
	run  string
	call int // the tool call it answers, from 1
	ms   float64
}

// marker finds a run's marker in its task.
var marker = regexp.MustCompile(`bench-run-[0-9]+`)

func newFakeModel(tool string) (*fakeModel, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &fakeModel{ln: ln, tool: tool, calls: map[string]int{}, sent: map[string]time.Time{}}
	f.srv = &http.Server{Handler: http.HandlerFunc(f.serve), ReadHeaderTimeout: 10 * time.Second}
	go f.srv.Serve(ln)
	return f, nil
}

// baseURL is the provider's base_url.
func (f *fakeModel) baseURL() string { return "http://" + f.ln.Addr().String() + "/v1" }

// close stops the server.
func (f *fakeModel) close() { f.srv.Close() }

// expect sets how many tool calls the run of marker m makes.
func (f *fakeModel) expect(m string, calls int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[m] = calls
}

// take returns the gaps and model times noted since the last take, the
// peak in flight since then, and the requests it could not answer.
func (f *fakeModel) take() ([]gap, []float64, int, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, m, p, b := f.gaps, f.model, f.peak, f.bad
	f.gaps, f.model, f.peak, f.bad = nil, nil, 0, nil
	return g, m, p, b
}

// chatRequest is the part of a Chat Completions request the fake reads.
type chatRequest struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

// text is a message content's text: a string or a list of text parts.
func text(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	json.Unmarshal(raw, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

func (f *fakeModel) serve(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	f.mu.Lock()
	f.inFlight++
	f.peak = max(f.peak, f.inFlight)
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inFlight--
		f.mu.Unlock()
	}()
	var req chatRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		f.refuse(w, fmt.Sprintf("%s %s: %v", r.Method, r.URL.Path, err))
		return
	}
	run, done := "", 0
	for _, m := range req.Messages {
		switch m.Role {
		case "user":
			if run == "" {
				run = marker.FindString(text(m.Content))
			}
		case "tool":
			done++
		}
	}
	f.mu.Lock()
	want, known := f.calls[run]
	if last, ok := f.sent[run]; ok && done > 0 {
		f.gaps = append(f.gaps, gap{run: run, call: done, ms: msSince(last, arrived)})
	}
	f.mu.Unlock()
	if !known {
		f.refuse(w, fmt.Sprintf("a request of no run of the benchmark (marker %q)", run))
		return
	}
	var ans answer
	if done < want {
		ans.call = &toolCall{ID: fmt.Sprintf("call_%d", done+1), Name: "shell_exec", Arguments: fmt.Sprintf(`{"command":%q}`, f.tool)}
	} else {
		ans.text = "done"
	}
	if req.Stream {
		f.stream(w, req.Model, ans)
	} else {
		f.json(w, req.Model, ans)
	}
	left := time.Now()
	f.mu.Lock()
	f.sent[run] = left
	f.model = append(f.model, msSince(arrived, left))
	f.mu.Unlock()
}

// msSince is b - a in ms.
func msSince(a, b time.Time) float64 { return float64(b.Sub(a)) / float64(time.Millisecond) }

// refuse answers 400 and notes why.
func (f *fakeModel) refuse(w http.ResponseWriter, why string) {
	f.mu.Lock()
	f.bad = append(f.bad, why)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": why, "type": "invalid_request_error"}})
}

// answer is a tool call or a final text.
type answer struct {
	call *toolCall
	text string
}

type toolCall struct {
	ID, Name, Arguments string
}

// usage is every answer's usage.
var usage = map[string]int{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}

// json writes ans as one chat.completion.
func (f *fakeModel) json(w http.ResponseWriter, modelName string, ans answer) {
	msg := map[string]any{"role": "assistant", "content": nil}
	finish := "stop"
	if ans.call != nil {
		msg["tool_calls"] = []any{map[string]any{"id": ans.call.ID, "type": "function",
			"function": map[string]any{"name": ans.call.Name, "arguments": ans.call.Arguments}}}
		finish = "tool_calls"
	} else {
		msg["content"] = ans.text
	}
	out, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-bench", "object": "chat.completion", "created": time.Now().Unix(), "model": modelName,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish, "logprobs": nil}},
		"usage":   usage,
	})
	w.Header().Set("Content-Type", "application/json")
	w.Write(out)
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
}

// stream writes ans as chat.completion.chunk events and [DONE].
func (f *fakeModel) stream(w http.ResponseWriter, modelName string, ans answer) {
	w.Header().Set("Content-Type", "text/event-stream")
	chunk := func(choices []any, extra map[string]any) {
		m := map[string]any{"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": modelName, "choices": choices}
		for k, v := range extra {
			m[k] = v
		}
		b, _ := json.Marshal(m)
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	delta := map[string]any{"role": "assistant"}
	finish := "stop"
	if ans.call != nil {
		delta["tool_calls"] = []any{map[string]any{"index": 0, "id": ans.call.ID, "type": "function",
			"function": map[string]any{"name": ans.call.Name, "arguments": ans.call.Arguments}}}
		finish = "tool_calls"
	} else {
		delta["content"] = ans.text
	}
	chunk([]any{map[string]any{"index": 0, "delta": delta, "finish_reason": nil}}, nil)
	chunk([]any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": finish}}, nil)
	chunk([]any{}, map[string]any{"usage": usage})
	fmt.Fprint(w, "data: [DONE]\n\n")
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
}
