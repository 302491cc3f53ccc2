package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
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

// fakeClock returns a clock starting at a fixed time and advancing by one
// second per call.
func fakeClock() func() time.Time {
	var mu sync.Mutex
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(time.Second)
		return now
	}
}

func openTape(t testing.TB, dir string, opts ...Option) *Tape {
	t.Helper()
	tp, err := Open(dir, opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { tp.Close() })
	return tp
}

func mustAppend(t testing.TB, tp *Tape, e Event) Event {
	t.Helper()
	got, err := tp.Append(e)
	if err != nil {
		t.Fatalf("Append(%+v): %v", e, err)
	}
	return got
}

func mustQuery(t testing.TB, tp *Tape, q Query) []Event {
	t.Helper()
	evs, err := tp.Query(context.Background(), q)
	if err != nil {
		t.Fatalf("Query(%+v): %v", q, err)
	}
	return evs
}

func seqs(evs []Event) []uint64 {
	out := make([]uint64, len(evs))
	for i, e := range evs {
		out[i] = e.Seq
	}
	return out
}

func seqRangeList(from, to uint64) []uint64 {
	var out []uint64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

// queryAll pages through every event matching q.
func queryAll(t testing.TB, tp *Tape, q Query) []Event {
	t.Helper()
	var all []Event
	for {
		p, err := tp.QueryPage(context.Background(), q)
		if err != nil {
			t.Fatalf("QueryPage: %v", err)
		}
		all = append(all, p.Events...)
		if !p.More {
			return all
		}
		q.AfterSeq = p.Events[len(p.Events)-1].Seq
	}
}

// checkJSONL verifies that every file of the tape is valid JSONL and
// returns the sequence numbers found, in file order (rotated files first).
func checkJSONL(t testing.TB, dir string) []uint64 {
	t.Helper()
	segs, err := listSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range segs {
		names = append(names, s.name)
	}
	names = append(names, currentName)
	var out []uint64
	for _, name := range names {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if len(data) > 0 && data[len(data)-1] != '\n' {
			t.Fatalf("%s does not end with a newline", name)
		}
		for i, line := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
			if len(data) == 0 {
				break
			}
			e, ok := parseEvent(line)
			if !ok {
				t.Fatalf("%s line %d is not a valid event: %q", name, i+1, line)
			}
			out = append(out, e.Seq)
		}
	}
	return out
}

