package server

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/output"
	"github.com/moat-sandbox/moat/sandbox"
)

// TestExecAnswerEncoding: an answer written from its captures is byte for
// byte the JSON of the result holding the captures' text, whatever the
// text (NUL bytes, HTML, invalid UTF-8, a rune cut by the truncation
// marker), and its bytes go back to the budget once released.
func TestExecAnswerEncoding(t *testing.T) {
	b := output.NewBudget(1<<20, 1<<20)
	o := &outputs{budget: b, log: slog.New(slog.NewTextHandler(io.Discard, nil)), usage: map[string]int64{}}
	for _, tc := range []struct {
		limit          int
		stdout, stderr string
	}{
		{100, "", ""},
		{100, "hello\n", "oops\x00<&>\u2028"},
		{10, "é€😀 and more é€😀 after", "\xff\xfe"},
		{1000, strings.Repeat("flood\x00\"\\\n", 500), strings.Repeat("€", 400)},
	} {
		out, errc := o.newCapture("t", "sb/c1", "stdout", tc.limit), o.newCapture("t", "sb/c1", "stderr", tc.limit)
		out.c.Write([]byte(tc.stdout))
		errc.c.Write([]byte(tc.stderr))
		res := &sandbox.Result{ExitCode: 3, ExitReason: sandbox.ReasonExited, Error: `"stdout":"" <`, StdoutBytes: int64(len(tc.stdout)),
			StderrBytes: int64(len(tc.stderr)), Truncated: out.c.Truncated() || errc.c.Truncated(), Enforcement: &sandbox.Enforcement{Runtime: "x"}}
		whole := *res
		whole.Stdout, whole.Stderr = out.c.String(), errc.c.String()
		want, err := json.Marshal(&whole)
		if err != nil {
			t.Fatal(err)
		}
		a := &execAnswer{res: res, stdout: out, stderr: errc}
		var got bytes.Buffer
		if err := a.encodeJSON(&got); err != nil {
			t.Fatal(err)
		}
		if got.String() != string(want) {
			t.Fatalf("limit %d:\n got %s\nwant %s", tc.limit, got.String(), want)
		}
		if m, err := a.MarshalJSON(); err != nil || string(m) != string(want) {
			t.Fatalf("MarshalJSON: %s %v", m, err)
		}
		if b.Held() == 0 && len(tc.stdout)+len(tc.stderr) > 0 {
			t.Fatal("the captures hold nothing before the answer is released")
		}
		a.release()
		a.release()
		if b.Held() != 0 {
			t.Fatalf("%d bytes still held after release", b.Held())
		}
	}
}

// TestPreviewOf: the preview made from a capture's buffers is the one
// made from its text.
func TestPreviewOf(t *testing.T) {
	for _, n := range []int{0, 1, PreviewBytes / 2, PreviewBytes - 1, PreviewBytes, PreviewBytes + 1, 3 * PreviewBytes, 100000} {
		c := output.NewCapture(3 * PreviewBytes)
		for i := range n {
			c.Write([]byte{byte('a' + i%26)})
		}
		want := preview(c.String())
		if got := previewOf(c); !bytes.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("%d bytes: got %q\nwant %q", n, got, want)
		}
	}
}

// TestRPCExecAnswer: over JSON-RPC an exec's answer is written from its
// captures (a single response), whole in a batch, and dropped for a
// notification; in every case its output goes back to the budget.
func TestRPCExecAnswer(t *testing.T) {
	h := newFakeHarness(t, nil)
	p := newRPCPeer(t, h)
	p.send(`{"jsonrpc":"2.0","id":1,"method":"sandbox.create","params":{}}`)
	m := p.next()
	id, _ := m["result"].(map[string]any)["id"].(string)
	if id == "" {
		t.Fatalf("create: %v", m)
	}
	exec := `"method":"process.exec","params":{"sandbox":"` + id + `","args":["sh","-c","printf 'a<b>\\000'; printf err >&2"],"concurrent":true}`
	p.send(`{"jsonrpc":"2.0","id":"x<y",` + exec + `}`)
	m = p.next()
	res, _ := m["result"].(map[string]any)
	if m["id"] != "x<y" || res["stdout"] != "a<b>\x00" || res["stderr"] != "err" || res["stdout_bytes"] != float64(5) || m["jsonrpc"] != "2.0" {
		t.Fatalf("exec: %v", m)
	}
	p.send(`{"jsonrpc":"2.0",` + exec + `}`) // a notification: no answer
	p.send(`[{"jsonrpc":"2.0","id":7,` + exec + `},{"jsonrpc":"2.0","id":8,"method":"sandbox.get","params":{"sandbox":"` + id + `"}}]`)
	line, err := p.rd.ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	var batch []map[string]any
	if err := json.Unmarshal(line, &batch); err != nil || len(batch) != 2 {
		t.Fatalf("batch: %s %v", line, err)
	}
	for _, r := range batch {
		if r["id"] == float64(7) && r["result"].(map[string]any)["stdout"] != "a<b>\x00" {
			t.Fatalf("batch exec: %v", r)
		}
	}
	// The end of the input ends the server once the calls in flight (the
	// notification's exec) are over: every answer was released.
	p.w.Close()
	go func() { _, _ = io.Copy(io.Discard, p.rd) }()
	if err := <-p.done; err != nil {
		t.Fatal(err)
	}
	if held := h.svc.out.budget.Held(); held != 0 {
		t.Fatalf("%d bytes of output still held after the answers", held)
	}
}

// TestHTTPExecAnswer: over HTTP the answer holds the output, written from
// the captures, which are released once it is written.
func TestHTTPExecAnswer(t *testing.T) {
	h := newFakeHarness(t, nil)
	id := h.create(tokenA, api.CreateSandbox{})
	r := h.do("POST", "/v1/sandboxes/"+id+"/exec", tokenA, api.Exec{Args: []string{"sh", "-c", "head -c 100000 /dev/zero; printf 'e<&>' >&2"}})
	var res sandbox.Result
	r.decode(t, &res)
	if r.status != 200 || res.StdoutBytes != 100000 || res.Stdout != strings.Repeat("\x00", 100000) || res.Stderr != "e<&>" || res.Truncated {
		t.Fatalf("exec: %d %d bytes, stderr %q, truncated %v", r.status, len(res.Stdout), res.Stderr, res.Truncated)
	}
	if !bytes.Contains(r.body, []byte(`"stderr":"e\u003c\u0026\u003e"`)) || !bytes.HasSuffix(r.body, []byte("}\n")) {
		t.Fatalf("not encoded as encoding/json would: %.100s … %s", r.body[:100], r.body[len(r.body)-200:])
	}
	if held := h.svc.out.budget.Held(); held != 0 {
		t.Fatalf("%d bytes of output still held after the answer", held)
	}
}
