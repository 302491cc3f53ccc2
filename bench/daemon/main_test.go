package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/bench/schema"
)

func TestParseBench(t *testing.T) {
	out := `goos: linux
BenchmarkRecordCall/writers=1-2         	    2138	    561738 ns/op	      1786 calls/s
BenchmarkRecordCall/writers=8-2         	    5202	    202477 ns/op	      4959 calls/s
BenchmarkRecordCall/writers=32          	   12603	     85708.5 ns/op	     11719 calls/s
BenchmarkRecordCall/writers=64-2   time=2026-11-24T23:13:44.342Z level=WARN msg="slow write" what="audit append" took=265ms
time=2026-11-24T23:13:44.350Z level=WARN msg="slow write" what="store finish call" took=278ms
   20000	     50000 ns/op	     20000 calls/s
PASS`
	got := parseBench(out)
	if f := got[64]; f.callsPerS != 20000 {
		t.Errorf("a result after log lines: %+v", f)
	}
	delete(got, 64)
	if len(got) != 3 || got[1].callsPerS != 1786 || got[8].nsPerOp != 202477 || got[32].callsPerS != 11719 || got[32].nsPerOp != 85708.5 {
		t.Errorf("parseBench = %+v", got)
	}
}

func TestAccount(t *testing.T) {
	const mb = 1 << 20
	e := schema.ExecAccount{N: 2, Bytes: mb, Printed: 2 * mb, Counted: 2 * mb, Returned: mb + 10, Whole: 1, Truncated: 1, WholeFiles: 2}
	b := schema.BackgroundAccount{N: 1, Bytes: mb, Printed: mb, Counted: mb, Received: mb - 100, LostBytes: 100}
	if ok, errs := account(e, b, true); !ok {
		t.Errorf("accounted flood refused: %v", errs)
	}
	// An answer short of its stream that does not say so, and bytes a
	// reader neither received nor was told were lost.
	e.Truncated, e.Counted = 0, 2*mb-4096
	b.LostBytes = 50
	ok, errs := account(e, b, true)
	if ok || len(errs) != 3 || !strings.Contains(errs[2], "+50 unaccounted") {
		t.Errorf("account = %v %q", ok, errs)
	}
}

func TestParseBudget(t *testing.T) {
	if a, b, err := parseBudget("64MiB/16MiB"); err != nil || a != 64<<20 || b != 16<<20 {
		t.Errorf("64MiB/16MiB: %d %d %v", a, b, err)
	}
	for _, bad := range []string{"64MiB", "16MiB/64MiB", "1KiB/1KiB", "x/y"} {
		if _, _, err := parseBudget(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if sizeStr(1<<30) != "1GiB" || sizeStr(16<<20) != "16MiB" || sizeStr(1000) != "1000" {
		t.Error("sizeStr")
	}
	if _, err := parseLevels("1,8,32"); err != nil {
		t.Error(err)
	}
	if _, err := parseLevels("1,0"); err == nil {
		t.Error("level 0 accepted")
	}
}

// scanTape counts the auth.denied events after a sequence number, their
// bytes and the failures they count, across rotated files.
func TestScanTape(t *testing.T) {
	dir := t.TempDir()
	lines := map[string]string{
		"audit-00000000000000000001-00000000000000000002.jsonl": `{"seq":1,"kind":"sandbox.create"}` + "\n" + `{"seq":2,"kind":"auth.denied"}` + "\n",
		"audit.jsonl": `{"seq":3,"kind":"auth.denied","result":{"count":40,"limited":20}}` + "\n" + `{"seq":4,"kind":"auth.denied"}` + "\n" + `{"seq":6,"kind":"daemon.stop"}` + "\n",
	}
	for name, text := range lines {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sc, err := scanTape(dir, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := int64(len(`{"seq":3,"kind":"auth.denied","result":{"count":40,"limited":20}}`) + len(`{"seq":4,"kind":"auth.denied"}`) + 2)
	if sc.maxSeq != 6 || sc.authEvents != 2 || sc.authCounted != 41 || sc.authBytes != want || sc.missing != 1 {
		t.Errorf("scanTape = %+v (want bytes %d)", sc, want)
	}
}