func TestAppendQueryRoundTrip(t *testing.T) {
	dir := t.TempDir()
	clock := fakeClock()
	tp := openTape(t, dir, WithClock(clock))

	req := json.RawMessage(`{"argv":["ls","-l"],"cwd":"/work"}`)
	res := json.RawMessage(`{"exit_code":0}`)
	first := mustAppend(t, tp, Event{
		Tenant: "acme", Actor: "tok_1", Sandbox: "sb1", Call: "c1",
		Kind: "process.exec", Decision: DecisionAllow, Rule: "Exec(ls *)",
		Request: req, Result: res, DurationMs: 12, Error: "",
	})
	if first.Seq != 1 {
		t.Fatalf("first Seq = %d, want 1", first.Seq)
	}
	if first.Time.IsZero() || first.Time.Location() != time.UTC {
		t.Fatalf("Time not assigned in UTC: %v", first.Time)
	}
	fixed := time.Date(2020, 5, 6, 7, 8, 9, 123456789, time.UTC)
	second := mustAppend(t, tp, Event{Tenant: "acme", Actor: "cli", Sandbox: "sb2", Kind: "sandbox.create", Time: fixed, Seq: 999})
	if second.Seq != 2 || !second.Time.Equal(fixed) {
		t.Fatalf("second = seq %d time %v; want 2 and the given time", second.Seq, second.Time)
	}
	mustAppend(t, tp, Event{Tenant: "acme", Actor: "tok_1", Sandbox: "sb1", Kind: "process.exit", Result: json.RawMessage(`{"exit_code": 1}`), Error: "boom <&>"})
	mustAppend(t, tp, Event{Tenant: "acme", Actor: "tok_2", Sandbox: "sb1", Kind: "policy.decision", Decision: DecisionDeny, Rule: "Read(~/.ssh/**)"})
	mustAppend(t, tp, Event{Tenant: "other", Actor: "tok_9", Sandbox: "sb1", Kind: "process.exec", Decision: DecisionAsk})

	all := mustQuery(t, tp, Query{})
	if got := seqs(all); !slices.Equal(got, []uint64{1, 2, 3, 4, 5}) {
		t.Fatalf("all seqs = %v", got)
	}
	// Round trip of every field.
	got := all[0]
	if got.Tenant != "acme" || got.Actor != "tok_1" || got.Sandbox != "sb1" || got.Call != "c1" ||
		got.Kind != "process.exec" || got.Decision != "allow" || got.Rule != "Exec(ls *)" ||
		got.DurationMs != 12 || !got.Time.Equal(first.Time) {
		t.Fatalf("round trip mismatch: %+v", got)
	}
	if string(got.Request) != string(req) || string(got.Result) != string(res) {
		t.Fatalf("raw fields: %s %s", got.Request, got.Result)
	}
	if all[2].Error != "boom <&>" || string(all[2].Result) != `{"exit_code":1}` {
		t.Fatalf("event 3: %+v", all[2])
	}
	if !all[1].Time.Equal(fixed) {
		t.Fatalf("given time not kept: %v", all[1].Time)
	}

	cases := []struct {
		name string
		q    Query
		want []uint64
	}{
		{"tenant", Query{Tenant: "acme"}, []uint64{1, 2, 3, 4}},
		{"sandbox", Query{Sandbox: "sb1"}, []uint64{1, 3, 4, 5}},
		{"kind prefix", Query{Kind: "process."}, []uint64{1, 3, 5}},
		{"kind exact", Query{Kind: "process.exit"}, []uint64{3}},
		{"actor", Query{Actor: "tok_1"}, []uint64{1, 3}},
		{"call", Query{Call: "c1"}, []uint64{1}},
		{"decision", Query{Decision: DecisionDeny}, []uint64{4}},
		{"combined", Query{Tenant: "acme", Sandbox: "sb1", Kind: "process"}, []uint64{1, 3}},
		{"since", Query{Since: first.Time.Add(time.Second)}, []uint64{3, 4, 5}},
		{"until", Query{Until: first.Time.Add(time.Second)}, []uint64{1, 2}},
		{"since until", Query{Since: first.Time, Until: first.Time.Add(2 * time.Second)}, []uint64{1, 3}},
		{"after", Query{AfterSeq: 3}, []uint64{4, 5}},
		{"before", Query{BeforeSeq: 3}, []uint64{1, 2}},
		{"limit", Query{Limit: 2}, []uint64{1, 2}},
		{"newest", Query{Limit: 2, Newest: true}, []uint64{4, 5}},
		{"newest before", Query{Limit: 2, Newest: true, BeforeSeq: 4}, []uint64{2, 3}},
		{"none", Query{Tenant: "nobody"}, []uint64{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := seqs(mustQuery(t, tp, c.q)); !slices.Equal(got, c.want) {
				t.Fatalf("seqs = %v, want %v", got, c.want)
			}
		})
	}

	// Paging forward and backward.
	var paged []uint64
	q := Query{Limit: 2}
	for {
		p, err := tp.QueryPage(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		paged = append(paged, seqs(p.Events)...)
		if !p.More {
			break
		}
		q.AfterSeq = p.Events[len(p.Events)-1].Seq
	}
	if !slices.Equal(paged, []uint64{1, 2, 3, 4, 5}) {
		t.Fatalf("forward paging = %v", paged)
	}
	var back []uint64
	q = Query{Limit: 2, Newest: true}
	for {
		p, err := tp.QueryPage(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		back = append(seqs(p.Events), back...)
		if !p.More {
			break
		}
		q.BeforeSeq = p.Events[0].Seq
	}
	if !slices.Equal(back, []uint64{1, 2, 3, 4, 5}) {
		t.Fatalf("backward paging = %v", back)
	}

	// An empty result is an empty slice (encodes as []), not nil.
	if evs := mustQuery(t, tp, Query{Kind: "zzz"}); evs == nil {
		t.Fatal("empty result is nil")
	}
	// The current file contains the expected JSON, HTML not escaped.
	data, err := os.ReadFile(filepath.Join(dir, currentName))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte(`{"seq":1,"time":`)) || !bytes.Contains(data, []byte(`"boom <&>"`)) {
		t.Fatalf("unexpected file content:\n%s", data)
	}
}

func TestLimitDefaultsAndMax(t *testing.T) {
	tp := openTape(t, t.TempDir(), WithClock(fakeClock()))
	for i := 0; i < MaxLimit+5; i++ {
		mustAppend(t, tp, Event{Tenant: "t", Kind: "k"})
	}
	if n := len(mustQuery(t, tp, Query{})); n != DefaultLimit {
		t.Fatalf("default limit returned %d", n)
	}
	if n := len(mustQuery(t, tp, Query{Limit: -3})); n != DefaultLimit {
		t.Fatalf("negative limit returned %d", n)
	}
	p, err := tp.QueryPage(context.Background(), Query{Limit: 5000})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Events) != MaxLimit || !p.More {
		t.Fatalf("limit above max returned %d events, more=%v", len(p.Events), p.More)
	}
	p, err = tp.QueryPage(context.Background(), Query{Limit: 5000, AfterSeq: MaxLimit})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Events) != 5 || p.More {
		t.Fatalf("last page: %d events, more=%v", len(p.Events), p.More)
	}
}

