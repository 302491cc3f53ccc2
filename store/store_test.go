package store

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)

func openTest(t testing.TB) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "moat.db")
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func running(id, tenant string, created time.Time) *Sandbox {
	return &Sandbox{
		ID: id, Tenant: tenant, State: StateRunning,
		CreatedAt: created, LastActiveAt: created,
		TimeoutMs: 3600000, IdleTimeoutMs: 600000,
		Spec: json.RawMessage(`{"hostname":"h","limits":{"memory":1}}`),
	}
}

func mustPutSandbox(t testing.TB, s *Store, sb *Sandbox) {
	t.Helper()
	if err := s.PutSandbox(context.Background(), sb); err != nil {
		t.Fatalf("PutSandbox(%s): %v", sb.ID, err)
	}
}

func mustPutCall(t testing.TB, s *Store, c *Call) {
	t.Helper()
	if err := s.PutCall(context.Background(), c); err != nil {
		t.Fatalf("PutCall(%s): %v", c.ID, err)
	}
}

func userVersion(t *testing.T, path string) int {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v int
	if err := db.QueryRow("PRAGMA user_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestSandboxRoundTrip(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	local := time.FixedZone("X", 3600)
	sb := running("sb-1", "acme", t0.In(local))
	sb.LastActiveAt = t0.Add(time.Second)
	sb.Enforcement = json.RawMessage(`{"landlock":true}`)
	mustPutSandbox(t, s, sb)

	got, err := s.GetSandbox(ctx, "acme", "sb-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.CreatedAt.Location() != time.UTC || !got.CreatedAt.Equal(t0) || got.CreatedAt.Nanosecond() != 123456789 {
		t.Errorf("CreatedAt = %v, want %v in UTC", got.CreatedAt, t0)
	}
	if !got.LastActiveAt.Equal(t0.Add(time.Second)) || got.EndedAt != nil {
		t.Errorf("LastActiveAt %v EndedAt %v", got.LastActiveAt, got.EndedAt)
	}
	if got.State != StateRunning || got.EndReason != "" || got.TimeoutMs != 3600000 || got.IdleTimeoutMs != 600000 {
		t.Errorf("got %+v", got)
	}
	if string(got.Spec) != string(sb.Spec) || string(got.Enforcement) != `{"landlock":true}` {
		t.Errorf("Spec %s Enforcement %s", got.Spec, got.Enforcement)
	}

	// Zero LastActiveAt defaults to CreatedAt; nil JSON stays nil.
	sb2 := running("sb-2", "acme", t0)
	sb2.LastActiveAt = time.Time{}
	sb2.Spec = nil
	mustPutSandbox(t, s, sb2)
	got, err = s.GetSandbox(ctx, "acme", "sb-2")
	if err != nil {
		t.Fatal(err)
	}
	if !got.LastActiveAt.Equal(t0) || got.Spec != nil || got.Enforcement != nil {
		t.Errorf("got %+v", got)
	}

	// Replacing keeps the calls.
	mustPutCall(t, s, &Call{ID: "sb-1/1", Sandbox: "sb-1", Tenant: "acme", Kind: "exec", StartedAt: t0})
	sb.TimeoutMs = 5
	mustPutSandbox(t, s, sb)
	if got, err := s.GetSandbox(ctx, "acme", "sb-1"); err != nil || got.TimeoutMs != 5 {
		t.Fatalf("after replace: %+v, %v", got, err)
	}
	if calls, err := s.ListCalls(ctx, "acme", "sb-1", 0); err != nil || len(calls) != 1 {
		t.Fatalf("calls after replace: %v, %v", calls, err)
	}

	// Moving a sandbox to another tenant is refused.
	other := *sb
	other.Tenant = "evil"
	if err := s.PutSandbox(ctx, &other); err == nil {
		t.Fatal("PutSandbox moved a sandbox to another tenant")
	}
	if _, err := s.GetSandbox(ctx, "evil", "sb-1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetSandbox(evil) = %v", err)
	}
}

