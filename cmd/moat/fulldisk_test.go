//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/sandbox"
	"github.com/moat-sandbox/moat/store"
)

// answer is what the daemon answered one exec.
type answer struct {
	status int
	err    api.Error // when status is not 200
	res    sandbox.Result
}

// TestServeFullDisk: with the data directory on a full file system, every
// exec answered 200 is in the store (ended, exit 0) and on the audit tape;
// every other exec is refused with 507 insufficient_storage naming the
// full path, and ran nothing unless the refusal carries its result (it ran
// before the disk filled and its record waited in memory); reads keep
// working; and once space returns, new calls succeed without a restart and
// the records kept in memory reach the disk. Nothing is marked lost.
func TestServeFullDisk(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.Tmpfs(t, 16<<20)
	d := startDaemon(t, dir)
	var sb api.Sandbox
	if st := d.call("POST", "/v1/sandboxes", api.CreateSandbox{}, &sb); st != 201 {
		t.Fatalf("create: %d", st)
	}
	base := "/v1/sandboxes/" + sb.ID
	var res sandbox.Result
	if st := d.call("POST", base+"/exec", api.Exec{Args: []string{"sh", "-c", "echo 0 >> /tmp/ran"}}, &res); st != 200 || res.ExitCode != 0 {
		t.Fatalf("exec before the disk filled: %d %+v", st, res)
	}

	// A call in flight when the disk fills: it ends at its timeout.
	stream := d.send("POST", base+"/exec", api.Exec{Args: []string{"sh", "-c", "echo 1 >> /tmp/ran; echo started; exec sleep 1000"},
		Stream: true, Concurrent: true, TimeoutMs: 2000})
	defer stream.Body.Close()
	sr := bufio.NewReader(stream.Body)
	if line, err := sr.ReadString('\n'); err != nil || !strings.Contains(line, "started") {
		t.Fatalf("stream: %q %v", line, err)
	}

	fill := testutil.FillDisk(t, dir, "fill")

	const n = 40
	answers := make([]answer, n+2) // by the number each exec writes
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				resp := d.send("POST", base+"/exec", api.Exec{Args: []string{"sh", "-c", fmt.Sprintf("echo %d >> /tmp/ran", i)}, Concurrent: true})
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				a := answer{status: resp.StatusCode}
				if a.status == 200 {
					_ = json.Unmarshal(body, &a.res)
				} else {
					_ = json.Unmarshal(body, &a.err)
				}
				answers[i] = a
			}
		})
	}
	for i := 2; i < n+2; i++ {
		next <- i
	}
	close(next)
	wg.Wait()

	// The call in flight: done (its record on disk), or refused with its
	// result attached.
	answers[1] = answer{status: 200}
	for {
		line, err := sr.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended without an exit or error event: %v", err)
		}
		var ev api.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("stream: %q: %v", line, err)
		}
		if ev.Type == api.EventExit {
			answers[1].res = *ev.Result
			break
		}
		if ev.Type == api.EventError {
			answers[1] = answer{status: api.HTTPStatus(ev.Error), err: *ev.Error}
			break
		}
	}

	refused := 0
	for i := 1; i < n+2; i++ {
		a := answers[i]
		switch {
		case a.status == 200:
		case a.status == 507 && a.err.Code == api.CodeStorage && strings.Contains(a.err.Message, dir):
			refused++
		default:
			t.Errorf("exec %d on a full disk: %d %+v, want 200 or 507 insufficient_storage naming %s", i, a.status, a.err, dir)
		}
	}
	if refused < n/2 {
		t.Errorf("only %d of %d execs refused on a full disk", refused, n+1)
	}

	// Reads keep working.
	var got api.Sandbox
	if st := d.call("GET", base, nil, &got); st != 200 || got.State != api.StateRunning {
		t.Errorf("get sandbox on a full disk: %d %+v", st, got)
	}
	var list api.SandboxList
	if st := d.call("GET", "/v1/sandboxes", nil, &list); st != 200 {
		t.Errorf("list sandboxes on a full disk: %d", st)
	}
	var page api.AuditPage
	if st := d.call("GET", "/v1/audit?limit=10&sandbox="+sb.ID, nil, &page); st != 200 {
		t.Errorf("audit query on a full disk: %d", st)
	}

	// Space returns: calls succeed again, without a restart. (The daemon
	// writes what it kept in memory with a back-off: poll.)
	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		res = sandbox.Result{}
		st := d.call("POST", base+"/exec", api.Exec{Args: []string{"cat", "/tmp/ran"}}, &res)
		if st == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no exec succeeded within 20s of space returning: %d", st)
		}
	}

	// What ran: exactly the calls answered 200 and those refused with
	// their result attached (they had run).
	ran := map[int]bool{}
	for _, f := range strings.Fields(res.Stdout) {
		i, _ := strconv.Atoi(f)
		ran[i] = true
	}
	recorded := []int{0}
	for i := 1; i < n+2; i++ {
		a := answers[i]
		didRun := a.status == 200 || len(a.err.Result) > 0
		if ran[i] != didRun {
			t.Errorf("exec %d answered %d %+v: ran = %v", i, a.status, a.err, ran[i])
		}
		if didRun {
			recorded = append(recorded, i)
		}
	}

	// Every call that ran is on the tape and in the store, ended.
	page = api.AuditPage{}
	d.call("GET", "/v1/audit?limit=1000&kind=process.exec&sandbox="+sb.ID, nil, &page)
	onTape := map[int]bool{}
	for _, e := range page.Events {
		var req struct{ Args []string }
		if json.Unmarshal(e.Request, &req) == nil && len(req.Args) == 3 {
			if f := strings.Fields(req.Args[2]); len(f) > 1 {
				i, _ := strconv.Atoi(f[1])
				onTape[i] = true
			}
		}
	}
	for _, i := range recorded {
		if !onTape[i] {
			t.Errorf("exec %d (answered %d) is not on the audit tape", i, answers[i].status)
		}
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if err := d.cmd.Wait(); err != nil {
		t.Fatalf("clean stop: %v", err)
	}
	st, err := store.Open(context.Background(), filepath.Join(dir, "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	calls, err := st.ListCalls(context.Background(), "default", sb.ID, 1000)
	if err != nil {
		t.Fatal(err)
	}
	inStore := map[int]bool{}
	for _, c := range calls {
		if c.EndedAt == nil || c.ExitReason == store.ReasonLost {
			t.Errorf("call %s %q: ended %v, reason %q", c.ID, c.Args, c.EndedAt, c.ExitReason)
		}
		if len(c.Args) == 3 {
			if f := strings.Fields(c.Args[2]); len(f) > 1 {
				i, _ := strconv.Atoi(f[1])
				inStore[i] = true
			}
		}
	}
	for _, i := range recorded {
		if !inStore[i] {
			t.Errorf("exec %d (answered %d) is not in the store", i, answers[i].status)
		}
	}
	t.Logf("%d execs on a full disk: %d refused (%d of them with a result: they had run)", n+1, refused,
		len(recorded)-1-countOK(answers))
}

func countOK(as []answer) int {
	n := 0
	for _, a := range as[1:] {
		if a.status == 200 {
			n++
		}
	}
	return n
}

// TestServeStartFullDisk: a daemon started on a full data disk, new or
// used before, exits 125 with an error naming the data directory and "no
// space left on device" (not "disk I/O error").
func TestServeStartFullDisk(t *testing.T) {
	testutil.RequireRoot(t)
	for _, used := range []bool{false, true} {
		t.Run(fmt.Sprintf("used=%v", used), func(t *testing.T) {
			dir := testutil.Tmpfs(t, 4<<20)
			if used {
				d := startDaemon(t, dir)
				var sb api.Sandbox
				if st := d.call("POST", "/v1/sandboxes", api.CreateSandbox{}, &sb); st != 201 {
					t.Fatalf("create: %d", st)
				}
				_ = d.cmd.Process.Signal(syscall.SIGTERM)
				if err := d.cmd.Wait(); err != nil {
					t.Fatalf("clean stop: %v", err)
				}
			}
			testutil.FillDisk(t, dir, "fill")
			cmd := exec.Command(testutil.Moat(t), "serve", "--data", dir, "--listen", "unix:"+filepath.Join(dir, "api.sock"))
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 125 {
				t.Fatalf("moat serve on a full disk: %v\n%s", err, out)
			}
			if !strings.Contains(string(out), dir+": no space left on device") {
				t.Fatalf("moat serve on a full disk said:\n%s\nwant %q", out, dir+": no space left on device")
			}
		})
	}
}
