package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

func agentRun(id, tenant, state string, created time.Time) *AgentRun {
	return &AgentRun{ID: id, Tenant: tenant, State: state, Created: created, Updated: created,
		Record: json.RawMessage(fmt.Sprintf(`{"run":{"id":%q,"state":%q}}`, id, state))}
}

func agentEv(seq uint64, typ string) AgentEvent {
	return AgentEvent{Seq: seq, Event: json.RawMessage(fmt.Sprintf(`{"seq":%d,"type":%q}`, seq, typ))}
}

func agentRunIDs(l []AgentRun) []string {
	var out []string
	for _, r := range l {
		out = append(out, r.ID)
	}
	return out
}

// TestAgentRunRoundTrip: a run and its events are written together, a
// second put replaces the run and adds events (an event's number written
// again replaces it), and all of it survives a reopen.
func TestAgentRunRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, path := openTest(t)
	r := agentRun("ar-1", "a", "running", t0)
	if err := s.PutAgentRun(ctx, r, agentEv(1, "run.started"), agentEv(2, "message")); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetAgentRun(ctx, "a", "ar-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != "running" || !got.Created.Equal(t0) || !got.Updated.Equal(t0) || string(got.Record) != string(r.Record) {
		t.Errorf("got %+v, want %+v", got, r)
	}
	r.State, r.Updated, r.Record = "succeeded", t0.Add(time.Minute), json.RawMessage(`{"v":2}`)
	if err := s.PutAgentRun(ctx, r, agentEv(2, "message"), agentEv(3, "run.succeeded")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	got, err = s2.GetAgentRun(ctx, "a", "ar-1")
	if err != nil || got.State != "succeeded" || !got.Updated.Equal(t0.Add(time.Minute)) || string(got.Record) != `{"v":2}` {
		t.Fatalf("after replace and reopen: %+v, %v", got, err)
	}
	evs, err := s2.AgentEvents(ctx, "ar-1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, ev := range evs {
		seqs = append(seqs, ev.Seq)
	}
	if !slices.Equal(seqs, []uint64{1, 2, 3}) {
		t.Errorf("events %v, want 1 2 3", seqs)
	}
	if evs, err := s2.AgentEvents(ctx, "ar-1", 2, 0); err != nil || len(evs) != 1 || evs[0].Seq != 3 {
		t.Errorf("events after 2: %+v, %v", evs, err)
	}
	if evs, err := s2.AgentEvents(ctx, "ar-1", 0, 1); err != nil || len(evs) != 1 || evs[0].Seq != 1 {
		t.Errorf("events limit 1: %+v, %v", evs, err)
	}
	if evs, err := s2.AgentEvents(ctx, "ar-1", 1<<63, 0); err != nil || len(evs) != 0 {
		t.Errorf("events after 2^63: %+v, %v", evs, err)
	}
}