func TestConcurrentAppend(t *testing.T) {
	dir := t.TempDir()
	tp := openTape(t, dir)
	const workers, each = 16, 25
	var wg sync.WaitGroup
	results := make([][]uint64, workers)
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last uint64
			for i := 0; i < each; i++ {
				e, err := tp.Append(Event{Tenant: "t", Actor: fmt.Sprintf("w%d", w), Kind: "process.exec", Call: strconv.Itoa(i)})
				if err != nil {
					errs <- err
					return
				}
				if e.Seq <= last {
					errs <- fmt.Errorf("worker %d: seq %d after %d", w, e.Seq, last)
					return
				}
				last = e.Seq
				results[w] = append(results[w], e.Seq)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var all []uint64
	for _, r := range results {
		all = append(all, r...)
	}
	slices.Sort(all)
	if want := seqRangeList(1, workers*each); !slices.Equal(all, want) {
		t.Fatalf("seqs are not 1..%d without gaps or duplicates", workers*each)
	}
	onDisk := checkJSONL(t, dir)
	if want := seqRangeList(1, workers*each); !slices.Equal(onDisk, want) {
		t.Fatalf("file has %d lines, not one per event in order", len(onDisk))
	}
	// Per-worker order is kept in the tape.
	got := queryAll(t, tp, Query{Actor: "w3"})
	for i, e := range got {
		if e.Call != strconv.Itoa(i) {
			t.Fatalf("worker 3 event %d has call %q", i, e.Call)
		}
	}
	if tp.LastSeq() != workers*each {
		t.Fatalf("LastSeq = %d", tp.LastSeq())
	}
}

func TestRotation(t *testing.T) {
	dir := t.TempDir()
	const maxFiles = 3
	opts := []Option{WithMaxFileBytes(1000), WithMaxFiles(maxFiles), WithClock(fakeClock())}
	tp := openTape(t, dir, opts...)
	const n = 200
	for i := 1; i <= n; i++ {
		mustAppend(t, tp, Event{Tenant: "t", Actor: "a", Kind: "process.exec", Call: strconv.Itoa(i)})
	}
	segs, err := listSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) != maxFiles {
		t.Fatalf("%d rotated files, want %d", len(segs), maxFiles)
	}
	ents, _ := os.ReadDir(dir)
	for _, de := range ents {
		if de.Name() == currentName || de.Name() == lockName {
			continue
		}
		if _, ok := parseSegmentName(de.Name()); !ok {
			t.Fatalf("unexpected file %s", de.Name())
		}
	}
	for _, s := range segs {
		st, err := os.Stat(filepath.Join(dir, s.name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > 1000 {
			t.Fatalf("%s is %d bytes, over the limit", s.name, st.Size())
		}
		if st.Mode().Perm() != 0o600 {
			t.Fatalf("%s mode %v", s.name, st.Mode().Perm())
		}
	}
	// The retained files hold a contiguous run ending at n, in order, and
	// their names match their content.
	onDisk := checkJSONL(t, dir)
	if len(onDisk) == 0 || onDisk[len(onDisk)-1] != n {
		t.Fatalf("retained seqs end at %v", onDisk)
	}
	if want := seqRangeList(onDisk[0], n); !slices.Equal(onDisk, want) {
		t.Fatalf("retained seqs not contiguous: %v", onDisk)
	}
	if segs[0].first != onDisk[0] {
		t.Fatalf("oldest segment named from %d but starts at %d", segs[0].first, onDisk[0])
	}
	for i := 1; i < len(segs); i++ {
		if segs[i].first != segs[i-1].last+1 {
			t.Fatalf("segments not contiguous: %+v", segs)
		}
	}

	// Queries span the rotated files, in order, with paging.
	got := queryAll(t, tp, Query{Limit: 7})
	if !slices.Equal(seqs(got), onDisk) {
		t.Fatalf("query across files = %v, want %v", seqs(got), onDisk)
	}
	mid := segs[1].first + 2
	got = mustQuery(t, tp, Query{AfterSeq: mid, Limit: 3})
	if !slices.Equal(seqs(got), []uint64{mid + 1, mid + 2, mid + 3}) {
		t.Fatalf("after %d = %v", mid, seqs(got))
	}
	got = mustQuery(t, tp, Query{Newest: true, Limit: 4})
	if !slices.Equal(seqs(got), []uint64{n - 3, n - 2, n - 1, n}) {
		t.Fatalf("newest = %v", seqs(got))
	}
	// A boundary-straddling newest page.
	b := segs[2].first
	got = mustQuery(t, tp, Query{Newest: true, BeforeSeq: b + 2, Limit: 4})
	if !slices.Equal(seqs(got), []uint64{b - 2, b - 1, b, b + 1}) {
		t.Fatalf("newest before %d = %v", b+2, seqs(got))
	}

	// Reopening keeps the limits and the sequence.
	tp.Close()
	tp2 := openTape(t, dir, opts...)
	if e := mustAppend(t, tp2, Event{Kind: "x"}); e.Seq != n+1 {
		t.Fatalf("seq after reopen = %d", e.Seq)
	}
	// Lowering MaxFiles prunes on open.
	tp2.Close()
	tp3 := openTape(t, dir, WithMaxFiles(1))
	segs, _ = listSegments(dir)
	if len(segs) != 1 {
		t.Fatalf("%d rotated files after reopening with max 1", len(segs))
	}
	if e := mustAppend(t, tp3, Event{Kind: "x"}); e.Seq != n+2 {
		t.Fatalf("seq after prune = %d", e.Seq)
	}
}

func TestReopenContinuesSeq(t *testing.T) {
	dir := t.TempDir()
	tp := openTape(t, dir)
	for i := 0; i < 5; i++ {
		mustAppend(t, tp, Event{Kind: "k"})
	}
	if err := tp.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tp.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := tp.Append(Event{Kind: "k"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close: %v", err)
	}
	if _, err := tp.Query(context.Background(), Query{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Query after Close: %v", err)
	}

	tp = openTape(t, dir)
	if tp.LastSeq() != 5 {
		t.Fatalf("LastSeq after reopen = %d", tp.LastSeq())
	}
	if e := mustAppend(t, tp, Event{Kind: "k"}); e.Seq != 6 {
		t.Fatalf("seq after reopen = %d", e.Seq)
	}
	tp.Close()

	// Right after a rotation the current file is empty: the sequence comes
	// from the rotated file names.
	dir2 := t.TempDir()
	tp = openTape(t, dir2, WithMaxFileBytes(1))
	for i := 0; i < 3; i++ {
		mustAppend(t, tp, Event{Kind: "k"})
	}
	tp.Close()
	if err := os.Truncate(filepath.Join(dir2, currentName), 0); err != nil {
		t.Fatal(err)
	}
	tp = openTape(t, dir2, WithMaxFileBytes(1))
	if e := mustAppend(t, tp, Event{Kind: "k"}); e.Seq != 3 {
		// The third event was in the (now emptied) current file; the
		// rotated ones hold 1 and 2.
		t.Fatalf("seq after reopen with empty current file = %d, want 3", e.Seq)
	}
}

func TestOpenLocksDirectory(t *testing.T) {
	dir := t.TempDir()
	tp := openTape(t, dir)
	if _, err := Open(dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	tp.Close()
	tp2, err := Open(dir)
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	tp2.Close()
}

func TestPermissions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "audit")
	tp := openTape(t, dir)
	mustAppend(t, tp, Event{Kind: "k"})
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %v", st.Mode().Perm())
	}
	st, err = os.Stat(filepath.Join(dir, currentName))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("file mode %v", st.Mode().Perm())
	}
}

func TestBadOptions(t *testing.T) {
	dir := t.TempDir()
	for _, o := range []Option{WithMaxFileBytes(0), WithMaxFileBytes(-1), WithMaxFiles(0)} {
		if _, err := Open(dir, o); err == nil {
			t.Fatal("Open accepted an invalid option")
		}
	}
	if _, err := Open(""); err == nil {
		t.Fatal("Open accepted an empty directory")
	}
}

func TestCrashRecovery(t *testing.T) {
	dir := t.TempDir()
	tp := openTape(t, dir)
	for i := 0; i < 3; i++ {
		mustAppend(t, tp, Event{Tenant: "t", Kind: "k", Call: strconv.Itoa(i)})
	}
	tp.Close()

	// A crash in the middle of the fourth write.
	partial := []byte(`{"seq":4,"time":"2030-01-01T00:00:00Z","tenant":"t","ki`)
	f, err := os.OpenFile(filepath.Join(dir, currentName), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(partial)
	f.Close()

	tp = openTape(t, dir)
	if tp.DroppedBytes() != int64(len(partial)) {
		t.Fatalf("DroppedBytes = %d, want %d", tp.DroppedBytes(), len(partial))
	}
	if got := seqs(mustQuery(t, tp, Query{})); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Fatalf("after repair: %v", got)
	}
	if e := mustAppend(t, tp, Event{Kind: "k"}); e.Seq != 4 {
		t.Fatalf("next seq = %d, want 4", e.Seq)
	}
	if got := checkJSONL(t, dir); !slices.Equal(got, []uint64{1, 2, 3, 4}) {
		t.Fatalf("file after repair and append: %v", got)
	}
	tp.Close()

	// A file holding only a partial line is emptied.
	dir2 := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir2, currentName), []byte(`{"seq":1,"ti`), 0o600); err != nil {
		t.Fatal(err)
	}
	tp = openTape(t, dir2)
	if tp.DroppedBytes() != 12 || tp.LastSeq() != 0 {
		t.Fatalf("dropped %d, last seq %d", tp.DroppedBytes(), tp.LastSeq())
	}
	if e := mustAppend(t, tp, Event{Kind: "k"}); e.Seq != 1 {
		t.Fatalf("seq = %d", e.Seq)
	}
	tp.Close()

	// A clean file drops nothing.
	tp = openTape(t, dir2)
	if tp.DroppedBytes() != 0 || tp.LastSeq() != 1 {
		t.Fatalf("clean reopen: dropped %d, last seq %d", tp.DroppedBytes(), tp.LastSeq())
	}
	tp.Close()

	// A complete but garbage last line is kept (never drop complete
	// lines); the sequence continues after the highest valid one.
	f, _ = os.OpenFile(filepath.Join(dir2, currentName), os.O_WRONLY|os.O_APPEND, 0)
	f.Write([]byte("not json\n"))
	f.Close()
	tp = openTape(t, dir2)
	if tp.DroppedBytes() != 0 || tp.LastSeq() != 1 {
		t.Fatalf("garbage tail: dropped %d, last seq %d", tp.DroppedBytes(), tp.LastSeq())
	}
	p, err := tp.QueryPage(context.Background(), Query{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Events) != 1 || p.Malformed != 1 {
		t.Fatalf("garbage tail query: %d events, %d malformed", len(p.Events), p.Malformed)
	}
	if e := mustAppend(t, tp, Event{Kind: "k"}); e.Seq != 2 {
		t.Fatalf("seq after garbage tail = %d", e.Seq)
	}

	// A leftover file from a crash during rotation is removed.
	tp.Close()
	os.WriteFile(filepath.Join(dir2, nextName), nil, 0o600)
	openTape(t, dir2) // Open removes the leftover
	if _, err := os.Stat(filepath.Join(dir2, nextName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("leftover next file: %v", err)
	}
}

// TestKill9 kills a process that is appending and checks that every event
// it acknowledged is on the tape and the tape reopens cleanly.
func TestKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperAppender$", "-test.count=1")
	cmd.Env = append(os.Environ(), "MOAT_AUDIT_HELPER_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[uint64]bool{}
	sc := bufio.NewScanner(out)
	for sc.Scan() && len(acked) < 300 {
		if s, ok := strings.CutPrefix(sc.Text(), "ACK "); ok {
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			acked[n] = true
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() { // acks printed before the kill landed
		if s, ok := strings.CutPrefix(sc.Text(), "ACK "); ok {
			n, _ := strconv.ParseUint(s, 10, 64)
			acked[n] = true
		}
	}
	cmd.Wait()
	if len(acked) < 300 {
		t.Fatalf("helper acknowledged only %d events", len(acked))
	}

	tp := openTape(t, dir, WithMaxFileBytes(4096), WithMaxFiles(1000))
	all := queryAll(t, tp, Query{Limit: MaxLimit})
	have := map[uint64]bool{}
	for _, e := range all {
		have[e.Seq] = true
	}
	for s := range acked {
		if !have[s] {
			t.Fatalf("acknowledged event %d lost (dropped %d bytes)", s, tp.DroppedBytes())
		}
	}
	if want := seqRangeList(1, tp.LastSeq()); !slices.Equal(seqs(all), want) {
		t.Fatalf("recovered tape is not 1..%d", tp.LastSeq())
	}
	e := mustAppend(t, tp, Event{Kind: "after.restart"})
	if e.Seq != tp.LastSeq() || e.Seq != uint64(len(all))+1 {
		t.Fatalf("seq after restart = %d with %d events", e.Seq, len(all))
	}
	checkJSONL(t, dir)
}

// TestHelperAppender is the child process of TestKill9.
func TestHelperAppender(t *testing.T) {
	dir := os.Getenv("MOAT_AUDIT_HELPER_DIR")
	if dir == "" {
		t.Skip("helper process for TestKill9")
	}
	tp, err := Open(dir, WithMaxFileBytes(4096), WithMaxFiles(1000))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var mu sync.Mutex
	for w := 0; w < 4; w++ {
		go func() {
			for {
				e, err := tp.Append(Event{Tenant: "t", Kind: "process.exec", Request: json.RawMessage(`{"argv":["true"]}`)})
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(2)
				}
				mu.Lock()
				fmt.Fprintf(os.Stdout, "ACK %d\n", e.Seq)
				mu.Unlock()
			}
		}()
	}
	select {} // until killed
}

func TestRedactor(t *testing.T) {
	dir := t.TempDir()
	secret := []byte("hunter2-s3cr3t")
	redact := func(b []byte) []byte {
		return bytes.ReplaceAll(b, secret, []byte("[REDACTED]"))
	}
	tp := openTape(t, dir, WithRedactor(redact))
	mustAppend(t, tp, Event{
		Tenant: "t", Kind: "process.exec",
		Request: json.RawMessage(`{"env":{"TOKEN":"hunter2-s3cr3t"}}`),
		Error:   "auth failed with hunter2-s3cr3t",
	})
	data, err := os.ReadFile(filepath.Join(dir, currentName))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, secret) {
		t.Fatalf("secret written to the tape: %s", data)
	}
	evs := mustQuery(t, tp, Query{})
	if len(evs) != 1 || evs[0].Error != "auth failed with [REDACTED]" ||
		string(evs[0].Request) != `{"env":{"TOKEN":"[REDACTED]"}}` {
		t.Fatalf("redacted event: %+v", evs)
	}

	// A redactor that breaks the line is refused, and nothing is written.
	for name, bad := range map[string]func([]byte) []byte{
		"invalid json": func(b []byte) []byte { return b[:len(b)-1] },
		"newline":      func(b []byte) []byte { return append(b[:len(b)-1:len(b)-1], []byte("\n,\"x\":1}")...) },
		"lost seq":     func(b []byte) []byte { return []byte(`{"kind":"x"}`) },
		"empty":        func([]byte) []byte { return nil },
	} {
		d := t.TempDir()
		tp := openTape(t, d, WithRedactor(bad))
		if _, err := tp.Append(Event{Kind: "k"}); !errors.Is(err, ErrBadRedaction) {
			t.Fatalf("%s: Append = %v, want ErrBadRedaction", name, err)
		}
		if st, _ := os.Stat(filepath.Join(d, currentName)); st.Size() != 0 {
			t.Fatalf("%s: %d bytes written", name, st.Size())
		}
		if tp.LastSeq() != 0 {
			t.Fatalf("%s: seq consumed", name)
		}
	}
}

func TestOversizedEvent(t *testing.T) {
	dir := t.TempDir()
	tp := openTape(t, dir)
	mustAppend(t, tp, Event{Kind: "k"})
	big, _ := json.Marshal(map[string]string{"data": strings.Repeat("x", MaxEventBytes)})
	_, err := tp.Append(Event{Kind: "file.write", Request: big})
	if !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("Append = %v, want ErrEventTooLarge", err)
	}
	var tl *TooLargeError
	if !errors.As(err, &tl) || tl.Limit != MaxEventBytes || tl.Size <= MaxEventBytes {
		t.Fatalf("error %v is not a proper *TooLargeError", err)
	}
	// Just under the limit is accepted; just over is not.
	lineLen := func(e Event) int {
		b, err := tp.encode(e)
		if err != nil {
			return MaxEventBytes + 1
		}
		return len(b) - len(seqZero) + len(`{"seq":`) + decimalLen(tp.LastSeq()+1) + 2
	}
	fixed := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	e := Event{Time: fixed, Kind: "k", Error: "y"}
	e.Error = strings.Repeat("y", 1+MaxEventBytes-lineLen(e))
	if n := lineLen(e); n != MaxEventBytes {
		t.Fatalf("constructed line of %d bytes", n)
	}
	if _, err := tp.Append(e); err != nil {
		t.Fatalf("event of exactly MaxEventBytes refused: %v", err)
	}
	e.Error += "y"
	if _, err := tp.Append(e); !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("event one byte over accepted: %v", err)
	}
	if next := mustAppend(t, tp, Event{Kind: "k"}); next.Seq != 3 {
		t.Fatalf("refused events consumed sequence numbers: next = %d", next.Seq)
	}
	// The maximal line reads back.
	evs := mustQuery(t, tp, Query{})
	if len(evs) != 3 || len(evs[1].Error) != len(e.Error)-1 {
		t.Fatalf("query after big event: %d events", len(evs))
	}
	// Invalid raw JSON is refused as well.
	if _, err := tp.Append(Event{Kind: "k", Request: json.RawMessage(`{"x":`)}); err == nil {
		t.Fatal("invalid Request accepted")
	}
	checkJSONL(t, dir)
}

