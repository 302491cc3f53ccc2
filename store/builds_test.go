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

func buildRow(id, tenant, status string, created time.Time, ended *time.Time) *Build {
	return &Build{ID: id, Tenant: tenant, Status: status, Created: created, Ended: ended,
		Record: json.RawMessage(fmt.Sprintf(`{"id":%q,"status":%q}`, id, status))}
}

func buildIDs(l []Build) []string {
	out := []string{}
	for _, b := range l {
		out = append(out, b.ID)
	}
	return out
}

func TestBuildRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	b := buildRow("b-1", "a", "running", t0, nil)
	if err := s.SaveBuild(ctx, b); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetBuild(ctx, "a", "b-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != "running" || !got.Created.Equal(t0) || got.Ended != nil || string(got.Record) != string(b.Record) {
		t.Errorf("got %+v, want %+v", got, b)
	}
	// Another tenant sees nothing, and cannot take the id over.
	if _, err := s.GetBuild(ctx, "b", "b-1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("another tenant's get: %v", err)
	}
	if err := s.SaveBuild(ctx, buildRow("b-1", "b", "succeeded", t0, nil)); err == nil {
		t.Error("another tenant replaced the build")
	}
	// The end: status, ended, record replaced.
	end := t0.Add(time.Minute)
	b.Status, b.Ended, b.Record = "succeeded", &end, json.RawMessage(`{"v":2}`)
	if err := s.SaveBuild(ctx, b); err != nil {
		t.Fatal(err)
	}
	got, err = s.GetBuild(ctx, "a", "b-1")
	if err != nil || got.Status != "succeeded" || got.Ended == nil || !got.Ended.Equal(end) || string(got.Record) != `{"v":2}` {
		t.Errorf("after the end: %+v, %v", got, err)
	}
	// Refused rows.
	for name, bad := range map[string]*Build{
		"empty id":     buildRow("", "a", "running", t0, nil),
		"empty status": buildRow("x", "a", "", t0, nil),
		"bad record":   {ID: "x", Tenant: "a", Status: "running", Created: t0, Record: json.RawMessage(`{`)},
		"no record":    {ID: "x", Tenant: "a", Status: "running", Created: t0},
	} {
		if err := s.SaveBuild(ctx, bad); err == nil {
			t.Errorf("%s: saved", name)
		}
	}
	// Delete: the tenant's only.
	if err := s.DeleteBuild(ctx, "b", "b-1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("another tenant's delete: %v", err)
	}
	if err := s.DeleteBuild(ctx, "a", "b-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetBuild(ctx, "a", "b-1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("get after delete: %v", err)
	}
	if err := s.DeleteBuild(ctx, "a", "b-1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second delete: %v", err)
	}
}

func TestBuildListRunningExpired(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	ended := func(m int) *time.Time { e := at(m); return &e }
	for _, b := range []*Build{
		buildRow("a1", "a", "succeeded", at(1), ended(2)),
		buildRow("a2", "a", "running", at(2), nil),
		buildRow("a3", "a", "failed", at(3), ended(10)),
		buildRow("b1", "b", "running", at(0), nil),
		buildRow("b2", "b", "refused", at(4), ended(4)),
	} {
		if err := s.SaveBuild(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		tenant, status string
		limit          int
		want           []string
	}{
		{"a", "", 0, []string{"a3", "a2", "a1"}},
		{"a", "", 2, []string{"a3", "a2"}},
		{"a", "running", 0, []string{"a2"}},
		{"b", "", 0, []string{"b2", "b1"}},
		{"c", "", 0, []string{}},
	} {
		l, err := s.ListBuilds(ctx, tc.tenant, tc.status, tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		if got := buildIDs(l); !slices.Equal(got, tc.want) {
			t.Errorf("list(%q, %q, %d) = %v, want %v", tc.tenant, tc.status, tc.limit, got, tc.want)
		}
	}
	run, err := s.RunningBuilds(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := buildIDs(run); !slices.Equal(got, []string{"b1", "a2"}) {
		t.Errorf("running = %v", got)
	}
	for _, tc := range []struct {
		before int
		limit  int
		want   []string
	}{
		{0, 0, []string{}},
		{3, 0, []string{"a1"}},
		{5, 0, []string{"a1", "b2"}},
		{11, 0, []string{"a1", "b2", "a3"}},
		{11, 1, []string{"a1"}},
	} {
		l, err := s.ExpiredBuilds(ctx, at(tc.before), tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		if got := buildIDs(l); !slices.Equal(got, tc.want) {
			t.Errorf("expired before %d (limit %d) = %v, want %v", tc.before, tc.limit, got, tc.want)
		}
	}
}

// TestBuildMigration: a database of schema version 3 (before builds)
// gains the builds table and keeps its workflow runs.
func TestBuildMigration(t *testing.T) {
	ctx := context.Background()
	s, path := openTest(t)
	mustPutRun(t, s, wfRun("wf-1", "a", "running", t0))
	s.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	// A database of version 3: without builds, nor what later versions add.
	for _, q := range []string{`DROP TABLE builds`, `DROP TABLE agent_runs`, `DROP TABLE agent_events`, `PRAGMA user_version = 3`} {
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
	if err := s2.SaveBuild(ctx, buildRow("b-1", "a", "running", t0, nil)); err != nil {
		t.Error(err)
	}
}