// TestAgentRunTenants: another tenant's run is not found, and cannot be
// taken over by a put of the same id.
func TestAgentRunTenants(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	if err := s.PutAgentRun(ctx, agentRun("ar-1", "a", "running", t0)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetAgentRun(ctx, "b", "ar-1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("another tenant's run: %v, want ErrNotFound", err)
	}
	if _, err := s.GetAgentRun(ctx, "a", "ar-none"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a missing run: %v, want ErrNotFound", err)
	}
	if err := s.PutAgentRun(ctx, agentRun("ar-1", "b", "failed", t0), agentEv(9, "x")); err == nil {
		t.Error("a put moved the run to another tenant")
	}
	if got, err := s.GetAgentRun(ctx, "a", "ar-1"); err != nil || got.State != "running" {
		t.Errorf("after the refused put: %+v, %v", got, err)
	}
	// The refused put left none of its events.
	if evs, err := s.AgentEvents(ctx, "ar-1", 0, 0); err != nil || len(evs) != 0 {
		t.Errorf("events of the refused put: %+v, %v", evs, err)
	}
}

// TestAgentRunLists: a tenant's runs newest first, by state; the
// unfinished runs of every tenant oldest first, and their count per
// tenant.
func TestAgentRunLists(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	for i, r := range []*AgentRun{
		agentRun("ar-1", "a", "succeeded", t0),
		agentRun("ar-2", "a", "running", t0.Add(1*time.Second)),
		agentRun("ar-3", "b", "pending", t0.Add(2*time.Second)),
		agentRun("ar-4", "a", "pending", t0.Add(3*time.Second)),
		agentRun("ar-5", "a", "failed", t0.Add(4*time.Second)),
	} {
		if err := s.PutAgentRun(ctx, r); err != nil {
			t.Fatalf("%d: %v", i, err)
		}
	}
	all, err := s.ListAgentRuns(ctx, "a", "", 0)
	if err != nil || !slices.Equal(agentRunIDs(all), []string{"ar-5", "ar-4", "ar-2", "ar-1"}) {
		t.Errorf("list a: %v, %v", agentRunIDs(all), err)
	}
	if l, err := s.ListAgentRuns(ctx, "a", "pending", 0); err != nil || !slices.Equal(agentRunIDs(l), []string{"ar-4"}) {
		t.Errorf("list a pending: %v, %v", agentRunIDs(l), err)
	}
	if l, err := s.ListAgentRuns(ctx, "a", "", 2); err != nil || len(l) != 2 {
		t.Errorf("list a limit 2: %v, %v", agentRunIDs(l), err)
	}
	un, err := s.UnfinishedAgentRuns(ctx)
	if err != nil || !slices.Equal(agentRunIDs(un), []string{"ar-2", "ar-3", "ar-4"}) {
		t.Errorf("unfinished: %v, %v", agentRunIDs(un), err)
	}
	for tenant, want := range map[string]int{"a": 2, "b": 1, "c": 0} {
		if n, err := s.CountUnfinishedAgentRuns(ctx, tenant); err != nil || n != want {
			t.Errorf("count %s: %d, %v; want %d", tenant, n, err, want)
		}
	}
}

// TestAgentRunBadInput: what a run or an event cannot be is refused, and
// nothing of the put is written.
func TestAgentRunBadInput(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	good := agentRun("ar-1", "a", "running", t0)
	for name, tc := range map[string]struct {
		r   *AgentRun
		evs []AgentEvent
	}{
		"nil":         {nil, nil},
		"no id":       {&AgentRun{Tenant: "a", State: "running", Created: t0, Updated: t0, Record: json.RawMessage(`{}`)}, nil},
		"no state":    {&AgentRun{ID: "x", Tenant: "a", Created: t0, Updated: t0, Record: json.RawMessage(`{}`)}, nil},
		"no created":  {&AgentRun{ID: "x", Tenant: "a", State: "running", Updated: t0, Record: json.RawMessage(`{}`)}, nil},
		"bad record":  {&AgentRun{ID: "x", Tenant: "a", State: "running", Created: t0, Updated: t0, Record: json.RawMessage(`{`)}, nil},
		"seq 0":       {good, []AgentEvent{{Seq: 0, Event: json.RawMessage(`{}`)}}},
		"seq too big": {good, []AgentEvent{{Seq: 1 << 63, Event: json.RawMessage(`{}`)}}},
		"bad event":   {good, []AgentEvent{{Seq: 1, Event: json.RawMessage(`nope`)}}},
		"nil event":   {good, []AgentEvent{{Seq: 1}}},
	} {
		if err := s.PutAgentRun(ctx, tc.r, tc.evs...); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := s.GetAgentRun(ctx, "a", "ar-1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a refused put wrote the run: %v", err)
	}
	if _, err := s.GetAgentRun(ctx, "a", ""); err == nil {
		t.Error("an empty id was looked up")
	}
}

// TestAgentMigration: a database of version 4 (before the agent tables)
// gains them, its rows kept.
func TestAgentMigration(t *testing.T) {
	ctx := context.Background()
	s, path := openTest(t)
	mustPutRun(t, s, wfRun("wf-1", "a", "running", t0))
	s.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`DROP TABLE agent_runs`, `DROP TABLE agent_events`, `PRAGMA user_version = 4`} {
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
	if _, err := s2.GetWorkflowRun(ctx, "a", "wf-1"); err != nil {
		t.Error(err)
	}
	if err := s2.PutAgentRun(ctx, agentRun("ar-1", "a", "pending", t0), agentEv(1, "run.started")); err != nil {
		t.Error(err)
	}
}