func TestEndSandbox(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	mustPutSandbox(t, s, running("sb-1", "acme", t0))

	if err := s.EndSandbox(ctx, "nope", "deleted", t0, t0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("EndSandbox(missing) = %v, want ErrNotFound", err)
	}
	end := t0.Add(time.Minute)
	if err := s.EndSandbox(ctx, "sb-1", "idle_timeout", t0.Add(time.Second), end); err != nil {
		t.Fatal(err)
	}
	// A second end keeps the first.
	if err := s.EndSandbox(ctx, "sb-1", "deleted", t0.Add(time.Hour), t0.Add(time.Hour)); err != nil {
		t.Fatalf("second EndSandbox: %v", err)
	}
	got, err := s.GetSandbox(ctx, "acme", "sb-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != StateStopped || got.EndReason != "idle_timeout" || got.EndedAt == nil ||
		!got.EndedAt.Equal(end) || !got.LastActiveAt.Equal(t0.Add(time.Second)) {
		t.Errorf("got %+v (ended %v)", got, got.EndedAt)
	}

	// Zero lastActive keeps the stored one.
	mustPutSandbox(t, s, running("sb-2", "acme", t0))
	if err := s.EndSandbox(ctx, "sb-2", "deleted", time.Time{}, end); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetSandbox(ctx, "acme", "sb-2"); !got.LastActiveAt.Equal(t0) {
		t.Errorf("LastActiveAt = %v, want %v", got.LastActiveAt, t0)
	}
}

func TestTenantIsolation(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	for i := range 6 {
		tenant := []string{"a", "b"}[i%2]
		mustPutSandbox(t, s, running(fmt.Sprintf("sb-%d", i), tenant, t0.Add(time.Duration(i)*time.Second)))
		mustPutCall(t, s, &Call{ID: fmt.Sprintf("sb-%d/1", i), Sandbox: fmt.Sprintf("sb-%d", i),
			Tenant: tenant, Kind: "exec", Args: []string{"true"}, StartedAt: t0})
	}
	if _, err := s.GetSandbox(ctx, "b", "sb-0"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetSandbox(wrong tenant) = %v, want ErrNotFound", err)
	}
	if _, err := s.GetSandbox(ctx, "", "sb-0"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetSandbox(empty tenant) = %v, want ErrNotFound", err)
	}
	if _, err := s.GetSandbox(ctx, "A", "sb-0"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetSandbox(tenant of other case) = %v, want ErrNotFound", err)
	}
	if _, err := s.GetCall(ctx, "b", "sb-0/1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetCall(wrong tenant) = %v, want ErrNotFound", err)
	}
	if c, err := s.GetCall(ctx, "a", "sb-0/1"); err != nil || c.Sandbox != "sb-0" {
		t.Errorf("GetCall = %+v, %v", c, err)
	}
	if calls, err := s.ListCalls(ctx, "b", "sb-0", 0); err != nil || len(calls) != 0 {
		t.Errorf("ListCalls(wrong tenant) = %v, %v", calls, err)
	}
	// A call cannot be put into another tenant's sandbox.
	err := s.PutCall(ctx, &Call{ID: "x/1", Sandbox: "sb-0", Tenant: "b", Kind: "exec", StartedAt: t0})
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("PutCall into another tenant's sandbox = %v, want ErrNotFound", err)
	}
	// Nor moved to another sandbox.
	err = s.PutCall(ctx, &Call{ID: "sb-0/1", Sandbox: "sb-2", Tenant: "a", Kind: "exec", StartedAt: t0})
	if err == nil || errors.Is(err, ErrNotFound) {
		t.Errorf("PutCall moving a call = %v, want an error other than ErrNotFound", err)
	}

	list, err := s.ListSandboxes(ctx, "a", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, sb := range list {
		ids = append(ids, sb.ID)
	}
	if want := []string{"sb-4", "sb-2", "sb-0"}; !slices.Equal(ids, want) {
		t.Errorf("ListSandboxes(a) = %v, want %v (newest first)", ids, want)
	}
	if list, _ := s.ListSandboxes(ctx, "c", "", 0); len(list) != 0 {
		t.Errorf("ListSandboxes(c) = %v", list)
	}
}

