package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func wfRun(id, tenant, state string, created time.Time) *WorkflowRun {
	return &WorkflowRun{ID: id, Tenant: tenant, Name: "n-" + id, State: state, Created: created, Updated: created,
		Record: json.RawMessage(fmt.Sprintf(`{"run":{"id":%q,"state":%q}}`, id, state))}
}

func mustPutRun(t *testing.T, s *Store, r *WorkflowRun) {
	t.Helper()
	if err := s.PutWorkflowRun(context.Background(), r); err != nil {
		t.Fatalf("PutWorkflowRun(%s): %v", r.ID, err)
	}
}

func runIDs(l []WorkflowRun) []string {
	var out []string
	for _, r := range l {
		out = append(out, r.ID)
	}
	return out
}

func TestWorkflowRunRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, path := openTest(t)
	r := wfRun("wf-1", "a", "running", t0)
	mustPutRun(t, s, r)
	got, err := s.GetWorkflowRun(ctx, "a", "wf-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != r.Name || got.State != "running" || !got.Created.Equal(t0) || !got.Updated.Equal(t0) || string(got.Record) != string(r.Record) {
		t.Errorf("got %+v, want %+v", got, r)
	}
	// Replace: every field but the tenant; events stay.
	if err := s.AppendWorkflowEvents(ctx, "wf-1", []WorkflowEvent{{Seq: 1, Body: json.RawMessage(`{"type":"run.started"}`)}}); err != nil {
		t.Fatal(err)
	}
	r.State, r.Updated, r.Record = "succeeded", t0.Add(time.Minute), json.RawMessage(`{"v":2}`)
	mustPutRun(t, s, r)
	got, err = s.GetWorkflowRun(ctx, "a", "wf-1")
	if err != nil || got.State != "succeeded" || !got.Updated.Equal(t0.Add(time.Minute)) || string(got.Record) != `{"v":2}` {
		t.Errorf("after replace: %+v, %v", got, err)
	}
	if evs, err := s.WorkflowEvents(ctx, "wf-1", 0, 0); err != nil || len(evs) != 1 {
		t.Errorf("events after replace: %v, %v", evs, err)
	}
	// Durable across a reopen.
	s.Close()
	s2, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got, err := s2.GetWorkflowRun(ctx, "a", "wf-1"); err != nil || got.State != "succeeded" {
		t.Errorf("after reopen: %+v, %v", got, err)
	}
}

func TestWorkflowRunTenants(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	mustPutRun(t, s, wfRun("wf-1", "a", "running", t0))
	if _, err := s.GetWorkflowRun(ctx, "b", "wf-1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("another tenant's run: %v, want ErrNotFound", err)
	}
	if _, err := s.GetWorkflowRun(ctx, "a", "wf-none"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a missing run: %v, want ErrNotFound", err)
	}
	if l, err := s.ListWorkflowRuns(ctx, "b", "", 0); err != nil || len(l) != 0 {
		t.Errorf("tenant b lists %v, %v", runIDs(l), err)
	}
	// A run cannot be moved to another tenant.
	err := s.PutWorkflowRun(ctx, wfRun("wf-1", "b", "failed", t0))
	if err == nil || !strings.Contains(err.Error(), "another tenant") {
		t.Errorf("moving a run to another tenant: %v", err)
	}
	if got, _ := s.GetWorkflowRun(ctx, "a", "wf-1"); got == nil || got.State != "running" {
		t.Errorf("the refused move changed the run: %+v", got)
	}
}

