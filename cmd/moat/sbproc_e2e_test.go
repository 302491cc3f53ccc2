package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/sandbox"
)

// TestSandboxProcessCLIE2E drives background processes of a real daemon
// through the moat binary: stdin, --close and wait on a cat; signal and
// kill on sleeps; ps, snapshot, cp, logs and rm with --json after the
// arguments; moat audit listing the calls just made.
func TestSandboxProcessCLIE2E(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "api.sock")
	d := testutil.StartDaemon(t, filepath.Join(dir, "data"), "--listen", "unix:"+sock, "--store", filepath.Join(dir, "store"))
	t.Setenv("MOAT_MODE", "")
	t.Setenv("MOAT_URL", "unix:"+sock)
	t.Setenv("MOAT_TOKEN", d.Token)
	moat := func(stdin string, args ...string) testutil.Output {
		t.Helper()
		return testutil.ExecStdin(t, []byte(stdin), args...)
	}
	must := func(o testutil.Output, what string) string {
		t.Helper()
		if o.Code != 0 {
			t.Fatalf("%s: exit %d\nstdout: %s\nstderr: %s", what, o.Code, o.Stdout, o.Stderr)
		}
		return strings.TrimSpace(o.Stdout)
	}
	id := must(moat("", "sandbox", "create"), "create")
	t.Cleanup(func() { moat("", "sandbox", "rm", id) })
	start := func(argv ...string) string {
		t.Helper()
		return must(moat("", append([]string{"sandbox", "start", id, "--"}, argv...)...), "start "+strings.Join(argv, " "))
	}

	// cat: data from stdin, then from a file with --close (the flag after
	// the arguments); wait returns its result, logs --json its output.
	cat := start("cat")
	must(moat("hello\n", "sandbox", "stdin", id, cat), "stdin")
	f := filepath.Join(dir, "more")
	if err := os.WriteFile(f, []byte("world\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	must(moat("", "sandbox", "stdin", id, cat, f, "--close"), "stdin FILE --close")
	var p api.Process
	if err := json.Unmarshal([]byte(must(moat("", "sandbox", "wait", id, cat, "--json", "--timeout", "60s"), "wait --json")), &p); err != nil ||
		p.State != api.ProcExited || p.Result == nil || p.Result.ExitCode != 0 {
		t.Fatalf("wait cat: %+v %v", p, err)
	}
	logs := must(moat("", "sandbox", "logs", id, cat, "--json"), "logs --json")
	var text strings.Builder
	var last api.Event
	for sc := bufio.NewScanner(strings.NewReader(logs)); sc.Scan(); {
		if err := json.Unmarshal(sc.Bytes(), &last); err != nil {
			t.Fatalf("logs --json line %q: %v", sc.Text(), err)
		}
		if last.Type == api.EventStdout {
			text.Write(last.Output())
		}
	}
	if text.String() != "hello\nworld\n" || last.Type != api.EventExit {
		t.Fatalf("logs --json: %q (last %+v)", text.String(), last)
	}
	if o := moat("x", "sandbox", "stdin", id, cat); o.Code != 125 || !strings.Contains(o.Stderr, "gone") {
		t.Errorf("stdin to an ended process: %d %q", o.Code, o.Stderr)
	}

	// wait exits with the process's code.
	seven := start("sh", "-c", "exit 7")
	if o := moat("", "sandbox", "wait", id, seven); o.Code != 7 {
		t.Errorf("wait on exit 7: %d %q", o.Code, o.Stderr)
	}

	// signal TERM (by name, then by number) ends a sleep; kill a third.
	for _, sig := range []string{"TERM", "15"} {
		sl := start("sleep", "1000")
		if o := moat("", "sandbox", "wait", id, sl, "--timeout", "1ms"); o.Code != 124 {
			t.Errorf("wait --timeout on a sleep: %d %q", o.Code, o.Stderr)
		}
		must(moat("", "sandbox", "signal", id, sl, sig), "signal "+sig)
		if o := moat("", "sandbox", "wait", id, sl); o.Code != 128+15 {
			t.Errorf("sleep after signal %s: exit %d %q", sig, o.Code, o.Stderr)
		}
	}
	// kill reaches the whole call tree: a descendant that left the
	// process group (setsid) dies too.
	sl := start("sh", "-c", "trap '' TERM; setsid sleep 1234 & echo $! > /tmp/gc; sleep 1000")
	must(moat("", "sandbox", "exec", id, "--", "sh", "-c", "while [ ! -s /tmp/gc ]; do sleep 0.01; done; test -e /proc/$(cat /tmp/gc)"), "the setsid child runs")
	must(moat("", "sandbox", "kill", id, sl), "kill")
	o := moat("", "sandbox", "wait", id, sl, "--json")
	if err := json.Unmarshal([]byte(o.Stdout), &p); err != nil || o.Code != 128+9 || p.Result == nil || p.Result.ExitCode != 128+9 || p.Result.ExitReason != sandbox.ReasonSignaled {
		t.Errorf("killed: exit %d %s %v", o.Code, o.Stdout, err)
	}
	if o := moat("", "sandbox", "exec", id, "--", "sh", "-c", "test -e /proc/$(cat /tmp/gc)"); o.Code != 1 {
		t.Errorf("the setsid child outlived kill: exit %d %q", o.Code, o.Stderr)
	}
	if o := moat("", "sandbox", "signal", id, sl, "NOSUCH"); o.Code != 125 {
		t.Errorf("bad signal: %d %q", o.Code, o.Stderr)
	}

	// ps SANDBOX --json lists them, all ended.
	var procs []api.Process
	if err := json.Unmarshal([]byte(must(moat("", "sandbox", "ps", id, "--json"), "ps --json")), &procs); err != nil || len(procs) != 5 {
		t.Fatalf("ps --json: %d processes, %v", len(procs), err)
	}
	for _, pr := range procs {
		if pr.State != api.ProcExited {
			t.Errorf("process %d still %s", pr.ID, pr.State)
		}
	}

	// cp --json both ways.
	type cpSummary struct {
		Direction, Sandbox, Path, Host string
		Archive                        bool
		Bytes                          int64
	}
	var cs cpSummary
	if err := json.Unmarshal([]byte(must(moat("", "sandbox", "cp", f, id+":/workspace/in.txt", "--json"), "cp in --json")), &cs); err != nil ||
		cs.Direction != "in" || cs.Sandbox != id || cs.Path != "/workspace/in.txt" || cs.Host != f || cs.Bytes != 6 || cs.Archive {
		t.Errorf("cp in --json: %+v %v", cs, err)
	}
	back := filepath.Join(dir, "back")
	if err := json.Unmarshal([]byte(must(moat("", "sandbox", "cp", "--json", id+":/workspace/in.txt", back), "cp out --json")), &cs); err != nil ||
		cs.Direction != "out" || cs.Path != "/workspace/in.txt" || cs.Host != back || !cs.Archive || cs.Bytes == 0 {
		t.Errorf("cp out --json: %+v %v", cs, err)
	}
	if b, err := os.ReadFile(back); err != nil || string(b) != "world\n" {
		t.Errorf("copied back: %q %v", b, err)
	}

	// snapshot SANDBOX --json, then snapshot rm --json.
	var sn api.Snapshot
	if err := json.Unmarshal([]byte(must(moat("", "sandbox", "snapshot", id, "--json"), "snapshot --json")), &sn); err != nil || sn.ID == "" || sn.Sandbox != id {
		t.Fatalf("snapshot --json: %+v %v", sn, err)
	}
	var rm struct {
		Removed []string          `json:"removed"`
		Failed  []json.RawMessage `json:"failed"`
	}
	if err := json.Unmarshal([]byte(must(moat("", "snapshot", "rm", sn.ID, "--json"), "snapshot rm --json")), &rm); err != nil ||
		!slices.Equal(rm.Removed, []string{sn.ID}) || len(rm.Failed) != 0 {
		t.Errorf("snapshot rm --json: %+v %v", rm, err)
	}

	// moat audit lists the calls just made.
	var evs []audit.Event
	if err := json.Unmarshal([]byte(must(moat("", "audit", "--sandbox", id, "--json", "--limit", "1000"), "audit --json")), &evs); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, e := range evs {
		if e.Sandbox != id {
			t.Errorf("event of another sandbox: %+v", e)
		}
		kinds[e.Kind]++
	}
	for _, k := range []string{"sandbox.create", "process.start", "process.stdin", "process.signal", "process.wait", "file.write", "snapshot.create"} {
		if kinds[k] == 0 {
			t.Errorf("audit has no %s event: %v", k, kinds)
		}
	}
	// stdin: two writes, the close, one refused (ended); signal: TERM,
	// 15, KILL and one refused (NOSUCH).
	if kinds["process.stdin"] != 4 || kinds["process.signal"] != 4 {
		t.Errorf("audit: %d stdin and %d signal events, want 4 and 4: %v", kinds["process.stdin"], kinds["process.signal"], kinds)
	}
	table := must(moat("", "audit", "--sandbox", id, "--kind", "process.signal"), "audit --kind")
	if lines := strings.Split(table, "\n"); len(lines) != 1+kinds["process.signal"] || !strings.HasPrefix(lines[0], "SEQ") {
		t.Errorf("audit --kind process.signal:\n%s", table)
	}

	// rm SANDBOX --json.
	if err := json.Unmarshal([]byte(must(moat("", "sandbox", "rm", id, "--json"), "rm --json")), &rm); err != nil || !slices.Equal(rm.Removed, []string{id}) {
		t.Errorf("rm --json: %+v %v", rm, err)
	}
}

// TestTemplateRemoveJSON: template rm --json (flags after the names)
// prints what it removed and what it kept.
func TestTemplateRemoveJSON(t *testing.T) {
	testutil.RequireRoot(t)
	store := filepath.Join(t.TempDir(), "store")
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "hello"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if o := testutil.Exec(t, "template", "import", "tpl", src, "--store", store); o.Code != 0 {
		t.Fatalf("import: %d %q", o.Code, o.Stderr)
	}
	o := testutil.Exec(t, "template", "rm", "tpl", "nosuch", "--store", store, "--json")
	var rm struct {
		Removed []string `json:"removed"`
		Failed  []struct {
			ID, Error string
		} `json:"failed"`
	}
	if err := json.Unmarshal([]byte(o.Stdout), &rm); err != nil || o.Code != 1 || !slices.Equal(rm.Removed, []string{"tpl"}) ||
		len(rm.Failed) != 1 || rm.Failed[0].ID != "nosuch" || rm.Failed[0].Error == "" {
		t.Fatalf("template rm --json: %d %q %q", o.Code, o.Stdout, o.Stderr)
	}
}