func TestListSandboxes(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	for i := range 30 {
		mustPutSandbox(t, s, running(fmt.Sprintf("sb-%02d", i), "a", t0.Add(time.Duration(i)*time.Second)))
		if i%3 == 0 {
			if err := s.EndSandbox(ctx, fmt.Sprintf("sb-%02d", i), "deleted", time.Time{}, t0.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
		}
	}
	count := func(state string, limit int) int {
		t.Helper()
		list, err := s.ListSandboxes(ctx, "a", state, limit)
		if err != nil {
			t.Fatal(err)
		}
		for i, sb := range list {
			if state != "" && sb.State != state {
				t.Errorf("state %q list has %s in %s", state, sb.ID, sb.State)
			}
			if i > 0 && sb.CreatedAt.After(list[i-1].CreatedAt) {
				t.Errorf("list not newest first at %d", i)
			}
		}
		return len(list)
	}
	if n := count("", 0); n != 30 {
		t.Errorf("any: %d", n)
	}
	if n := count(StateStopped, 0); n != 10 {
		t.Errorf("stopped: %d", n)
	}
	if n := count(StateRunning, 5); n != 5 {
		t.Errorf("running limit 5: %d", n)
	}
	if _, err := s.ListSandboxes(ctx, "a", "bogus", 0); err == nil {
		t.Error("unknown state accepted")
	}
	if clampLimit(0) != DefaultLimit || clampLimit(-3) != DefaultLimit || clampLimit(5000) != MaxLimit || clampLimit(7) != 7 {
		t.Error("clampLimit")
	}
}

func TestCalls(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	mustPutSandbox(t, s, running("sb-1", "a", t0))
	if err := s.PutCall(ctx, &Call{ID: "sb-9/1", Sandbox: "sb-9", Tenant: "a", Kind: "exec", StartedAt: t0}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("PutCall(no sandbox) = %v, want ErrNotFound", err)
	}
	// Started out of order: listed by start time.
	for _, i := range []int{3, 1, 2} {
		mustPutCall(t, s, &Call{ID: fmt.Sprintf("sb-1/%d", i), Sandbox: "sb-1", Tenant: "a", Kind: "exec",
			Args: []string{"echo", strconv.Itoa(i)}, StartedAt: t0.Add(time.Duration(i) * time.Millisecond)})
	}
	mustPutCall(t, s, &Call{ID: "sb-1/4", Sandbox: "sb-1", Tenant: "a", Kind: "start", StartedAt: t0.Add(time.Hour)})

	res := json.RawMessage(`{"exit_code":3,"stdout":"x"}`)
	if err := s.FinishCall(ctx, "sb-1/2", t0.Add(time.Second), 3, "exited", res); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishCall(ctx, "sb-1/99", t0, 0, "", nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("FinishCall(missing) = %v, want ErrNotFound", err)
	}
	c, err := s.GetCall(ctx, "a", "sb-1/2")
	if err != nil {
		t.Fatal(err)
	}
	if c.ExitCode == nil || *c.ExitCode != 3 || c.ExitReason != "exited" || string(c.Result) != string(res) ||
		c.EndedAt == nil || !c.EndedAt.Equal(t0.Add(time.Second)) || c.EndedAt.Location() != time.UTC ||
		!slices.Equal(c.Args, []string{"echo", "2"}) || c.Kind != "exec" || c.Tenant != "a" {
		t.Errorf("got %+v", c)
	}
	c, err = s.GetCall(ctx, "a", "sb-1/4")
	if err != nil {
		t.Fatal(err)
	}
	if c.Args != nil || c.ExitCode != nil || c.EndedAt != nil || c.Result != nil || c.Kind != "start" {
		t.Errorf("got %+v", c)
	}

	calls, err := s.ListCalls(ctx, "a", "sb-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range calls {
		ids = append(ids, c.ID)
	}
	if want := []string{"sb-1/1", "sb-1/2", "sb-1/3", "sb-1/4"}; !slices.Equal(ids, want) {
		t.Errorf("ListCalls = %v, want %v", ids, want)
	}
	if calls, _ := s.ListCalls(ctx, "a", "sb-1", 2); len(calls) != 2 || calls[0].ID != "sb-1/1" {
		t.Errorf("ListCalls limit 2 = %v", calls)
	}

	// Put replaces.
	code := 0
	mustPutCall(t, s, &Call{ID: "sb-1/1", Sandbox: "sb-1", Tenant: "a", Kind: "exec", StartedAt: t0,
		EndedAt: &t0, ExitCode: &code, ExitReason: "exited"})
	if c, _ := s.GetCall(ctx, "a", "sb-1/1"); c.ExitCode == nil || *c.ExitCode != 0 || c.Args != nil {
		t.Errorf("after replace: %+v", c)
	}
}

func TestReconcile(t *testing.T) {
	s, path := openTest(t)
	ctx := context.Background()
	for i := range 4 {
		mustPutSandbox(t, s, running(fmt.Sprintf("sb-%d", i), "a", t0))
		mustPutCall(t, s, &Call{ID: fmt.Sprintf("sb-%d/1", i), Sandbox: fmt.Sprintf("sb-%d", i), Tenant: "a",
			Kind: "exec", StartedAt: t0})
	}
	if err := s.EndSandbox(ctx, "sb-0", "deleted", t0, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishCall(ctx, "sb-0/1", t0.Add(time.Second), 0, "exited", nil); err != nil {
		t.Fatal(err)
	}
	// As after a crash: the running rows are there when the store is reopened.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	at := t0.Add(time.Hour)
	lost, err := s.ReconcileRunning(ctx, at)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, l := range lost {
		ids = append(ids, l.ID)
	}
	slices.Sort(ids)
	if want := []string{"sb-1", "sb-2", "sb-3"}; !slices.Equal(ids, want) {
		t.Errorf("ReconcileRunning = %v, want %v", ids, want)
	}
	n, err := s.ReconcileCalls(ctx, at)
	if err != nil || n != 3 {
		t.Errorf("ReconcileCalls = %d, %v; want 3", n, err)
	}
	for _, id := range ids {
		sb, err := s.GetSandbox(ctx, "a", id)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State != StateStopped || sb.EndReason != ReasonLost || sb.EndedAt == nil || !sb.EndedAt.Equal(at) {
			t.Errorf("%s: %+v", id, sb)
		}
		c, err := s.GetCall(ctx, "a", id+"/1")
		if err != nil {
			t.Fatal(err)
		}
		if c.EndedAt == nil || !c.EndedAt.Equal(at) || c.ExitReason != ReasonLost || c.ExitCode != nil {
			t.Errorf("%s/1: %+v", id, c)
		}
	}
	if sb, _ := s.GetSandbox(ctx, "a", "sb-0"); sb.EndReason != "deleted" {
		t.Errorf("stopped sandbox changed: %+v", sb)
	}
	if c, _ := s.GetCall(ctx, "a", "sb-0/1"); c.ExitReason != "exited" || c.ExitCode == nil {
		t.Errorf("finished call changed: %+v", c)
	}
	// Nothing left to reconcile.
	if ids, err := s.ReconcileRunning(ctx, at); err != nil || len(ids) != 0 {
		t.Errorf("second ReconcileRunning = %v, %v", ids, err)
	}
	if n, err := s.ReconcileCalls(ctx, at); err != nil || n != 0 {
		t.Errorf("second ReconcileCalls = %d, %v", n, err)
	}
}

func TestPruneStopped(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	for i := range 10 {
		id := fmt.Sprintf("sb-%d", i)
		mustPutSandbox(t, s, running(id, "a", t0))
		for j := range 3 {
			mustPutCall(t, s, &Call{ID: fmt.Sprintf("%s/%d", id, j), Sandbox: id, Tenant: "a", Kind: "exec", StartedAt: t0})
		}
		if i < 8 { // sb-8, sb-9 keep running
			if err := s.EndSandbox(ctx, id, "deleted", time.Time{}, t0.Add(time.Duration(i)*time.Minute)); err != nil {
				t.Fatal(err)
			}
		}
	}
	cutoff := t0.Add(7 * time.Minute) // sb-0..sb-6 ended before it
	if n, err := s.PruneStopped(ctx, cutoff, 0); err != nil || n != 0 {
		t.Fatalf("PruneStopped(max 0) = %d, %v", n, err)
	}
	var got []int
	for {
		n, err := s.PruneStopped(ctx, cutoff, 3)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, n)
		if n < 3 {
			break
		}
	}
	if want := []int{3, 3, 1}; !slices.Equal(got, want) {
		t.Errorf("batches = %v, want %v", got, want)
	}
	list, err := s.ListSandboxes(ctx, "a", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, sb := range list {
		ids = append(ids, sb.ID)
	}
	slices.Sort(ids)
	if want := []string{"sb-7", "sb-8", "sb-9"}; !slices.Equal(ids, want) {
		t.Errorf("left %v, want %v", ids, want)
	}
	// The pruned sandboxes' calls went with them.
	if _, err := s.GetCall(ctx, "a", "sb-0/0"); !errors.Is(err, ErrNotFound) {
		t.Errorf("call of pruned sandbox: %v", err)
	}
	var calls int
	if err := s.r.QueryRow("SELECT count(*) FROM calls").Scan(&calls); err != nil || calls != 9 {
		t.Errorf("calls left = %d, %v; want 9", calls, err)
	}
}

func TestBadInput(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	mustPutSandbox(t, s, running("sb-1", "a", t0))
	good := func() *Sandbox { return running("sb-x", "a", t0) }
	for name, sb := range map[string]*Sandbox{
		"nil":              nil,
		"empty id":         func() *Sandbox { sb := good(); sb.ID = ""; return sb }(),
		"bad state":        func() *Sandbox { sb := good(); sb.State = "paused"; return sb }(),
		"zero created":     func() *Sandbox { sb := good(); sb.CreatedAt = time.Time{}; return sb }(),
		"created too late": func() *Sandbox { sb := good(); sb.CreatedAt = time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC); return sb }(),
		"bad spec":         func() *Sandbox { sb := good(); sb.Spec = json.RawMessage(`{"a":`); return sb }(),
		"bad enforcement":  func() *Sandbox { sb := good(); sb.Enforcement = json.RawMessage(`nope`); return sb }(),
		"running w/ end":   func() *Sandbox { sb := good(); sb.EndedAt = &t0; return sb }(),
		"stopped w/o end":  func() *Sandbox { sb := good(); sb.State = StateStopped; sb.EndReason = "deleted"; return sb }(),
	} {
		if err := s.PutSandbox(ctx, sb); err == nil {
			t.Errorf("PutSandbox(%s) accepted", name)
		}
	}
	goodCall := func() *Call { return &Call{ID: "sb-1/1", Sandbox: "sb-1", Tenant: "a", Kind: "exec", StartedAt: t0} }
	for name, c := range map[string]*Call{
		"nil":           nil,
		"empty id":      func() *Call { c := goodCall(); c.ID = ""; return c }(),
		"empty sandbox": func() *Call { c := goodCall(); c.Sandbox = ""; return c }(),
		"empty kind":    func() *Call { c := goodCall(); c.Kind = ""; return c }(),
		"zero start":    func() *Call { c := goodCall(); c.StartedAt = time.Time{}; return c }(),
		"bad result":    func() *Call { c := goodCall(); c.Result = json.RawMessage(`[`); return c }(),
	} {
		if err := s.PutCall(ctx, c); err == nil {
			t.Errorf("PutCall(%s) accepted", name)
		}
	}
	if err := s.EndSandbox(ctx, "", "deleted", t0, t0); err == nil || errors.Is(err, ErrNotFound) {
		t.Errorf("EndSandbox(empty id) = %v", err)
	}
	if err := s.EndSandbox(ctx, "sb-1", "", t0, t0); err == nil {
		t.Error("EndSandbox(empty reason) accepted")
	}
	if err := s.EndSandbox(ctx, "sb-1", "deleted", t0, time.Time{}); err == nil {
		t.Error("EndSandbox(zero time) accepted")
	}
	if _, err := s.GetSandbox(ctx, "a", ""); err == nil {
		t.Error("GetSandbox(empty id) accepted")
	}
	mustPutCall(t, s, goodCall())
	if err := s.FinishCall(ctx, "", t0, 0, "", nil); err == nil {
		t.Error("FinishCall(empty id) accepted")
	}
	if err := s.FinishCall(ctx, "sb-1/1", t0, 0, "", json.RawMessage(`{`)); err == nil {
		t.Error("FinishCall(bad result) accepted")
	}
	if _, err := s.GetCall(ctx, "a", ""); err == nil {
		t.Error("GetCall(empty id) accepted")
	}
	if _, err := s.ListCalls(ctx, "a", "", 0); err == nil {
		t.Error("ListCalls(empty sandbox) accepted")
	}
	if _, err := s.ReconcileRunning(ctx, time.Time{}); err == nil {
		t.Error("ReconcileRunning(zero time) accepted")
	}
	if _, err := s.PruneStopped(ctx, time.Time{}, 1); err == nil {
		t.Error("PruneStopped(zero time) accepted")
	}
	// Nothing of the above got in.
	if list, _ := s.ListSandboxes(ctx, "a", "", 0); len(list) != 1 {
		t.Errorf("sandboxes = %v", list)
	}
	if _, err := Open(ctx, ""); err == nil {
		t.Error("Open(\"\") accepted")
	}
}

func TestMigrations(t *testing.T) {
	ctx := context.Background()
	s, path := openTest(t)
	if v := userVersion(t, path); v != SchemaVersion || SchemaVersion < 1 {
		t.Fatalf("user_version = %d, want %d", v, SchemaVersion)
	}
	mustPutSandbox(t, s, running("sb-1", "a", t0))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// Reopening applies nothing and keeps the data.
	for range 2 {
		s, err := Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetSandbox(ctx, "a", "sb-1"); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if v := userVersion(t, path); v != SchemaVersion {
		t.Fatalf("user_version after reopen = %d", v)
	}
	// The pragmas are in force on the writer and the readers.
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, db := range []*sql.DB{s.w, s.r} {
		for pragma, want := range map[string]string{
			"journal_mode": "wal", "synchronous": "2", "busy_timeout": "5000", "foreign_keys": "1",
		} {
			var got string
			if err := db.QueryRow("PRAGMA " + pragma).Scan(&got); err != nil || got != want {
				t.Errorf("%s = %q, %v; want %q", pragma, got, err, want)
			}
		}
	}
}

func TestRefuseNewerSchema(t *testing.T) {
	ctx := context.Background()
	s, path := openTest(t)
	mustPutSandbox(t, s, running("sb-1", "a", t0))
	s.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(fmt.Sprintf("PRAGMA user_version = %d", SchemaVersion+1)); err != nil {
		t.Fatal(err)
	}
	db.Close()
	_, err = Open(ctx, path)
	if !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("Open(newer schema) = %v, want ErrSchemaTooNew", err)
	}
	if !strings.Contains(err.Error(), strconv.Itoa(SchemaVersion+1)) {
		t.Errorf("error does not name the version: %v", err)
	}
	if v := userVersion(t, path); v != SchemaVersion+1 {
		t.Errorf("user_version changed to %d", v)
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if _, err := Open(ctx, filepath.Join(dir, "missing", "moat.db")); err == nil {
		t.Error("Open in a missing directory succeeded")
	}
	junk := filepath.Join(dir, "junk.db")
	if err := os.WriteFile(junk, []byte(strings.Repeat("not a database ", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, junk); err == nil {
		t.Error("Open of a non-database succeeded")
	}
}

// TestOddPath opens a database whose path has characters that mean
// something in a URI, and a relative path.
func TestOddPath(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "a b?c#d%20e&f=g")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "moat?.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	mustPutSandbox(t, s, running("sb-1", "a", t0))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "moat?.db" {
		t.Fatalf("directory holds %v, want just moat?.db", entries)
	}
	t.Chdir(dir)
	s, err = Open(ctx, "moat?.db")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.GetSandbox(ctx, "a", "sb-1"); err != nil {
		t.Fatal(err)
	}
}

func TestFileMode(t *testing.T) {
	s, path := openTest(t)
	mustPutSandbox(t, s, running("sb-1", "a", t0)) // makes the -wal file
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if mode := fi.Mode().Perm(); mode != 0o600 {
			t.Errorf("%s: mode %o, want 600", filepath.Base(p), mode)
		}
	}
}

// TestConcurrentWriters runs PutCall/FinishCall from 50 goroutines at once,
// with readers alongside: none may fail (no SQLITE_BUSY).
func TestConcurrentWriters(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	const workers, each = 50, 10
	for w := range workers {
		mustPutSandbox(t, s, running(fmt.Sprintf("sb-%d", w), "a", t0))
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers*each*2+100)
	for w := range workers {
		wg.Go(func() {
			sb := fmt.Sprintf("sb-%d", w)
			for i := range each {
				id := fmt.Sprintf("%s/%d", sb, i)
				if err := s.PutCall(ctx, &Call{ID: id, Sandbox: sb, Tenant: "a", Kind: "exec",
					Args: []string{"echo", id}, StartedAt: t0}); err != nil {
					errs <- err
					return
				}
				if err := s.FinishCall(ctx, id, t0.Add(time.Millisecond), 0, "exited", json.RawMessage(`{"ok":true}`)); err != nil {
					errs <- err
					return
				}
			}
			if err := s.EndSandbox(ctx, sb, "deleted", time.Time{}, t0.Add(time.Second)); err != nil {
				errs <- err
			}
		})
	}
	for range 4 {
		wg.Go(func() {
			for range 20 {
				if _, err := s.ListSandboxes(ctx, "a", "", 0); err != nil {
					errs <- err
					return
				}
				if _, err := s.ListCalls(ctx, "a", "sb-0", 0); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var n int
	if err := s.r.QueryRow("SELECT count(*) FROM calls WHERE ended_at IS NOT NULL").Scan(&n); err != nil || n != workers*each {
		t.Errorf("finished calls = %d, %v; want %d", n, err, workers*each)
	}
	if list, _ := s.ListSandboxes(ctx, "a", StateStopped, 0); len(list) != workers {
		t.Errorf("stopped sandboxes = %d", len(list))
	}
}

const helperEnv = "MOAT_STORE_TEST_HELPER_DB"

// TestHelperProcess is not a test: run by TestKill9Durability as a child
// process (with helperEnv naming the database), it writes calls forever,
// printing "committed N" on stdout after the writes for N returned nil,
// until it is killed.
func TestHelperProcess(t *testing.T) {
	path := os.Getenv(helperEnv)
	if path == "" {
		t.Skip("helper process for TestKill9Durability")
	}
	ctx := context.Background()
	s, err := Open(ctx, path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if err := s.PutSandbox(ctx, running("sb-1", "a", t0)); err != nil {
		fail(err)
	}
	deadline := time.Now().Add(30 * time.Second) // in case the parent died
	for i := 0; time.Now().Before(deadline); i++ {
		id := "sb-1/" + strconv.Itoa(i)
		if err := s.PutCall(ctx, &Call{ID: id, Sandbox: "sb-1", Tenant: "a", Kind: "exec",
			Args: []string{"n", strconv.Itoa(i)}, StartedAt: t0}); err != nil {
			fail(err)
		}
		if err := s.FinishCall(ctx, id, t0.Add(time.Second), i%256, "exited", json.RawMessage(`{"i":`+strconv.Itoa(i)+`}`)); err != nil {
			fail(err)
		}
		if i%10 == 9 {
			sb := running("sb-x"+strconv.Itoa(i), "a", t0)
			if err := s.PutSandbox(ctx, sb); err != nil {
				fail(err)
			}
		}
		// os.Stdout is unbuffered: the line is out when Fprintf returns.
		if _, err := fmt.Fprintf(os.Stdout, "committed %d\n", i); err != nil {
			fail(err)
		}
	}
	os.Exit(3)
}

// TestKill9Durability proves that what a Store acknowledged survives kill -9:
// a child process writes and acknowledges records one by one, the parent
// kills it with SIGKILL after it has acknowledged some, and every
// acknowledged record is in the database when it is reopened.
func TestKill9Durability(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("in the helper")
	}
	ctx := context.Background()
	for round, killAfter := range []int{1, 40, 150} {
		path := filepath.Join(t.TempDir(), "moat.db")
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), helperEnv+"="+path)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		acked := -1
		sc := bufio.NewScanner(out)
		killed := false
		for sc.Scan() {
			n, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), "committed "))
			if err != nil {
				t.Fatalf("round %d: child said %q", round, sc.Text())
			}
			acked = n
			if !killed && n+1 >= killAfter {
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				killed = true
				// Keep reading: lines the child wrote before it died
				// were acknowledged too.
			}
		}
		err = cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: child ended with %v, not SIGKILL; stderr: %s", round, err, stderr.String())
		}
		if acked+1 < killAfter {
			t.Fatalf("round %d: child acknowledged %d records before dying", round, acked+1)
		}

		s, err := Open(ctx, path)
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		for i := 0; i <= acked; i++ {
			c, err := s.GetCall(ctx, "a", "sb-1/"+strconv.Itoa(i))
			if err != nil {
				t.Fatalf("round %d: acknowledged call %d lost: %v", round, i, err)
			}
			if c.EndedAt == nil || c.ExitCode == nil || *c.ExitCode != i%256 || string(c.Result) != `{"i":`+strconv.Itoa(i)+`}` {
				t.Fatalf("round %d: call %d: %+v", round, i, c)
			}
			if i%10 == 9 {
				if _, err := s.GetSandbox(ctx, "a", "sb-x"+strconv.Itoa(i)); err != nil {
					t.Fatalf("round %d: acknowledged sandbox %d lost: %v", round, i, err)
				}
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: %d acknowledged calls survived SIGKILL", round, acked+1)
	}
}

// BenchmarkCallPair measures one PutCall+FinishCall pair, as the daemon
// runs for every call (two commits, each fsynced).
func BenchmarkCallPair(b *testing.B) {
	s, _ := openTest(b)
	ctx := context.Background()
	mustPutSandbox(b, s, running("sb-1", "a", t0))
	result := json.RawMessage(`{"exit_code":0,"stdout":"hello\n","stderr":"","duration_ms":3}`)
	args := []string{"sh", "-c", "echo hello"}
	i := 0
	for b.Loop() {
		id := "sb-1/" + strconv.Itoa(i)
		i++
		if err := s.PutCall(ctx, &Call{ID: id, Sandbox: "sb-1", Tenant: "a", Kind: "exec", Args: args, StartedAt: t0}); err != nil {
			b.Fatal(err)
		}
		if err := s.FinishCall(ctx, id, t0, 0, "exited", result); err != nil {
			b.Fatal(err)
		}
	}
}
