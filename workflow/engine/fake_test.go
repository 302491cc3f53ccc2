package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
	"github.com/moat-sandbox/moat/workflow"
)

// fakeBackend simulates sandboxes and snapshots in memory: a sandbox's
// filesystem is a map of key/values, a snapshot a copy of one. Exec runs
// each argument of the step as a tiny scripted command ("write k=v",
// "expect k=v", "cat", "block GATE", ...; see run), in order, stopping at
// the first that fails.
type fakeBackend struct {
	t testing.TB

	mu      sync.Mutex
	changed chan struct{} // closed and replaced at every change
	n       int
	boxes   map[string]*fakeBox
	snaps   map[string]map[string]string
	// parent maps a snapshot to the one it is layered on: it cannot be
	// deleted before its children.
	parent  map[string]string
	creates []CreateRequest
	execs   []fakeExec
	cur     int // Execs running now
	peak    int // most Execs running at once
	// builds are the Build calls, in order (build_test.go).
	builds []BuildRequest
	// deletedBoxes and deletedSnaps list what was deleted, in order.
	deletedBoxes, deletedSnaps []string
	budgets, released          map[string]int
	liveBudget                 map[string]bool
	gates                      map[string]chan struct{}
	tokens                     chan struct{}
	// piped is what each step's "cat" has read of its stdin so far.
	piped map[string]string
	// keepBoxes makes Delete a no-op (a daemon killed before it could
	// clean up).
	keepBoxes bool
	// quota, when not 0, refuses a Create with ErrCapacity while that
	// many sandboxes live; refused counts those refusals, livePeak the
	// most sandboxes alive at once.
	quota, refused, livePeak int
}

type fakeBox struct {
	fs  map[string]string
	req CreateRequest
}

// fakeExec is one Exec call as the fake saw it.
type fakeExec struct {
	step    string
	attempt int
	env     []string
	start   string // the start snapshot of its sandbox
}

func newFakeBackend(t testing.TB) *fakeBackend {
	return &fakeBackend{
		t: t, changed: make(chan struct{}),
		boxes: map[string]*fakeBox{}, snaps: map[string]map[string]string{}, parent: map[string]string{},
		budgets: map[string]int{}, released: map[string]int{}, liveBudget: map[string]bool{},
		gates: map[string]chan struct{}{}, tokens: make(chan struct{}),
		piped: map[string]string{},
	}
}

// signal wakes waitFor; called with mu held.
func (b *fakeBackend) signal() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// waitFor waits until cond (called with mu held: it must not lock)
// holds, failing the test
// after a deadline.
func (b *fakeBackend) waitFor(what string, cond func() bool) {
	b.t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for {
		b.mu.Lock()
		ok, ch := cond(), b.changed
		b.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			b.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// gate returns the channel of a gate; open closes it.
func (b *fakeBackend) gate(name string) chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	g := b.gates[name]
	if g == nil {
		g = make(chan struct{})
		b.gates[name] = g
	}
	return g
}

func (b *fakeBackend) open(name string) { close(b.gate(name)) }

// execsOf returns the Execs of a step.
func (b *fakeBackend) execsOf(step string) []fakeExec {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []fakeExec
	for _, x := range b.execs {
		if x.step == step {
			out = append(out, x)
		}
	}
	return out
}

// ranLocked counts the Execs of a step; mu is held.
func (b *fakeBackend) ranLocked(step string) int {
	n := 0
	for _, x := range b.execs {
		if x.step == step {
			n++
		}
	}
	return n
}

func (b *fakeBackend) Create(ctx context.Context, o Owner, req CreateRequest) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	fs := map[string]string{}
	if req.Snapshot != "" {
		s, ok := b.snaps[req.Snapshot]
		if !ok {
			return "", fmt.Errorf("no snapshot %s", req.Snapshot)
		}
		fs = maps.Clone(s)
	}
	if req.Budget != "" && !b.liveBudget[req.Budget] {
		b.t.Errorf("create in budget %s, which does not exist", req.Budget)
	}
	if b.quota > 0 && len(b.boxes) >= b.quota {
		b.refused++
		return "", fmt.Errorf("%w: sandbox quota reached (%d)", ErrCapacity, b.quota)
	}
	b.n++
	id := fmt.Sprintf("sb-%d", b.n)
	b.boxes[id] = &fakeBox{fs: fs, req: req}
	b.livePeak = max(b.livePeak, len(b.boxes))
	b.creates = append(b.creates, req)
	b.signal()
	return id, nil
}