func TestTenantIsolation(t *testing.T) {
	dir := t.TempDir()
	tp := openTape(t, dir, WithMaxFileBytes(2000), WithClock(fakeClock()))
	tenants := []string{"A", "AB", "a", "B", ""}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 300; i++ {
		ten := tenants[r.IntN(len(tenants))]
		mustAppend(t, tp, Event{Tenant: ten, Actor: "tok", Sandbox: "shared", Kind: "process.exec"})
	}
	counts := map[string]int{}
	for _, e := range queryAll(t, tp, Query{}) {
		counts[e.Tenant]++
	}
	for _, ten := range []string{"A", "AB", "a", "B"} {
		queries := []Query{
			{Tenant: ten},
			{Tenant: ten, Sandbox: "shared"},
			{Tenant: ten, Kind: "process"},
			{Tenant: ten, Newest: true, Limit: 7},
			{Tenant: ten, AfterSeq: 50, Limit: 3},
		}
		for _, q := range queries {
			for _, e := range queryAll(t, tp, q) {
				if e.Tenant != ten {
					t.Fatalf("query %+v returned an event of tenant %q", q, e.Tenant)
				}
			}
		}
		if n := len(queryAll(t, tp, Query{Tenant: ten})); n != counts[ten] {
			t.Fatalf("tenant %q: %d events, want %d", ten, n, counts[ten])
		}
	}
}

