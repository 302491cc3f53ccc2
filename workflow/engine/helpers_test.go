package engine

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
)

const tenant = "t1"

var owner = Owner{Tenant: tenant, Actor: "tester"}

// harness is an engine on a fake backend and an in-memory journal.
type harness struct {
	t   testing.TB
	b   *fakeBackend
	j   *memJournal
	e   *Engine
	dir string
}

func newHarness(t *testing.T) *harness {
	h := &harness{t: t, b: newFakeBackend(t), j: newMemJournal(t), dir: t.TempDir()}
	h.e = h.engine()
	return h
}

// engine returns a new engine on the harness's backend, journal and
// artifact directory, closed at the test's end.
func (h *harness) engine() *Engine {
	e := New(h.b, h.j, Options{ArtifactDir: h.dir, Logger: discard()})
	h.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			h.t.Errorf("close: %v", err)
		}
	})
	return e
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// submit starts a run of doc.
func (h *harness) submit(doc string) string {
	h.t.Helper()
	r, err := h.e.Submit(testCtx(h.t), owner, api.CreateWorkflow{Document: doc})
	if err != nil {
		h.t.Fatalf("submit: %v", err)
	}
	if r.State != api.RunPending || !validRunID(r.ID) {
		h.t.Fatalf("submitted run: id %q state %s", r.ID, r.State)
	}
	return r.ID
}

// wait waits for the run's end and checks its events.
func (h *harness) wait(id string) *api.WorkflowRun {
	h.t.Helper()
	r, err := h.e.Wait(testCtx(h.t), tenant, id)
	if err != nil {
		h.t.Fatalf("wait: %v", err)
	}
	h.checkEvents(id)
	return r
}

// run submits doc, waits for its end and wants state.
func (h *harness) run(doc, state string) *api.WorkflowRun {
	h.t.Helper()
	r := h.wait(h.submit(doc))
	if r.State != state {
		h.t.Fatalf("run %s: state %s (%s), want %s; steps %s", r.ID, r.State, r.Error, state, stepStates(r))
	}
	return r
}

// checkEvents checks that the run's events are numbered 1..n without a
// gap, belong to the run, and that the record's LastSeq is n.
func (h *harness) checkEvents(id string) []api.WorkflowEvent {
	h.t.Helper()
	evs := h.j.eventsOf(id)
	for i, ev := range evs {
		if ev.Seq != uint64(i+1) || ev.Run != id || ev.Time.IsZero() {
			h.t.Fatalf("event %d: %+v", i, ev)
		}
	}
	h.j.mu.Lock()
	rec := h.j.load(id)
	h.j.mu.Unlock()
	if rec.LastSeq != uint64(len(evs)) {
		h.t.Fatalf("record LastSeq %d, %d events", rec.LastSeq, len(evs))
	}
	return evs
}

// step returns a step of a run.
func step(t *testing.T, r *api.WorkflowRun, id string) *api.WorkflowStep {
	t.Helper()
	for i := range r.Steps {
		if r.Steps[i].ID == id {
			return &r.Steps[i]
		}
	}
	t.Fatalf("run has no step %s", id)
	return nil
}

func stepStates(r *api.WorkflowRun) []string {
	var out []string
	for _, s := range r.Steps {
		out = append(out, s.ID+"="+s.State+"("+s.Error+")")
	}
	return out
}

// types lists the events' types, for steps (or the run: "") in only.
func types(evs []api.WorkflowEvent, only ...string) []string {
	var out []string
	for _, ev := range evs {
		if len(only) == 0 || slices.Contains(only, ev.Step) {
			out = append(out, ev.Type)
		}
	}
	return out
}
