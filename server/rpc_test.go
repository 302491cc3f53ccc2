package server

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
)

// rpcPeer is the client end of ServeRPC over pipes.
type rpcPeer struct {
	t    *testing.T
	w    *io.PipeWriter
	rd   *bufio.Reader
	done chan error
}

func newRPCPeer(t *testing.T, h *harness) *rpcPeer {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p := &rpcPeer{t: t, w: inW, rd: bufio.NewReader(outR), done: make(chan error, 1)}
	go func() {
		p.done <- h.svc.ServeRPC(context.Background(), inR, outW, Caller{Tenant: "local", Actor: "stdio", Approver: true})
		outW.Close()
	}()
	return p
}

func (p *rpcPeer) send(line string) {
	p.t.Helper()
	if _, err := io.WriteString(p.w, line+"\n"); err != nil {
		p.t.Fatal(err)
	}
}

// next reads the next message.
func (p *rpcPeer) next() map[string]any {
	p.t.Helper()
	line, err := p.rd.ReadBytes('\n')
	if err != nil {
		p.t.Fatalf("reading: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		p.t.Fatalf("%q: %v", line, err)
	}
	return m
}

// TestRPC: the same operations over JSON-RPC 2.0: results, streamed
// events as notifications before the response, base64 file bodies,
// requests answered out of order, standard errors, batches, and the end
// of input ending the server.
func TestRPC(t *testing.T) {
	h := newFakeHarness(t, nil)
	p := newRPCPeer(t, h)
	p.send(`{"jsonrpc":"2.0","id":1,"method":"sandbox.create","params":{}}`)
	m := p.next()
	res, _ := m["result"].(map[string]any)
	id, _ := res["id"].(string)
	if id == "" || res["tenant"] != "local" {
		t.Fatalf("create: %v", m)
	}
	p.send(`{"jsonrpc":"2.0","id":"w","method":"file.write","params":{"sandbox":"` + id + `","path":"f","content":"aGk="}}`)
	if m := p.next(); m["id"] != "w" || m["error"] != nil {
		t.Fatalf("write: %v", m)
	}
	p.send(`{"jsonrpc":"2.0","id":2,"method":"file.read","params":{"sandbox":"` + id + `","path":"/workspace/f"}}`)
	if m := p.next(); m["result"].(map[string]any)["content"] != "aGk=" {
		t.Fatalf("read: %v", m)
	}
	p.send(`{"jsonrpc":"2.0","id":20,"method":"process.exec","params":{"sandbox":"` + id + `","args":["mkfifo","/workspace/fifo"]}}`)
	if m := p.next(); m["result"].(map[string]any)["exit_code"] != float64(0) {
		t.Fatalf("mkfifo: %v", m)
	}
	// A slow streamed exec and a quick stat in flight together: the stat
	// is answered first; the exec's events come before its response.
	p.send(`{"jsonrpc":"2.0","id":3,"method":"process.exec","params":{"sandbox":"` + id + `","args":["sh","-c","echo a; read x < /workspace/fifo; echo b"],"stream":true,"concurrent":true}}`)
	first := p.next()
	if first["method"] != api.NotifyEvent {
		t.Fatalf("want a notification first, got %v", first)
	}
	p.send(`{"jsonrpc":"2.0","id":4,"method":"file.stat","params":{"sandbox":"` + id + `","path":"f"}}`)
	var order []any
	texts := []string{first["params"].(map[string]any)["event"].(map[string]any)["text"].(string)}
	for len(order) < 3 {
		m := p.next()
		switch {
		case m["method"] == api.NotifyEvent:
			params := m["params"].(map[string]any)
			if params["id"] != float64(3) {
				t.Fatalf("notification for %v", params["id"])
			}
			ev := params["event"].(map[string]any)
			if tx, ok := ev["text"].(string); ok {
				texts = append(texts, tx)
			}
		case m["id"] != nil:
			order = append(order, m["id"])
			if m["id"] == float64(4) {
				// Now let the exec finish.
				p.send(`{"jsonrpc":"2.0","id":5,"method":"process.exec","params":{"sandbox":"` + id + `","args":["sh","-c","echo go > /workspace/fifo"],"concurrent":true}}`)
			}
		}
	}
	if order[0] != float64(4) || strings.Join(texts, "") != "a\nb\n" {
		t.Fatalf("answers in order %v, want the stat (4) first; exec output %q", order, texts)
	}
	for _, line := range []struct{ in, code string }{
		{`garbage`, "-32700"},
		{`{"jsonrpc":"1.0","id":9,"method":"sandbox.list"}`, "-32600"},
		{`{"jsonrpc":"2.0","id":9,"method":"no.such"}`, "-32601"},
		{`{"jsonrpc":"2.0","id":9,"method":"sandbox.get","params":{"sandbox":1}}`, "-32602"},
		{`{"jsonrpc":"2.0","id":9,"method":"sandbox.get","params":{"sandbox":"sb-nope"}}`, "-32000"},
	} {
		p.send(line.in)
		m := p.next()
		e, _ := m["error"].(map[string]any)
		if e == nil || jsonNumber(e["code"]) != line.code || e["data"] == nil {
			t.Errorf("%s: %v", line.in, m)
		}
	}
	p.send(`[{"jsonrpc":"2.0","id":10,"method":"sandbox.list"},{"jsonrpc":"2.0","method":"sandbox.list"},{"jsonrpc":"2.0","id":11,"method":"no.such"}]`)
	line, err := p.rd.ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	var batch []map[string]any
	if err := json.Unmarshal(line, &batch); err != nil || len(batch) != 2 {
		t.Fatalf("batch answer %s: %v", line, err)
	}
	// A cancelled request kills its process and is answered.
	p.send(`{"jsonrpc":"2.0","id":30,"method":"process.exec","params":{"sandbox":"` + id + `","args":["sh","-c","echo up; exec sleep 1000"],"stream":true}}`)
	if m := p.next(); m["method"] != api.NotifyEvent {
		t.Fatalf("want the exec's first event, got %v", m)
	}
	p.send(`{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":30}}`)
	for {
		m := p.next()
		if m["id"] == float64(30) {
			r, _ := m["result"].(map[string]any)
			if r["exit_reason"] != string(sandbox.ReasonKilled) {
				t.Fatalf("cancelled exec: %v", m)
			}
			break
		}
	}
	// End of input: the server returns.
	p.w.Close()
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ServeRPC did not return at end of input")
	}
}

func jsonNumber(v any) string {
	b, _ := json.Marshal(v)
	return strings.TrimSpace(string(b))
}
