package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/agent/model"
	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
)

// turn is one scripted model answer.
type turn func(ctx context.Context, req model.Request) (*model.Response, error)

// fakeModel answers each alias's requests from its script, in order, or
// with its fn when the script is used up.
type fakeModel struct {
	mu     sync.Mutex
	script map[string][]turn
	fn     map[string]turn
	reqs   []model.Request
}

func newFakeModel() *fakeModel {
	return &fakeModel{script: map[string][]turn{}, fn: map[string]turn{}}
}

func (m *fakeModel) add(alias string, ts ...turn) { m.script[alias] = append(m.script[alias], ts...) }

func (m *fakeModel) Complete(ctx context.Context, req model.Request) (*model.Response, error) {
	m.mu.Lock()
	m.reqs = append(m.reqs, req)
	var t turn
	if s := m.script[req.Alias]; len(s) > 0 {
		t, m.script[req.Alias] = s[0], s[1:]
	} else {
		t = m.fn[req.Alias]
	}
	m.mu.Unlock()
	if t == nil {
		return nil, fmt.Errorf("no scripted turn for %s", req.Alias)
	}
	return t(ctx, req)
}

func (m *fakeModel) calls() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.reqs)
}

// say answers text.
func say(text string) turn {
	return func(context.Context, model.Request) (*model.Response, error) {
		return &model.Response{Message: model.Message{Role: model.RoleAssistant, Text: text}, Provider: "fake", Model: "m",
			Usage: model.Usage{InputTokens: 10, OutputTokens: 2}}, nil
	}
}

// ask answers one tool call of name with args (a JSON object).
func ask(name, args string) turn {
	return func(_ context.Context, req model.Request) (*model.Response, error) {
		return &model.Response{Message: model.Message{Role: model.RoleAssistant,
			ToolCalls: []model.ToolCall{{ID: fmt.Sprintf("c%d", len(req.Messages)), Name: name, Arguments: json.RawMessage(args)}}},
			Provider: "fake", Model: "m", Usage: model.Usage{InputTokens: 10, OutputTokens: 2}}, nil
	}
}

// check runs fn on the request before t answers it.
func check(t *testing.T, fn func(req model.Request), next turn) turn {
	return func(ctx context.Context, req model.Request) (*model.Response, error) {
		fn(req)
		return next(ctx, req)
	}
}

// lastTool returns the last message of req if it is a tool result.
func lastTool(t *testing.T, req model.Request) model.Message {
	t.Helper()
	m := req.Messages[len(req.Messages)-1]
	if m.Role != model.RoleTool {
		t.Errorf("last message is %s, want a tool result", m.Role)
	}
	return m
}

// call is one Backend call the fake saw.
type call struct {
	op  string
	req any
}

// fakeBackend is an in-memory daemon: sandboxes with files, an exec that
// runs a handler.
type fakeBackend struct {
	mu        sync.Mutex
	calls     []call
	n         int
	sandboxes map[string]bool // id → running
	files     map[string]string
	exec      func(ctx context.Context, x api.Exec) (*sandbox.Result, error)
	override  map[string]func(ctx context.Context, req any, body io.Reader, out io.Writer) (any, error)
	fetch     func(url string) (*FetchResult, error)
}

func newFakeBackend() *fakeBackend {
	return &fakeBackend{sandboxes: map[string]bool{}, files: map[string]string{}, override: map[string]func(context.Context, any, io.Reader, io.Writer) (any, error){}}
}

func (b *fakeBackend) Call(ctx context.Context, o Owner, op string, req any, body io.Reader, out io.Writer) (any, error) {
	b.mu.Lock()
	b.calls = append(b.calls, call{op, req})
	f := b.override[op]
	b.mu.Unlock()
	if f != nil {
		return f(ctx, req, body, out)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch op {
	case api.OpSandboxCreate:
		b.n++
		id := fmt.Sprintf("sb-%d", b.n)
		b.sandboxes[id] = true
		return &api.Sandbox{ID: id, State: api.StateRunning}, nil
	case api.OpSandboxGet:
		id := req.(api.SandboxRef).Sandbox
		if !b.sandboxes[id] {
			return nil, api.Errorf(api.CodeNotFound, "no sandbox %s", id)
		}
		return &api.Sandbox{ID: id, State: api.StateRunning}, nil
	case api.OpSandboxDelete:
		id := req.(api.SandboxRef).Sandbox
		if !b.sandboxes[id] {
			return nil, api.Errorf(api.CodeNotFound, "no sandbox %s", id)
		}
		delete(b.sandboxes, id)
		return &api.Sandbox{ID: id, State: api.StateStopped}, nil
	case api.OpFileWrite:
		w := req.(api.WriteFile)
		data, _ := io.ReadAll(body)
		b.files[w.Path] = string(data)
		return &api.Written{Path: w.Path, Size: int64(len(data))}, nil
	case api.OpFileRead:
		p := req.(api.FilePath)
		s, ok := b.files[p.Path]
		if !ok {
			return nil, &api.Error{Code: api.CodeFile, Errno: "ENOENT", Message: p.Path}
		}
		if p.MaxBytes > 0 && int64(len(s)) > p.MaxBytes {
			return nil, api.Errorf(api.CodeTooLarge, "over the cap")
		}
		io.WriteString(out, s)
		return &api.FileContent{Path: p.Path, Size: int64(len(s))}, nil
	case api.OpFileStat:
		p := req.(api.FilePath)
		return &sandbox.FileInfo{Name: p.Path, Type: "file", Size: int64(len(b.files[p.Path]))}, nil
	case api.OpFileList:
		p := req.(api.FilePath)
		var ents []sandbox.FileInfo
		for k, v := range b.files {
			if strings.HasPrefix(k, p.Path+"/") {
				ents = append(ents, sandbox.FileInfo{Name: strings.TrimPrefix(k, p.Path+"/"), Type: "file", Size: int64(len(v))})
			}
		}
		return &api.DirList{Path: p.Path, Entries: ents}, nil
	case api.OpExec:
		x := req.(api.Exec)
		if !b.sandboxes[x.Sandbox] {
			return nil, api.Errorf(api.CodeNotRunning, "sandbox %s is not running", x.Sandbox)
		}
		if b.exec == nil {
			return &sandbox.Result{ExitReason: sandbox.ReasonExited}, nil
		}
		f := b.exec
		b.mu.Unlock()
		defer b.mu.Lock()
		return f(ctx, x)
	}
	return nil, api.Errorf(api.CodeUnimplemented, "fake: %s", op)
}

func (b *fakeBackend) Fetch(ctx context.Context, o Owner, sandboxID, url string, max int64) (*FetchResult, error) {
	b.mu.Lock()
	b.calls = append(b.calls, call{"fetch", url})
	f := b.fetch
	b.mu.Unlock()
	if f == nil {
		return nil, errors.New("no network")
	}
	return f(url)
}

// ops returns the operations called, in order.
func (b *fakeBackend) ops() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, c := range b.calls {
		out = append(out, c.op)
	}
	return out
}