func TestQueryContextCanceled(t *testing.T) {
	tp := openTape(t, t.TempDir())
	mustAppend(t, tp, Event{Kind: "k"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tp.Query(ctx, Query{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Query with canceled context: %v", err)
	}
}

// TestMalformedFiles writes random bytes, random mutations of valid lines
// and oversized lines into the current and rotated files: Open and Query must
// never panic, and valid lines must still be found.
func TestMalformedFiles(t *testing.T) {
	r := rand.New(rand.NewPCG(42, 7))
	valid := func(seq uint64) []byte {
		return fmt.Appendf(nil, `{"seq":%d,"time":"2030-01-01T00:00:00Z","tenant":"t","actor":"a","kind":"k"}`+"\n", seq)
	}
	randomBytes := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			// Bias towards JSON-ish bytes and newlines.
			switch r.IntN(6) {
			case 0:
				b[i] = '\n'
			case 1:
				b[i] = `{}[]":,0123456789seqtimenull`[r.IntN(28)]
			default:
				b[i] = byte(r.UintN(256))
			}
		}
		return b
	}
	// mutate changes the body of a line, keeping its sequence number and
	// its newline, so that other lines and the order stay intact.
	mutate := func(b []byte) []byte {
		b = slices.Clone(b)
		start := bytes.IndexByte(b, ',') + 1
		for k := r.IntN(4); k >= 0; k-- {
			if len(b)-1 <= start {
				break
			}
			i := start + r.IntN(len(b)-1-start)
			switch r.IntN(3) {
			case 0:
				b[i] = byte(r.UintN(256))
			case 1:
				b = append(b[:i], b[i+1:]...)
			default:
				b = slices.Insert(b, i, byte(r.UintN(256)))
			}
		}
		return b
	}
	for round := 0; round < 60; round++ {
		dir := t.TempDir()
		var validSeqs []uint64
		seq := uint64(0)
		build := func() []byte {
			var buf []byte
			for k := r.IntN(12); k >= 0; k-- {
				switch r.IntN(5) {
				case 0:
					buf = append(buf, randomBytes(r.IntN(300))...)
					buf = append(buf, '\n')
				case 1:
					seq++
					buf = append(buf, mutate(valid(seq))...)
				case 2:
					if r.IntN(10) == 0 { // an oversized line
						buf = append(buf, bytes.Repeat([]byte("z"), MaxEventBytes+10)...)
						buf = append(buf, '\n')
					}
				default:
					seq++
					buf = append(buf, valid(seq)...)
					validSeqs = append(validSeqs, seq)
				}
			}
			return buf
		}
		// Two rotated files and the current one; valid lines in rotated
		// files end with a newline, so they are never dropped.
		s1 := build()
		os.WriteFile(filepath.Join(dir, segmentName(1, max(1, seq), 0)), s1, 0o600)
		lo := seq + 1
		s2 := build()
		os.WriteFile(filepath.Join(dir, segmentName(lo, max(lo, seq), 0)), s2, 0o600)
		cur := build()
		if r.IntN(2) == 0 {
			cur = append(cur, randomBytes(r.IntN(50))...) // maybe a partial tail
		}
		os.WriteFile(filepath.Join(dir, currentName), cur, 0o600)
		// A rotated file name that does not parse is ignored.
		os.WriteFile(filepath.Join(dir, "audit-x-1.jsonl"), randomBytes(100), 0o600)

		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("round %d: panic: %v", round, p)
				}
			}()
			tp, err := Open(dir)
			if err != nil {
				t.Fatalf("round %d: Open: %v", round, err)
			}
			defer tp.Close()
			var got []Event
			q := Query{Limit: 5}
			for {
				p, err := tp.QueryPage(context.Background(), q)
				if err != nil {
					t.Fatalf("round %d: Query: %v", round, err)
				}
				got = append(got, p.Events...)
				if !p.More {
					break
				}
				q.AfterSeq = p.Events[len(p.Events)-1].Seq
			}
			have := map[uint64]bool{}
			for _, e := range got {
				have[e.Seq] = true
			}
			// Every untouched valid line is found, except a last line
			// of the current file that lost its newline to random tail
			// bytes (impossible here: valid lines end with '\n').
			for _, s := range validSeqs {
				if !have[s] {
					t.Fatalf("round %d: valid event %d not returned", round, s)
				}
			}
			mustQuery(t, tp, Query{Newest: true, Tenant: "t"})
			e, err := tp.Append(Event{Kind: "k"})
			if err != nil {
				t.Fatalf("round %d: Append: %v", round, err)
			}
			for _, s := range validSeqs {
				if e.Seq <= s {
					t.Fatalf("round %d: new seq %d not after existing %d", round, e.Seq, s)
				}
			}
		}()
	}
}

