// Package modeltest holds fake model providers for tests: httptest servers
// speaking the OpenAI Chat Completions and the Anthropic Messages wire
// formats (JSON answers, and SSE streams as each API sends them), replaying
// a script of Turns.
//
// A test makes one with NewOpenAI or NewAnthropic, points a provider's
// base_url at Server.URL, and checks what the server received:
//
//	srv := modeltest.NewOpenAI(t,
//		modeltest.Turn{ToolCalls: []model.ToolCall{{Name: "shell_exec", Arguments: json.RawMessage(`{"command":"ls"}`)}}},
//		modeltest.Turn{Text: "done"},
//	)
//	cfg := model.Config{Providers: []model.Provider{{Name: "fake", Kind: model.KindOpenAI, BaseURL: srv.URL, Model: "m"}}}
//	…
//	if srv.Requests() != 2 { … }
//	got := srv.Received()[1].Messages // the tool result sent back
//
// Each request takes the next Turn of the script; once the script is
// spent, the Responder given to Respond answers (or, with none, the
// request fails with 400 and the test with an error). A Turn can fail its
// request (Status 429, 500…), delay or hold its answer, and check the
// request. The server counts requests and those in flight at once, and
// closes when the test ends.
package modeltest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/agent/model"
)

// Turn is one scripted answer.
type Turn struct {
	// Text is the answer's text.
	Text string
	// ToolCalls are the tool calls of the answer. An empty ID is made up
	// (call_N, toolu_N); empty Arguments are {}.
	ToolCalls []model.ToolCall
	// Status, when neither 0 nor 200, fails the request with it (an error
	// body in the API's format) instead of answering.
	Status int
	// RetryAfter, with a failing Status, is sent as Retry-After (whole
	// seconds) or, under a second, as retry-after-ms.
	RetryAfter time.Duration
	// Delay waits before answering (or failing).
	Delay time.Duration
	// Hold, when not nil, holds the answer until it is closed (or the
	// request is canceled, or the server closes).
	Hold <-chan struct{}
	// Check, when not nil, judges the request: an error fails the test
	// and answers 400.
	Check func(req Received) error
	// Usage is the answer's usage (zero: DefaultInputTokens and
	// DefaultOutputTokens).
	Usage model.Usage
	// StopReason overrides the wire stop reason (finish_reason for
	// OpenAI, stop_reason for Anthropic); empty: from the answer.
	StopReason string
}

// Default usage of an answer whose Turn gives none.
const (
	DefaultInputTokens  = 10
	DefaultOutputTokens = 5
)

// Responder answers the requests that come after the script.
type Responder func(req Received) Turn

// Always answers every request with t.
func Always(t Turn) Responder { return func(Received) Turn { return t } }

// Received is a request as the server saw it, decoded back to the model
// package's types.
type Received struct {
	// N is the request's number, from 1.
	N    int
	Path string
	// Model is the model the request named.
	Model string
	// System is the system prompt (Anthropic's system, or the text of
	// OpenAI's leading system messages).
	System string
	// Messages are the conversation, system messages left out; an
	// Anthropic tool_result block is a RoleTool message (with IsError).
	Messages []model.Message
	// Tools are the tools offered.
	Tools []model.Tool
	// MaxTokens is max_tokens (or max_completion_tokens), 0 if none.
	MaxTokens int
	// Stream says whether the answer was asked as a stream;
	// IncludeUsage whether OpenAI's stream_options.include_usage was set.
	Stream       bool
	IncludeUsage bool
	// Authorization and APIKey are the Authorization and x-api-key
	// headers as they came.
	Authorization string
	APIKey        string
	// Body is the raw request body.
	Body []byte
}

// Server is a fake provider. Its methods are safe for concurrent use.
type Server struct {
	// URL is the base_url to configure: for the OpenAI kind it ends in
	// /v1, for Anthropic it is the server's root.
	URL string

	t      testing.TB
	name   string
	srv    *httptest.Server
	closed chan struct{}
	decode func(r *http.Request, body []byte) (Received, error)
	answer func(w http.ResponseWriter, n int, req Received, turn Turn)
	fail   func(w http.ResponseWriter, status int, msg string)

	mu       sync.Mutex
	script   []Turn
	next     int
	respond  Responder
	received []Received
	inFlight int
	maxIn    int
	changed  chan struct{} // closed and replaced when inFlight changes
}

func newServer(t testing.TB, name, suffix string, script []Turn) *Server {
	t.Helper()
	s := &Server{t: t, name: name, script: script, closed: make(chan struct{}), changed: make(chan struct{})}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL + suffix
	t.Cleanup(s.Close)
	return s
}

// Respond sets the Responder of the requests after the script.
func (s *Server) Respond(f Responder) {
	s.mu.Lock()
	s.respond = f
	s.mu.Unlock()
}

// Requests counts the requests received (answered, failed or in flight).
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.received)
}

// Received returns the requests received, in order.
func (s *Server) Received() []Received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Received(nil), s.received...)
}

