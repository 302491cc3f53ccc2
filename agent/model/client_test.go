package model_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/agent/model"
	"github.com/moat-sandbox/moat/agent/model/modeltest"
)

// fast retries: tests never wait long on a backoff.
var fast = model.WithRetry(3, time.Millisecond, 5*time.Millisecond)

func newClient(t *testing.T, provs []model.Provider, opts ...model.Option) *model.Client {
	t.Helper()
	c, err := model.New(model.Config{Providers: provs}, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func prov(name, kind string, srv *modeltest.Server, mdl string) model.Provider {
	return model.Provider{Name: name, Kind: kind, BaseURL: srv.URL, Model: mdl}
}

func newFake(t *testing.T, kind string, script ...modeltest.Turn) *modeltest.Server {
	if kind == model.KindAnthropic {
		return modeltest.NewAnthropic(t, script...)
	}
	return modeltest.NewOpenAI(t, script...)
}

func writeKey(t *testing.T, key string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(p, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

var shellTool = model.Tool{
	Name:        "shell_exec",
	Description: "run a command",
	Parameters:  json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"],"additionalProperties":false}`),
}

// TestKinds runs a tool-call round trip through each kind's real SDK,
// streamed and not: the tool call comes back, the tool result goes out in
// the API's shape, usage and text are read.
func TestKinds(t *testing.T) {
	for _, kind := range []string{model.KindOpenAI, model.KindAnthropic} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", kind, stream), func(t *testing.T) {
				srv := newFake(t, kind,
					modeltest.Turn{Text: "let me look", ToolCalls: []model.ToolCall{{ID: "c1", Name: "shell_exec", Arguments: json.RawMessage(`{"command":"ls -l /tmp"}`)}},
						Usage: model.Usage{InputTokens: 100, OutputTokens: 20}},
					modeltest.Turn{Text: "there are ünïcode files in /tmp, and that is all", Usage: model.Usage{InputTokens: 150, OutputTokens: 30}},
				)
				p := prov("p", kind, srv, "m1")
				p.APIKeyFile = writeKey(t, "sk-test-key")
				c := newClient(t, []model.Provider{p}, fast)

				var streamed strings.Builder
				req := model.Request{
					Alias: "m1", System: "you are a test",
					Messages: []model.Message{{Role: model.RoleUser, Text: "list /tmp"}},
					Tools:    []model.Tool{shellTool},
				}
				if stream {
					req.OnText = func(s string) { streamed.WriteString(s) }
				}
				resp, err := c.Complete(t.Context(), req)
				if err != nil {
					t.Fatalf("Complete: %v", err)
				}
				if resp.StopReason != "tool_calls" || resp.Provider != "p" || resp.Model != "m1" {
					t.Errorf("response = %+v", resp)
				}
				want := []model.ToolCall{{ID: "c1", Name: "shell_exec", Arguments: json.RawMessage(`{"command":"ls -l /tmp"}`)}}
				if !reflect.DeepEqual(resp.Message.ToolCalls, want) || resp.Message.Text != "let me look" {
					t.Errorf("message = %+v", resp.Message)
				}
				if resp.Usage != (model.Usage{InputTokens: 100, OutputTokens: 20}) {
					t.Errorf("usage = %+v", resp.Usage)
				}
				if stream && streamed.String() != "let me look" {
					t.Errorf("streamed %q", streamed.String())
				}

				req.Messages = append(req.Messages, resp.Message,
					model.Message{Role: model.RoleTool, ToolCallID: "c1", Text: "exit 1: permission denied", IsError: true})
				streamed.Reset()
				resp, err = c.Complete(t.Context(), req)
				if err != nil {
					t.Fatalf("Complete 2: %v", err)
				}
				const final = "there are ünïcode files in /tmp, and that is all"
				if resp.Message.Text != final || resp.StopReason != "end" || len(resp.Message.ToolCalls) != 0 {
					t.Errorf("second answer = %+v", resp)
				}
				if stream && streamed.String() != final {
					t.Errorf("streamed %q", streamed.String())
				}

				got := srv.Received()
				if len(got) != 2 {
					t.Fatalf("%d requests", len(got))
				}
				r := got[1]
				if r.Model != "m1" || r.System != "you are a test" || r.Stream != stream {
					t.Errorf("received model %q system %q stream %v", r.Model, r.System, r.Stream)
				}
				if len(r.Tools) != 1 || r.Tools[0].Name != "shell_exec" || !strings.Contains(string(r.Tools[0].Parameters), `"additionalProperties":false`) {
					t.Errorf("tools = %+v", r.Tools)
				}
				wantIsError := kind == model.KindAnthropic // OpenAI has no is_error
				wantMsgs := []model.Message{
					{Role: model.RoleUser, Text: "list /tmp"},
					{Role: model.RoleAssistant, Text: "let me look", ToolCalls: want},
					{Role: model.RoleTool, ToolCallID: "c1", Text: "exit 1: permission denied", IsError: wantIsError},
				}
				if !reflect.DeepEqual(r.Messages, wantMsgs) {
					t.Errorf("messages sent:\n got %+v\nwant %+v", r.Messages, wantMsgs)
				}
				switch kind {
				case model.KindOpenAI:
					if r.Authorization != "Bearer sk-test-key" {
						t.Errorf("Authorization %q", r.Authorization)
					}
					if stream && !r.IncludeUsage {
						t.Error("stream without include_usage")
					}
				case model.KindAnthropic:
					if r.APIKey != "sk-test-key" || r.MaxTokens != model.DefaultAnthropicMaxTokens {
						t.Errorf("x-api-key %q max_tokens %d", r.APIKey, r.MaxTokens)
					}
				}
				st := c.Providers()[0]
				if st.Requests != 2 || st.InputTokens != 250 || st.OutputTokens != 50 || st.Errors != 0 || st.InFlight != 0 {
					t.Errorf("stats = %+v", st)
				}
			})
		}
	}
}