func (b *fakeBackend) Exec(ctx context.Context, o Owner, id string, req ExecRequest) (*sandbox.Result, error) {
	b.mu.Lock()
	box := b.boxes[id]
	if box == nil {
		b.mu.Unlock()
		return nil, fmt.Errorf("no sandbox %s", id)
	}
	step := box.req.Labels[LabelStep]
	attempt, _ := strconv.Atoi(envOf(req.Env, workflow.EnvAttempt))
	b.execs = append(b.execs, fakeExec{step: step, attempt: attempt, env: slices.Clone(req.Env), start: box.req.Snapshot})
	b.cur++
	b.peak = max(b.peak, b.cur)
	b.signal()
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.cur--
		b.signal()
		b.mu.Unlock()
	}()
	var stdout, stderr bytes.Buffer
	w := io.Writer(&stdout)
	if req.Stdout != nil {
		w = io.MultiWriter(&stdout, req.Stdout)
	}
	code := 0
	for _, cmd := range req.Args {
		var err error
		code, err = b.run(ctx, box, step, attempt, cmd, req.Stdin, w, &stderr)
		if err != nil {
			return nil, err
		}
		if code != 0 {
			break
		}
	}
	return &sandbox.Result{ExitCode: code, ExitReason: sandbox.ReasonExited, Stdout: stdout.String(), Stderr: stderr.String()}, nil
}