// InFlight counts the requests being answered now.
func (s *Server) InFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight
}

// MaxInFlight is the most requests that were in flight at once.
func (s *Server) MaxInFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxIn
}

// WaitInFlight waits until at least n requests are in flight at once (or
// ctx ends: its error).
func (s *Server) WaitInFlight(ctx context.Context, n int) error {
	for {
		s.mu.Lock()
		in, ch := s.inFlight, s.changed
		s.mu.Unlock()
		if in >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("modeltest: %s: %d in flight, waiting for %d: %w", s.name, in, n, ctx.Err())
		}
	}
}

// Close stops the server, releasing held answers. The test's cleanup
// calls it.
func (s *Server) Close() {
	s.mu.Lock()
	select {
	case <-s.closed:
		s.mu.Unlock()
		return
	default:
	}
	close(s.closed)
	s.mu.Unlock()
	s.srv.Close()
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r)
	if err != nil {
		s.fail(w, http.StatusBadRequest, err.Error())
		return
	}
	req, err := s.decode(r, body)
	if err != nil {
		s.t.Errorf("modeltest: %s: %s %s: %v", s.name, r.Method, r.URL.Path, err)
		s.fail(w, http.StatusBadRequest, err.Error())
		return
	}
	turn, n, ok := s.arrive(&req)
	defer s.leave()
	if !ok {
		s.t.Errorf("modeltest: %s: request %d but the script has %d turns and no Responder", s.name, n, len(s.script))
		s.fail(w, http.StatusBadRequest, "modeltest: script exhausted")
		return
	}
	if turn.Check != nil {
		if err := turn.Check(req); err != nil {
			s.t.Errorf("modeltest: %s: request %d: %v", s.name, n, err)
			s.fail(w, http.StatusBadRequest, "modeltest: check failed: "+err.Error())
			return
		}
	}
	if !s.wait(r.Context(), turn) {
		return
	}
	if turn.Status != 0 && turn.Status != http.StatusOK {
		if d := turn.RetryAfter; d > 0 {
			if d < time.Second {
				w.Header().Set("Retry-After-Ms", strconv.FormatInt(d.Milliseconds(), 10))
			} else {
				w.Header().Set("Retry-After", strconv.FormatInt(int64(d/time.Second), 10))
			}
		}
		s.fail(w, turn.Status, fmt.Sprintf("modeltest: scripted failure %d", turn.Status))
		return
	}
	for i := range turn.ToolCalls {
		if len(turn.ToolCalls[i].Arguments) == 0 {
			turn.ToolCalls[i].Arguments = json.RawMessage("{}")
		}
	}
	if turn.Usage == (model.Usage{}) {
		turn.Usage = model.Usage{InputTokens: DefaultInputTokens, OutputTokens: DefaultOutputTokens}
	}
	s.answer(w, n, req, turn)
}

// arrive records req and picks its turn.
func (s *Server) arrive(req *Received) (Turn, int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	req.N = len(s.received) + 1
	s.received = append(s.received, *req)
	s.inFlight++
	s.maxIn = max(s.maxIn, s.inFlight)
	close(s.changed)
	s.changed = make(chan struct{})
	var turn Turn
	switch {
	case s.next < len(s.script):
		turn = s.script[s.next]
		s.next++
	case s.respond != nil:
		f := s.respond
		s.mu.Unlock()
		turn = f(*req)
		s.mu.Lock()
	default:
		return Turn{}, req.N, false
	}
	turn.ToolCalls = append([]model.ToolCall(nil), turn.ToolCalls...)
	return turn, req.N, true
}

func (s *Server) leave() {
	s.mu.Lock()
	s.inFlight--
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// wait does a turn's Delay and Hold; false if the request or the server
// ended first.
func (s *Server) wait(ctx context.Context, turn Turn) bool {
	if turn.Delay > 0 {
		t := time.NewTimer(turn.Delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return false
		case <-s.closed:
			return false
		}
	}
	if turn.Hold != nil {
		select {
		case <-turn.Hold:
		case <-ctx.Done():
			return false
		case <-s.closed:
			return false
		}
	}
	return true
}

// maxBody bounds a request body.
const maxBody = 32 << 20

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.Method != http.MethodPost {
		return nil, fmt.Errorf("method %s, want POST", r.Method)
	}
	return io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
}

// sse writes one server-sent event (event may be empty) and flushes.
func sse(w http.ResponseWriter, event string, data any) {
	b, err := json.Marshal(data)
	if err != nil {
		panic(err)
	}
	if event != "" {
		fmt.Fprintf(w, "event: %s\n", event)
	}
	fmt.Fprintf(w, "data: %s\n\n", b)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

func startSSE(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// pieces cuts s into pieces of at most n bytes (on rune boundaries), as
// a stream sends them.
func pieces(s string, n int) []string {
	var out []string
	for len(s) > 0 {
		cut := min(n, len(s))
		for cut < len(s) && s[cut]&0xC0 == 0x80 {
			cut++
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	return out
}