func TestListWorkflowRuns(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	states := []string{"succeeded", "running", "failed", "pending", "running", "cancelled"}
	for i, st := range states {
		mustPutRun(t, s, wfRun(fmt.Sprintf("wf-%d", i), "a", st, t0.Add(time.Duration(i)*time.Second)))
	}
	mustPutRun(t, s, wfRun("wf-b", "b", "running", t0))
	for _, c := range []struct {
		state string
		limit int
		want  []string
	}{
		{"", 0, []string{"wf-5", "wf-4", "wf-3", "wf-2", "wf-1", "wf-0"}},
		{"", 2, []string{"wf-5", "wf-4"}},
		{"running", 0, []string{"wf-4", "wf-1"}},
		{"failed", 0, []string{"wf-2"}},
		{"bogus", 0, nil},
	} {
		l, err := s.ListWorkflowRuns(ctx, "a", c.state, c.limit)
		if err != nil {
			t.Fatal(err)
		}
		if got := runIDs(l); !slices.Equal(got, c.want) {
			t.Errorf("list(%q, %d) = %q, want %q", c.state, c.limit, got, c.want)
		}
	}
	un, err := s.UnfinishedWorkflowRuns(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := runIDs(un), []string{"wf-b", "wf-1", "wf-3", "wf-4"}; !slices.Equal(got, want) {
		t.Errorf("unfinished = %q, want %q (every tenant, oldest first)", got, want)
	}
}

func TestWorkflowEvents(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	mustPutRun(t, s, wfRun("wf-1", "a", "running", t0))
	mustPutRun(t, s, wfRun("wf-2", "a", "running", t0))
	ev := func(seq uint64, typ string) WorkflowEvent {
		return WorkflowEvent{Seq: seq, Body: json.RawMessage(fmt.Sprintf(`{"seq":%d,"type":%q}`, seq, typ))}
	}
	if err := s.AppendWorkflowEvents(ctx, "wf-1", []WorkflowEvent{ev(1, "a"), ev(2, "b"), ev(3, "c")}); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendWorkflowEvents(ctx, "wf-2", []WorkflowEvent{ev(1, "other")}); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendWorkflowEvents(ctx, "wf-1", nil); err != nil {
		t.Errorf("no events: %v", err)
	}
	seqs := func(after uint64, limit int) []string {
		t.Helper()
		evs, err := s.WorkflowEvents(ctx, "wf-1", after, limit)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range evs {
			var v struct{ Type string }
			if err := json.Unmarshal(e.Body, &v); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%d%s", e.Seq, v.Type))
		}
		return out
	}
	if got := seqs(0, 0); !slices.Equal(got, []string{"1a", "2b", "3c"}) {
		t.Errorf("all = %q", got)
	}
	if got := seqs(1, 1); !slices.Equal(got, []string{"2b"}) {
		t.Errorf("after 1, limit 1 = %q", got)
	}
	if got := seqs(3, 0); len(got) != 0 {
		t.Errorf("after the last = %q", got)
	}
	if got := seqs(1<<64-1, 0); len(got) != 0 {
		t.Errorf("after the largest number = %q", got)
	}
	// The same number again: the last write wins.
	if err := s.AppendWorkflowEvents(ctx, "wf-1", []WorkflowEvent{ev(3, "C"), ev(4, "d")}); err != nil {
		t.Fatal(err)
	}
	if got := seqs(0, 0); !slices.Equal(got, []string{"1a", "2b", "3C", "4d"}) {
		t.Errorf("after a rewrite = %q", got)
	}
	// Events may come before their run's first record.
	if err := s.AppendWorkflowEvents(ctx, "wf-later", []WorkflowEvent{ev(1, "x")}); err != nil {
		t.Errorf("events before the run's record: %v", err)
	}
	mustPutRun(t, s, wfRun("wf-later", "a", "pending", t0))
	if evs, err := s.WorkflowEvents(ctx, "wf-later", 0, 0); err != nil || len(evs) != 1 {
		t.Errorf("events written before the run's record: %v, %v", evs, err)
	}
	// A bad event refuses the whole batch.
	err := s.AppendWorkflowEvents(ctx, "wf-1", []WorkflowEvent{ev(5, "e"), {Seq: 6, Body: json.RawMessage(`{`)}})
	if err == nil {
		t.Error("an event that is not JSON was accepted")
	}
	if got := seqs(4, 0); len(got) != 0 {
		t.Errorf("a refused batch left %q", got)
	}
}

func TestWorkflowBadInput(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	for name, r := range map[string]*WorkflowRun{
		"nil":       nil,
		"no id":     {Tenant: "a", State: "running", Created: t0, Updated: t0, Record: json.RawMessage(`{}`)},
		"no state":  {ID: "wf-1", Tenant: "a", Created: t0, Updated: t0, Record: json.RawMessage(`{}`)},
		"no time":   {ID: "wf-1", Tenant: "a", State: "running", Record: json.RawMessage(`{}`)},
		"no record": {ID: "wf-1", Tenant: "a", State: "running", Created: t0, Updated: t0},
		"bad json":  {ID: "wf-1", Tenant: "a", State: "running", Created: t0, Updated: t0, Record: json.RawMessage(`{`)},
	} {
		if err := s.PutWorkflowRun(ctx, r); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	mustPutRun(t, s, wfRun("wf-1", "a", "running", t0))
	for name, evs := range map[string][]WorkflowEvent{
		"seq 0":   {{Seq: 0, Body: json.RawMessage(`{}`)}},
		"seq big": {{Seq: 1 << 63, Body: json.RawMessage(`{}`)}},
		"no body": {{Seq: 1}},
	} {
		if err := s.AppendWorkflowEvents(ctx, "wf-1", evs); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := s.AppendWorkflowEvents(ctx, "", []WorkflowEvent{{Seq: 1, Body: json.RawMessage(`{}`)}}); err == nil {
		t.Error("events of an empty run id: accepted")
	}
}

// TestWorkflowMigration: a database of schema version 2 (before workflows)
// gains the workflow tables and keeps its sandboxes.
func TestWorkflowMigration(t *testing.T) {
	ctx := context.Background()
	s, path := openTest(t)
	mustPutSandbox(t, s, running("sb-1", "a", t0))
	s.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`DROP TABLE agent_runs`, `DROP TABLE agent_events`, `DROP TABLE builds`, `DROP TABLE workflow_events`, `DROP TABLE workflow_runs`, `PRAGMA user_version = 2`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	s2, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if v := userVersion(t, path); v != SchemaVersion {
		t.Errorf("user_version = %d, want %d", v, SchemaVersion)
	}
	if _, err := s2.GetSandbox(ctx, "a", "sb-1"); err != nil {
		t.Error(err)
	}
	mustPutRun(t, s2, wfRun("wf-1", "a", "pending", t0))
}

// TestWorkflowConcurrentWrites: saves and appends from many goroutines
// share group commits and all land.
func TestWorkflowConcurrentWrites(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	const runs, events = 8, 20
	var wg sync.WaitGroup
	errs := make(chan error, runs)
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("wf-%d", i)
			r := wfRun(id, "a", "running", t0)
			if err := s.PutWorkflowRun(ctx, r); err != nil {
				errs <- err
				return
			}
			for seq := uint64(1); seq <= events; seq++ {
				if err := s.AppendWorkflowEvents(ctx, id, []WorkflowEvent{{Seq: seq, Body: json.RawMessage(`{}`)}}); err != nil {
					errs <- err
					return
				}
				r.Updated = r.Updated.Add(time.Millisecond)
				if err := s.PutWorkflowRun(ctx, r); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range runs {
		evs, err := s.WorkflowEvents(ctx, fmt.Sprintf("wf-%d", i), 0, 0)
		if err != nil || len(evs) != events {
			t.Errorf("run %d: %d events, %v", i, len(evs), err)
		}
	}
}

// A run's state and the events of its transition are one write: both land
// together, and a refused state (the id is another tenant's) leaves none
// of its events.
func TestWorkflowRunWithEvents(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	body := func(s string) json.RawMessage { return json.RawMessage(`{"type":"` + s + `"}`) }
	if err := s.PutWorkflowRun(ctx, wfRun("wf-1", "a", "running", t0), WorkflowEvent{Seq: 1, Body: body("run.started")}); err != nil {
		t.Fatal(err)
	}
	if evs, err := s.WorkflowEvents(ctx, "wf-1", 0, 10); err != nil || len(evs) != 1 {
		t.Fatalf("events after the put: %v %v", evs, err)
	}
	err := s.PutWorkflowRun(ctx, wfRun("wf-1", "b", "running", t0), WorkflowEvent{Seq: 2, Body: body("forged")})
	if err == nil {
		t.Fatal("another tenant's put of wf-1 was taken")
	}
	if evs, err := s.WorkflowEvents(ctx, "wf-1", 0, 10); err != nil || len(evs) != 1 {
		t.Fatalf("a refused put left events: %v %v", evs, err)
	}
	if err := s.PutWorkflowRun(ctx, wfRun("wf-1", "a", "running", t0), WorkflowEvent{Seq: 2, Body: json.RawMessage(`{`)}); err == nil {
		t.Fatal("an event that is not JSON was taken")
	}
}

// An ended run whose record still lists garbage is unfinished business.
func TestWorkflowRunGarbageUnfinished(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	clean := wfRun("wf-1", "a", "succeeded", t0)
	dirty := wfRun("wf-2", "a", "succeeded", t0)
	dirty.Record = json.RawMessage(`{"run":{"id":"wf-2","state":"succeeded"},"garbage":["snap-1"]}`)
	done := wfRun("wf-3", "a", "succeeded", t0)
	done.Record = json.RawMessage(`{"run":{"id":"wf-3","state":"succeeded"},"garbage":[]}`)
	for _, r := range []*WorkflowRun{clean, dirty, done} {
		mustPutRun(t, s, r)
	}
	l, err := s.UnfinishedWorkflowRuns(ctx)
	if err != nil || !slices.Equal(runIDs(l), []string{"wf-2"}) {
		t.Fatalf("unfinished: %v %v", runIDs(l), err)
	}
}