// FuzzOpenQuery feeds arbitrary content to the current file.
func FuzzOpenQuery(f *testing.F) {
	f.Add([]byte(`{"seq":1,"time":"2030-01-01T00:00:00Z","kind":"k"}` + "\n"))
	f.Add([]byte("{\"seq\":1}\n{\"seq\":"))
	f.Add([]byte("\n\n\n"))
	f.Add([]byte{0, 0, 0, '\n', 0xff})
	f.Add([]byte(`{"seq":18446744073709551615,"time":"2030-01-01T00:00:00Z"}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, currentName), data, 0o600); err != nil {
			t.Fatal(err)
		}
		tp, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer tp.Close()
		if _, err := tp.Query(context.Background(), Query{}); err != nil {
			t.Fatal(err)
		}
		if _, err := tp.Query(context.Background(), Query{Newest: true, Limit: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := tp.Append(Event{Kind: "k"}); err != nil && tp.LastSeq() != ^uint64(0) {
			t.Fatal(err)
		}
		checkJSONLPrefixFree(t, dir)
	})
}

// checkJSONLPrefixFree checks that the current file ends with a newline.
func checkJSONLPrefixFree(t *testing.T, dir string) {
	data, err := os.ReadFile(filepath.Join(dir, currentName))
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Fatal("current file does not end with a newline")
	}
}

func BenchmarkAppend(b *testing.B) {
	tp := openTape(b, b.TempDir())
	e := Event{Tenant: "acme", Actor: "tok_1", Sandbox: "sb1", Kind: "process.exec", Decision: DecisionAllow,
		Request: json.RawMessage(`{"argv":["npm","test"],"cwd":"/work"}`), Result: json.RawMessage(`{"exit_code":0}`)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tp.Append(e); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendParallel shows group commit: concurrent appends share
// fsyncs.
func BenchmarkAppendParallel(b *testing.B) {
	tp := openTape(b, b.TempDir())
	e := Event{Tenant: "acme", Actor: "tok_1", Sandbox: "sb1", Kind: "process.exec", Decision: DecisionAllow}
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := tp.Append(e); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