// TestNoKey: a provider without a key file sends no credentials (not even
// the environment's).
func TestNoKey(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "env-key")
	t.Setenv("ANTHROPIC_API_KEY", "env-key")
	for _, kind := range []string{model.KindOpenAI, model.KindAnthropic} {
		srv := newFake(t, kind, modeltest.Turn{Text: "hi"})
		c := newClient(t, []model.Provider{prov("p", kind, srv, "m")})
		if _, err := c.Complete(t.Context(), model.Request{Alias: "m", Messages: []model.Message{{Role: model.RoleUser, Text: "x"}}}); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if r := srv.Received()[0]; r.Authorization != "" || r.APIKey != "" {
			t.Errorf("%s: credentials sent: %q %q", kind, r.Authorization, r.APIKey)
		}
	}
}

// TestAliasAndTags: eligibility is alias AND every tag; none is
// ErrNoProvider, observed, nothing sent.
func TestAliasAndTags(t *testing.T) {
	a := modeltest.NewOpenAI(t)
	a.Respond(modeltest.Always(modeltest.Turn{Text: "a"}))
	b := modeltest.NewAnthropic(t)
	b.Respond(modeltest.Always(modeltest.Turn{Text: "b"}))
	pa := prov("a", model.KindOpenAI, a, "big-model")
	pa.Aliases = []string{"smart"}
	pa.Tags = []string{"remote"}
	pb := prov("b", model.KindAnthropic, b, "small-model")
	pb.Aliases = []string{"smart", "fast"}
	pb.Tags = []string{"local", "green-tea"}
	var mu sync.Mutex
	var attempts []model.Attempt
	c := newClient(t, []model.Provider{pa, pb}, fast, model.WithObserver(func(at model.Attempt) {
		mu.Lock()
		attempts = append(attempts, at)
		mu.Unlock()
	}))
	ask := func(alias string, tags ...string) (string, error) {
		resp, err := c.Complete(t.Context(), model.Request{Alias: alias, Tags: tags, Messages: []model.Message{{Role: model.RoleUser, Text: "q"}}})
		if err != nil {
			return "", err
		}
		return resp.Provider, nil
	}
	for _, tc := range []struct {
		alias string
		tags  []string
		want  string
	}{
		{"big-model", nil, "a"},
		{"small-model", nil, "b"},
		{"fast", nil, "b"},
		{"smart", []string{"local"}, "b"},
		{"smart", []string{"green-tea", "local"}, "b"},
		{"smart", []string{"remote"}, "a"},
		{"small-model", []string{"remote"}, ""},
		{"fast", []string{"local", "gpu"}, ""},
		{"unknown", nil, ""},
		{"", nil, ""},
	} {
		got, err := ask(tc.alias, tc.tags...)
		if tc.want == "" {
			if !errors.Is(err, model.ErrNoProvider) || !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.alias)) {
				t.Errorf("%s %v: err = %v, want ErrNoProvider naming the alias", tc.alias, tc.tags, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s %v: served by %q (%v), want %q", tc.alias, tc.tags, got, err, tc.want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var none int
	for _, at := range attempts {
		if at.Class == model.ClassNoProvider {
			none++
			if at.Provider != "" || !errors.Is(at.Err, model.ErrNoProvider) {
				t.Errorf("no-provider attempt = %+v", at)
			}
		}
	}
	if none != 4 {
		t.Errorf("%d no-provider attempts observed, want 4", none)
	}
	if n := a.Requests() + b.Requests(); n != 6 {
		t.Errorf("%d requests sent, want 6", n)
	}
}

// TestWeightedSpread: two providers of weights 1 and 3, 40 requests in
// flight at once: they split 10 and 30.
func TestWeightedSpread(t *testing.T) {
	hold := make(chan struct{})
	turn := modeltest.Turn{Text: "ok", Hold: hold}
	a, b := modeltest.NewOpenAI(t), modeltest.NewOpenAI(t)
	a.Respond(modeltest.Always(turn))
	b.Respond(modeltest.Always(turn))
	pa, pb := prov("a", model.KindOpenAI, a, "m"), prov("b", model.KindOpenAI, b, "m")
	pa.Weight, pb.Weight = 1, 3
	pa.MaxConcurrency, pb.MaxConcurrency = 100, 100
	c := newClient(t, []model.Provider{pa, pb}, fast)
	errs := make(chan error, 40)
	for range 40 {
		go func() {
			_, err := c.Complete(t.Context(), model.Request{Alias: "m", Messages: []model.Message{{Role: model.RoleUser, Text: "q"}}})
			errs <- err
		}()
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := a.WaitInFlight(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitInFlight(ctx, 30); err != nil {
		t.Fatal(err)
	}
	close(hold)
	for range 40 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if a.Requests() != 10 || b.Requests() != 30 {
		t.Errorf("split %d:%d, want 10:30", a.Requests(), b.Requests())
	}

	// One at a time, the split follows the weights too.
	for range 8 {
		if _, err := c.Complete(t.Context(), model.Request{Alias: "m", Messages: []model.Message{{Role: model.RoleUser, Text: "q"}}}); err != nil {
			t.Fatal(err)
		}
	}
	if a.Requests() != 12 || b.Requests() != 36 {
		t.Errorf("sequential split %d:%d, want 12:36", a.Requests(), b.Requests())
	}
}

// TestMaxConcurrency: a provider of max_concurrency 2 never has more than
// 2 requests in flight, whatever the callers.
func TestMaxConcurrency(t *testing.T) {
	hold := make(chan struct{})
	srv := modeltest.NewAnthropic(t)
	srv.Respond(modeltest.Always(modeltest.Turn{Text: "ok", Hold: hold}))
	p := prov("p", model.KindAnthropic, srv, "m")
	p.MaxConcurrency = 2
	c := newClient(t, []model.Provider{p}, fast)
	errs := make(chan error, 10)
	for range 10 {
		go func() {
			_, err := c.Complete(t.Context(), model.Request{Alias: "m", Messages: []model.Message{{Role: model.RoleUser, Text: "q"}}})
			errs <- err
		}()
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := srv.WaitInFlight(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if st := c.Providers()[0]; st.InFlight != 2 {
		t.Errorf("client in flight %d", st.InFlight)
	}
	close(hold)
	for range 10 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if srv.MaxInFlight() != 2 || srv.Requests() != 10 {
		t.Errorf("max in flight %d over %d requests, want 2 over 10", srv.MaxInFlight(), srv.Requests())
	}
}

// TestNoHeadOfLineBlocking: a full provider does not hold up a request
// another eligible provider can take.
func TestNoHeadOfLineBlocking(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	a, b := modeltest.NewOpenAI(t, modeltest.Turn{Text: "slow", Hold: hold}), modeltest.NewOpenAI(t, modeltest.Turn{Text: "b"})
	pa, pb := prov("a", model.KindOpenAI, a, "m"), prov("b", model.KindOpenAI, b, "m")
	pa.MaxConcurrency, pb.MaxConcurrency = 1, 1
	c := newClient(t, []model.Provider{pa, pb}, fast)
	go c.Complete(t.Context(), model.Request{Alias: "m", Messages: []model.Message{{Role: model.RoleUser, Text: "q"}}})
	if err := a.WaitInFlight(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Complete(t.Context(), model.Request{Alias: "m", Messages: []model.Message{{Role: model.RoleUser, Text: "q"}}})
	if err != nil || resp.Provider != "b" {
		t.Fatalf("second request: %v %v", resp, err)
	}
}

// TestFailover: a 500 or a 429 (with Retry-After) at one provider fails
// over to the other; the error class is observed.
func TestFailover(t *testing.T) {
	for _, status := range []int{500, 502, 529, 429} {
		for _, kind := range []string{model.KindOpenAI, model.KindAnthropic} {
			t.Run(fmt.Sprintf("%s/%d", kind, status), func(t *testing.T) {
				a := newFake(t, kind, modeltest.Turn{Status: status, RetryAfter: 2 * time.Millisecond})
				b := newFake(t, kind, modeltest.Turn{Text: "from b"})
				var mu sync.Mutex
				var seen []model.Attempt
				c := newClient(t, []model.Provider{prov("a", kind, a, "m"), prov("b", kind, b, "m")}, fast,
					model.WithObserver(func(at model.Attempt) { mu.Lock(); seen = append(seen, at); mu.Unlock() }))
				resp, err := c.Complete(t.Context(), model.Request{Alias: "m", Messages: []model.Message{{Role: model.RoleUser, Text: "q"}}})
				if err != nil || resp.Provider != "b" || resp.Message.Text != "from b" {
					t.Fatalf("Complete = %+v, %v", resp, err)
				}
				if a.Requests() != 1 || b.Requests() != 1 {
					t.Errorf("requests a=%d b=%d", a.Requests(), b.Requests())
				}
				mu.Lock()
				defer mu.Unlock()
				wantClass := model.ClassServer
				if status == 429 {
					wantClass = model.ClassRateLimited
				}
				if len(seen) != 2 || seen[0].Provider != "a" || seen[0].Status != status || seen[0].Class != wantClass || !seen[0].Retryable ||
					seen[1].Provider != "b" || seen[1].Err != nil || seen[1].N != 2 {
					t.Errorf("attempts = %+v", seen)
				}
				var pe *model.ProviderError
				if !errors.As(seen[0].Err, &pe) || pe.Provider != "a" || pe.Status != status {
					t.Errorf("attempt error = %#v", seen[0].Err)
				}
				if st := c.Providers(); st[0].Errors != 1 || st[1].Errors != 0 {
					t.Errorf("stats = %+v", st)
				}
			})
		}
	}
}

// TestNoRetryOn4xx: a 400 (or 401, 404) fails at once, no failover.
func TestNoRetryOn4xx(t *testing.T) {
	for _, status := range []int{400, 401, 404} {
		a := modeltest.NewAnthropic(t, modeltest.Turn{Status: status})
		b := modeltest.NewAnthropic(t)
		c := newClient(t, []model.Provider{prov("a", model.KindAnthropic, a, "m"), prov("b", model.KindAnthropic, b, "m")}, fast)
		_, err := c.Complete(t.Context(), model.Request{Alias: "m", Messages: []model.Message{{Role: model.RoleUser, Text: "q"}}})
		var pe *model.ProviderError
		if !errors.As(err, &pe) || pe.Status != status || pe.Retryable || pe.Provider != "a" || pe.Class != model.ClassClient {
			t.Errorf("%d: err = %v (%#v)", status, err, pe)
		}
		if a.Requests() != 1 || b.Requests() != 0 {
			t.Errorf("%d: requests a=%d b=%d", status, a.Requests(), b.Requests())
		}
	}
}

// TestRetrySameProvider: alone, a provider failing twice is retried after
// a backoff and answers the third time.
func TestRetrySameProvider(t *testing.T) {
	srv := modeltest.NewOpenAI(t, modeltest.Turn{Status: 503}, modeltest.Turn{Status: 429}, modeltest.Turn{Text: "third time"})
	c := newClient(t, []model.Provider{prov("p", model.KindOpenAI, srv, "m")}, fast)
	resp, err := c.Complete(t.Context(), model.Request{Alias: "m", Messages: []model.Message{{Role: model.RoleUser, Text: "q"}}})
	if err != nil || resp.Message.Text != "third time" || srv.Requests() != 3 {
		t.Fatalf("Complete = %+v, %v after %d requests", resp, err, srv.Requests())
	}
}

// TestTimeout: an attempt that gets no answer in time is a retryable
// timeout, failed over.
func TestTimeout(t *testing.T) {
	never := make(chan struct{})
	defer close(never)
	a := modeltest.NewOpenAI(t, modeltest.Turn{Text: "late", Hold: never})
	b := modeltest.NewOpenAI(t, modeltest.Turn{Text: "b"})
	var mu sync.Mutex
	var classes []model.ErrorClass
	c := newClient(t, []model.Provider{prov("a", model.KindOpenAI, a, "m"), prov("b", model.KindOpenAI, b, "m")}, fast,
		model.WithTimeout(100*time.Millisecond),
		model.WithObserver(func(at model.Attempt) { mu.Lock(); classes = append(classes, at.Class); mu.Unlock() }))
	resp, err := c.Complete(t.Context(), model.Request{Alias: "m", Messages: []model.Message{{Role: model.RoleUser, Text: "q"}}})
	if err != nil || resp.Provider != "b" {
		t.Fatalf("Complete = %+v, %v", resp, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !reflect.DeepEqual(classes, []model.ErrorClass{model.ClassTimeout, model.ClassNone}) {
		t.Errorf("classes = %q", classes)
	}
}

// TestCancel: the caller's context ends a call in flight, and a wait for
// a slot; neither is retried.
func TestCancel(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	srv := modeltest.NewAnthropic(t)
	srv.Respond(modeltest.Always(modeltest.Turn{Text: "x", Hold: hold}))
	p := prov("p", model.KindAnthropic, srv, "m")
	p.MaxConcurrency = 1
	c := newClient(t, []model.Provider{p}, fast)
	req := model.Request{Alias: "m", Messages: []model.Message{{Role: model.RoleUser, Text: "q"}}, OnText: func(string) {}}

	ctx1, cancel1 := context.WithCancel(t.Context())
	done1 := make(chan error, 1)
	go func() { _, err := c.Complete(ctx1, req); done1 <- err }()
	if err := srv.WaitInFlight(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	// The provider is full: this one waits for a slot.
	ctx2, cancel2 := context.WithCancel(t.Context())
	done2 := make(chan error, 1)
	go func() { _, err := c.Complete(ctx2, req); done2 <- err }()
	cancel2()
	if err := <-done2; !errors.Is(err, context.Canceled) {
		t.Errorf("waiting request: %v", err)
	}
	cancel1()
	if err := <-done1; !errors.Is(err, context.Canceled) {
		t.Errorf("request in flight: %v", err)
	}
	if srv.Requests() != 1 {
		t.Errorf("%d requests, want 1 (no retry after a cancel)", srv.Requests())
	}
	if st := c.Providers()[0]; st.InFlight != 0 || st.Errors != 0 {
		t.Errorf("stats = %+v", st)
	}
}

// TestGreenTea: with one local provider tagged green-tea and one remote
// without the tag, no green-tea request ever reaches the remote, even
// while the local one fails; the local failure is returned after its
// retries. Control: an untagged request does reach the remote.
func TestGreenTea(t *testing.T) {
	local := modeltest.NewOpenAI(t)
	var mu sync.Mutex
	n := 0
	local.Respond(func(modeltest.Received) modeltest.Turn {
		mu.Lock()
		defer mu.Unlock()
		n++
		switch n % 3 {
		case 1:
			return modeltest.Turn{Status: 500}
		case 2:
			return modeltest.Turn{Status: 429, RetryAfter: time.Millisecond}
		}
		return modeltest.Turn{Text: "local answer"}
	})
	remote := modeltest.NewAnthropic(t)
	remote.Respond(modeltest.Always(modeltest.Turn{Text: "remote answer"}))
	pl := prov("local", model.KindOpenAI, local, "llama")
	pl.Tags = []string{"local", "green-tea"}
	pl.MaxConcurrency = 8
	pr := prov("remote", model.KindAnthropic, remote, "llama")
	pr.Weight = 100 // the remote would win any balancing
	c := newClient(t, []model.Provider{pl, pr}, model.WithRetry(3, time.Millisecond, 5*time.Millisecond))

	req := model.Request{Alias: "llama", Tags: []string{"green-tea"}, Messages: []model.Message{{Role: model.RoleUser, Text: "secret"}}}
	var wg sync.WaitGroup
	var okN, failN int
	var resMu sync.Mutex
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := req
			if i%2 == 0 {
				r.OnText = func(string) {}
			}
			resp, err := c.Complete(t.Context(), r)
			resMu.Lock()
			defer resMu.Unlock()
			switch {
			case err == nil && resp.Provider == "local":
				okN++
			case err == nil:
				t.Errorf("green-tea request answered by %q", resp.Provider)
			default:
				var pe *model.ProviderError
				if !errors.As(err, &pe) || pe.Provider != "local" {
					t.Errorf("green-tea error not the local's: %v", err)
				}
				failN++
			}
		}()
	}
	wg.Wait()
	if remote.Requests() != 0 {
		t.Fatalf("the remote got %d green-tea requests", remote.Requests())
	}
	if okN == 0 {
		t.Errorf("no green-tea request succeeded (%d failed)", failN)
	}

	// The local one always fails: the error comes back after its retries.
	local.Respond(modeltest.Always(modeltest.Turn{Status: 500}))
	before := local.Requests()
	_, err := c.Complete(t.Context(), req)
	var pe *model.ProviderError
	if !errors.As(err, &pe) || pe.Provider != "local" || pe.Status != 500 {
		t.Errorf("err = %v", err)
	}
	if got := local.Requests() - before; got != 3 {
		t.Errorf("local tried %d times, want 3", got)
	}
	if remote.Requests() != 0 {
		t.Fatalf("the remote got %d green-tea requests", remote.Requests())
	}

	// Control: without the tag, the same failure fails over to the remote.
	req.Tags = nil
	resp, err := c.Complete(t.Context(), req)
	if err != nil || resp.Provider != "remote" || remote.Requests() != 1 {
		t.Errorf("untagged request: %+v, %v, remote requests %d", resp, err, remote.Requests())
	}
}

// TestKeyNeverLeaks: a provider echoing the key in its error body, for
// each kind: the error and the observed attempts never hold it.
func TestKeyNeverLeaks(t *testing.T) {
	const key = "sk-very-secret-0123456789"
	for _, kind := range []string{model.KindOpenAI, model.KindAnthropic} {
		for _, status := range []int{401, 500} {
			hostile := newHostile(t, status, "bad key "+key+" given")
			p := model.Provider{Name: "p", Kind: kind, BaseURL: hostile.URL, Model: "m", APIKeyFile: writeKey(t, key)}
			if kind == model.KindOpenAI {
				p.BaseURL += "/v1"
			}
			var mu sync.Mutex
			var seen []string
			c := newClient(t, []model.Provider{p}, fast, model.WithObserver(func(at model.Attempt) {
				mu.Lock()
				seen = append(seen, fmt.Sprintf("%+v %#v %v", at, at, at.Err))
				mu.Unlock()
			}))
			_, err := c.Complete(t.Context(), model.Request{Alias: "m", Messages: []model.Message{{Role: model.RoleUser, Text: "q"}}})
			if err == nil {
				t.Fatalf("%s %d: no error", kind, status)
			}
			if strings.Contains(err.Error(), key) || strings.Contains(fmt.Sprintf("%+v %#v", err, err), key) {
				t.Errorf("%s %d: key in the error: %v", kind, status, err)
			}
			if !strings.Contains(err.Error(), "[redacted]") {
				t.Errorf("%s %d: provider's message lost: %v", kind, status, err)
			}
			mu.Lock()
			for _, s := range seen {
				if strings.Contains(s, key) {
					t.Errorf("%s %d: key in an attempt: %s", kind, status, s)
				}
			}
			mu.Unlock()
		}
	}
}

// newHostile is a provider answering status with msg in both APIs' error
// shapes.
func newHostile(t *testing.T, status int, msg string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": map[string]any{"type": "x", "message": msg}})
	}))
	t.Cleanup(srv.Close)
	return srv
}