// run runs one scripted command; an error is a failure of Exec itself
// (its context ended).
func (b *fakeBackend) run(ctx context.Context, box *fakeBox, step string, attempt int, cmd string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	verb, arg, _ := strings.Cut(cmd, " ")
	switch verb {
	case "ok":
	case "fail":
		return 1, nil
	case "fail-once": // fails on the step's first attempt
		if attempt == 1 {
			return 1, nil
		}
	case "write": // k=v into the sandbox's filesystem
		k, v, _ := strings.Cut(arg, "=")
		b.mu.Lock()
		box.fs[k] = v
		b.mu.Unlock()
	case "expect": // k=v must be in the filesystem
		k, v, _ := strings.Cut(arg, "=")
		b.mu.Lock()
		got, ok := box.fs[k]
		b.mu.Unlock()
		if !ok || got != v {
			fmt.Fprintf(stderr, "%s is %q, want %q", k, got, v)
			return 1, nil
		}
	case "absent": // k must not be in the filesystem
		b.mu.Lock()
		_, ok := box.fs[arg]
		b.mu.Unlock()
		if ok {
			fmt.Fprintf(stderr, "%s is there", arg)
			return 1, nil
		}
	case "echo":
		io.WriteString(stdout, arg)
	case "cat": // stdin to stdout, noting what was read
		if stdin == nil {
			return 2, nil
		}
		buf := make([]byte, 4)
		for {
			n, err := stdin.Read(buf)
			if n > 0 {
				stdout.Write(buf[:n])
				b.mu.Lock()
				b.piped[step] += string(buf[:n])
				b.signal()
				b.mu.Unlock()
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return 0, err
			}
		}
	case "await": // "STEP TEXT": wait until STEP's cat has read TEXT
		other, text, _ := strings.Cut(arg, " ")
		for {
			b.mu.Lock()
			ok, ch := strings.Contains(b.piped[other], text), b.changed
			b.mu.Unlock()
			if ok {
				break
			}
			select {
			case <-ch:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
	case "block", "block-once": // wait for a gate (block-once: on attempt 1 only)
		if verb == "block-once" && attempt != 1 {
			break
		}
		select {
		case <-b.gate(arg):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	case "hold": // wait for a token of the test
		select {
		case <-b.tokens:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	case "read": // a file of an input bind, to stdout
		for _, bind := range box.req.Inputs {
			if rest, ok := strings.CutPrefix(arg, bind.Target+"/"); ok {
				data, err := os.ReadFile(filepath.Join(bind.Source, rest))
				if err != nil {
					fmt.Fprint(stderr, err)
					return 1, nil
				}
				stdout.Write(data)
				return 0, nil
			}
		}
		return 1, nil
	default:
		b.t.Errorf("unknown fake command %q", cmd)
		return 127, nil
	}
	return 0, nil
}

func envOf(env []string, key string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}

func (b *fakeBackend) Snapshot(ctx context.Context, o Owner, id string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	box := b.boxes[id]
	if box == nil {
		return "", fmt.Errorf("no sandbox %s", id)
	}
	b.n++
	sid := fmt.Sprintf("snap-%d", b.n)
	b.snaps[sid] = maps.Clone(box.fs)
	if box.req.Snapshot != "" {
		// Layered on the snapshot its sandbox started from, as the
		// store's snapshots are.
		b.parent[sid] = box.req.Snapshot
	}
	b.signal()
	return sid, nil
}

// Collect writes every key of the filesystem at or under a path into dir
// (dir + key).
func (b *fakeBackend) Collect(ctx context.Context, o Owner, id string, paths []string, dir string) ([]api.WorkflowArtifact, error) {
	b.mu.Lock()
	box := b.boxes[id]
	fs := maps.Clone(box.fs)
	b.mu.Unlock()
	var arts []api.WorkflowArtifact
	for _, p := range paths {
		var keys []string
		for k := range fs {
			if k == p || strings.HasPrefix(k, p+"/") {
				keys = append(keys, k)
			}
		}
		if len(keys) == 0 {
			return nil, fmt.Errorf("output %s: no such file", p)
		}
		sort.Strings(keys)
		for _, k := range keys {
			dst := filepath.Join(dir, k)
			if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
				return nil, err
			}
			if err := os.WriteFile(dst, []byte(fs[k]), 0o600); err != nil {
				return nil, err
			}
			sum := sha256.Sum256([]byte(fs[k]))
			arts = append(arts, api.WorkflowArtifact{Path: k, Bytes: int64(len(fs[k])), SHA256: hex.EncodeToString(sum[:])})
		}
	}
	return arts, nil
}

func (b *fakeBackend) Delete(ctx context.Context, o Owner, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.keepBoxes {
		return nil
	}
	delete(b.boxes, id)
	b.deletedBoxes = append(b.deletedBoxes, id)
	b.signal()
	return nil
}

func (b *fakeBackend) DeleteSnapshot(ctx context.Context, o Owner, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for child, parent := range b.parent {
		if parent == id {
			return fmt.Errorf("snapshot %s is the parent of %s", id, child)
		}
	}
	delete(b.snaps, id)
	delete(b.parent, id)
	b.deletedSnaps = append(b.deletedSnaps, id)
	b.signal()
	return nil
}

func (b *fakeBackend) NewBudget(ctx context.Context, o Owner, id string, l sandbox.Limits) (func(), error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.liveBudget[id] {
		b.t.Errorf("budget %s made twice", id)
	}
	b.budgets[id]++
	b.liveBudget[id] = true
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for sid, box := range b.boxes {
			if box.req.Budget == id {
				b.t.Errorf("budget %s released while sandbox %s lives in it", id, sid)
			}
		}
		b.released[id]++
		b.liveBudget[id] = false
		b.signal()
	}, nil
}

// memJournal is a Journal in memory that stores copies (through JSON, as
// a real one would) and checks that event numbers grow by one.
type memJournal struct {
	t      testing.TB
	mu     sync.Mutex
	runs   map[string][]byte
	events map[string][]api.WorkflowEvent
}

func newMemJournal(t testing.TB) *memJournal {
	return &memJournal{t: t, runs: map[string][]byte{}, events: map[string][]api.WorkflowEvent{}}
}

func (j *memJournal) SaveRun(ctx context.Context, r *Record, evs []api.WorkflowEvent) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.runs[r.Run.ID] = data
	run := r.Run.ID
	for _, ev := range evs {
		if have := j.events[run]; len(have) > 0 && ev.Seq != have[len(have)-1].Seq+1 || len(have) == 0 && ev.Seq != 1 {
			j.t.Errorf("run %s: event %d (%s) appended after %d events", run, ev.Seq, ev.Type, len(have))
		}
		j.events[run] = append(j.events[run], ev)
	}
	return nil
}

func (j *memJournal) Events(ctx context.Context, run string, after uint64, limit int) ([]api.WorkflowEvent, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []api.WorkflowEvent
	for _, ev := range j.events[run] {
		if ev.Seq > after && len(out) < limit {
			out = append(out, ev)
		}
	}
	return out, nil
}

func (j *memJournal) load(id string) *Record {
	var r Record
	if err := json.Unmarshal(j.runs[id], &r); err != nil {
		j.t.Fatal(err)
	}
	return &r
}

func (j *memJournal) LoadRun(ctx context.Context, tenant, run string) (*Record, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.runs[run]; !ok {
		return nil, fmt.Errorf("run %s: %w", run, ErrNotFound)
	}
	r := j.load(run)
	if r.Owner.Tenant != tenant {
		return nil, fmt.Errorf("run %s: %w", run, ErrNotFound)
	}
	return r, nil
}

func (j *memJournal) ListRuns(ctx context.Context, tenant, state string, limit int) ([]*Record, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []*Record
	for id := range j.runs {
		r := j.load(id)
		if r.Owner.Tenant == tenant && (state == "" || r.Run.State == state) {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Run.Created.After(out[b].Run.Created) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

func (j *memJournal) Unfinished(ctx context.Context) ([]*Record, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []*Record
	for id := range j.runs {
		if r := j.load(id); r.Run.State == api.RunPending || r.Run.State == api.RunRunning || len(r.Garbage) > 0 {
			out = append(out, r)
		}
	}
	return out, nil
}

// eventsOf returns a run's journalled events.
func (j *memJournal) eventsOf(run string) []api.WorkflowEvent {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.events[run])
}