// reqs returns the requests of op, in order.
func (b *fakeBackend) reqs(op string) []any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []any
	for _, c := range b.calls {
		if c.op == op {
			out = append(out, c.req)
		}
	}
	return out
}

// live returns the sandboxes not deleted.
func (b *fakeBackend) live() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for id := range b.sandboxes {
		out = append(out, id)
	}
	return out
}

// fakeJournal keeps records as JSON (as a store would), counting writes.
type fakeJournal struct {
	mu     sync.Mutex
	recs   map[string][]byte
	events map[string][]api.AgentEvent
	saves  int
	empty  int // saves without events
}

func newFakeJournal() *fakeJournal {
	return &fakeJournal{recs: map[string][]byte{}, events: map[string][]api.AgentEvent{}}
}

func (j *fakeJournal) SaveRun(ctx context.Context, r *Record, evs []api.AgentEvent) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	id := r.Run.ID
	last := uint64(0)
	if es := j.events[id]; len(es) > 0 {
		last = es[len(es)-1].Seq
	}
	for _, ev := range evs {
		if ev.Seq != last+1 {
			return fmt.Errorf("event seq %d after %d", ev.Seq, last)
		}
		last = ev.Seq
	}
	j.saves++
	if len(evs) == 0 {
		j.empty++
	}
	j.recs[id] = b
	j.events[id] = append(j.events[id], evs...)
	return nil
}

func (j *fakeJournal) LoadRun(ctx context.Context, tenant, id string) (*Record, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	b, ok := j.recs[id]
	if !ok {
		return nil, fmt.Errorf("run %s: %w", id, ErrNotFound)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	if r.Owner.Tenant != tenant {
		return nil, ErrNotFound
	}
	return &r, nil
}

func (j *fakeJournal) Events(ctx context.Context, run string, after uint64, limit int) ([]api.AgentEvent, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []api.AgentEvent
	for _, ev := range j.events[run] {
		if ev.Seq > after && len(out) < limit {
			out = append(out, ev)
		}
	}
	return out, nil
}

func (j *fakeJournal) Unfinished(ctx context.Context) ([]*Record, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []*Record
	for _, b := range j.recs {
		var r Record
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, err
		}
		if !ended(r.Run.State) {
			out = append(out, &r)
		}
	}
	return out, nil
}

// types returns the types of a run's journalled events.
func (j *fakeJournal) types(run string) []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []string
	for _, ev := range j.events[run] {
		out = append(out, ev.Type)
	}
	return out
}

// crashJournal passes saves to j until freeze says so; from then on a
// save blocks until release and then fails: the daemon "crashed" with
// what j has.
type crashJournal struct {
	*fakeJournal
	freeze  func(evs []api.AgentEvent) bool // after this save, freeze
	mu      sync.Mutex
	frozen  bool
	hit     chan struct{} // closed when a save blocks on the freeze
	release chan struct{}
	once    sync.Once
}

var errCrashed = errors.New("crashed")

func (c *crashJournal) SaveRun(ctx context.Context, r *Record, evs []api.AgentEvent) error {
	c.mu.Lock()
	frozen := c.frozen
	c.mu.Unlock()
	if frozen {
		c.once.Do(func() { close(c.hit) })
		<-c.release
		return errCrashed
	}
	if err := c.fakeJournal.SaveRun(ctx, r, evs); err != nil {
		return err
	}
	if c.freeze(evs) {
		c.mu.Lock()
		c.frozen = true
		c.mu.Unlock()
	}
	return nil
}

// owner is the tests' run owner.
var owner = Owner{Tenant: "t1", Actor: "test"}

// wait waits for a run to end.
func wait(t *testing.T, e *Engine, id string) *api.AgentRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := e.Wait(ctx, owner.Tenant, id)
	if err != nil {
		t.Fatalf("wait %s: %v", id, err)
	}
	return r
}

// conv returns an agent's conversation as journalled.
func conv(t *testing.T, e *Engine, id, agent string) []model.Message {
	t.Helper()
	rec, err := e.Record(context.Background(), owner.Tenant, id)
	if err != nil {
		t.Fatal(err)
	}
	return rec.Conversations[agent]
}

// count returns how many times s occurs in list.
func count(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}
