package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// rpcWant is one expected Response object: code 0 for a result, else the
// error's code; id as raw JSON.
type rpcWant struct {
	code int
	id   string
}

// TestRPCSpec: JSON-RPC 2.0 to the letter (issue 17, item 8): -32700 with
// id null only for what is not JSON; JSON that is not a Request object is
// -32600, with its id when the id can be read; member names are
// case-sensitive; params are an object or an array; an empty batch is
// one -32600, a batch of non-objects one -32600 each; notifications,
// alone or in a batch, are never answered; a success always has result.
// Case by case from https://www.jsonrpc.org/specification, sections 4 to
// 7 and the examples.
func TestRPCSpec(t *testing.T) {
	h := newFakeHarness(t, nil)
	p := newRPCPeer(t, h)
	none := []rpcWant(nil)
	one := func(code int, id string) []rpcWant { return []rpcWant{{code, id}} }
	cases := []struct {
		in    string
		batch bool // the answer is an array
		want  []rpcWant
	}{
		{`garbage`, false, one(-32700, `null`)},
		{`{"jsonrpc":"2.0","method":"sandbox.list","id":1`, false, one(-32700, `null`)},
		{`[{"jsonrpc":"2.0","method":"sandbox.list","id":1},{"jsonrpc":"2.0","method"]`, false, one(-32700, `null`)},
		{`[]`, false, one(-32600, `null`)},
		{`[1]`, true, one(-32600, `null`)},
		{`[1,2,3]`, true, []rpcWant{{-32600, `null`}, {-32600, `null`}, {-32600, `null`}}},
		{`1`, false, one(-32600, `null`)},
		{`"sandbox.list"`, false, one(-32600, `null`)},
		{`null`, false, one(-32600, `null`)},
		{`{"foo":"boo"}`, false, one(-32600, `null`)},
		// The id is readable: the error carries it.
		{`{"jsonrpc":"2.0","id":7,"method":5}`, false, one(-32600, `7`)},
		{`{"jsonrpc":2,"id":"a","method":"sandbox.list"}`, false, one(-32600, `"a"`)},
		{`{"jsonrpc":"1.0","id":9,"method":"sandbox.list"}`, false, one(-32600, `9`)},
		{`{"id":9,"method":"sandbox.list"}`, false, one(-32600, `9`)},
		{`{"jsonrpc":"2.0","id":9}`, false, one(-32600, `9`)},
		{`{"jsonrpc":"2.0","id":9,"method":null}`, false, one(-32600, `9`)},
		{`{"jsonrpc":"2.0","id":9,"method":"sandbox.list","params":"bar"}`, false, one(-32600, `9`)},
		{`{"jsonrpc":"2.0","id":9,"method":"sandbox.list","params":null}`, false, one(-32600, `9`)},
		{`{"jsonrpc":"2.0","id":{"a":1},"method":"sandbox.list"}`, false, one(-32600, `null`)},
		{`{"jsonrpc":"2.0","id":true,"method":"sandbox.list"}`, false, one(-32600, `null`)},
		// Member names are case-sensitive: no "id" member here.
		{`{"JSONRPC":"2.0","ID":9,"METHOD":"sandbox.list"}`, false, one(-32600, `null`)},
		{`{"jsonrpc":"2.0","id":9,"method":"no.such"}`, false, one(-32601, `9`)},
		{`{"jsonrpc":"2.0","id":9,"method":""}`, false, one(-32601, `9`)},
		{`{"jsonrpc":"2.0","id":9,"method":"$/cancelRequest","params":{"id":1}}`, false, one(-32601, `9`)},
		{`{"jsonrpc":"2.0","id":9,"method":"sandbox.get","params":{"sandbox":1}}`, false, one(-32602, `9`)},
		{`{"jsonrpc":"2.0","id":9,"method":"sandbox.get","params":["sb-0123456789abcdef"]}`, false, one(-32602, `9`)},
		{`{"jsonrpc":"2.0","id":9,"method":"sandbox.get","params":{"sandbox":"sb-0123456789abcdef"}}`, false, one(-32000, `9`)},
		// Valid requests: the id as sent, null and fractions included.
		{`{"jsonrpc":"2.0","id":null,"method":"sandbox.list"}`, false, one(0, `null`)},
		{`{"jsonrpc":"2.0","id":1.5,"method":"sandbox.list"}`, false, one(0, `1.5`)},
		{` {"jsonrpc":"2.0","method":"sandbox.list","params":{},"id":"x"} `, false, one(0, `"x"`)},
		// Notifications: never answered, even when they fail.
		{`{"jsonrpc":"2.0","method":"sandbox.list"}`, false, none},
		{`{"jsonrpc":"2.0","method":"no.such"}`, false, none},
		{`{"jsonrpc":"2.0","method":"sandbox.get","params":{"sandbox":1}}`, false, none},
		{`[{"jsonrpc":"2.0","method":"sandbox.list"},{"jsonrpc":"2.0","method":"no.such"}]`, false, none},
		// The specification's mixed batch.
		{`[{"jsonrpc":"2.0","method":"sandbox.list","id":"1"},{"jsonrpc":"2.0","method":"sandbox.list"},{"foo":"boo"},{"jsonrpc":"2.0","method":"foo.get","params":{"name":"myself"},"id":"5"}]`,
			true, []rpcWant{{0, `"1"`}, {-32600, `null`}, {-32601, `"5"`}}},
	}
	for i, c := range cases {
		p.send(c.in)
		// A request after each case bounds the wait for a notification,
		// which gets no answer.
		sentinel := fmt.Sprintf(`"sentinel-%d"`, i)
		p.send(`{"jsonrpc":"2.0","id":` + sentinel + `,"method":"sandbox.list"}`)
		var got []rpcWant
		batch, done := false, false
		for {
			line, err := p.rd.ReadBytes('\n')
			if err != nil {
				t.Fatalf("%s: reading: %v", c.in, err)
			}
			var msgs []json.RawMessage
			if bytes.HasPrefix(bytes.TrimSpace(line), []byte("[")) {
				batch = true
				if err := json.Unmarshal(line, &msgs); err != nil {
					t.Fatalf("%s: %q: %v", c.in, line, err)
				}
			} else {
				msgs = []json.RawMessage{line}
			}
			for _, m := range msgs {
				w, id := checkResponse(t, c.in, m)
				if id == sentinel {
					done = true
					continue
				}
				got = append(got, w)
			}
			// Requests run concurrently: the case's answers may follow
			// the sentinel's.
			if done && len(got) >= len(c.want) {
				break
			}
		}
		if batch != c.batch || !sameWants(got, c.want) {
			t.Errorf("%s\n  got  %v (array %v)\n  want %v (array %v)", c.in, got, batch, c.want, c.batch)
		}
	}
}

// checkResponse checks the shape of a Response object (jsonrpc "2.0", an
// id member, exactly one of result and error) and returns its code and
// id.
func checkResponse(t *testing.T, in string, raw json.RawMessage) (rpcWant, string) {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s: answer %q: %v", in, raw, err)
	}
	id, hasID := m["id"]
	_, hasResult := m["result"]
	e, hasError := m["error"]
	if string(m["jsonrpc"]) != `"2.0"` || !hasID || hasResult == hasError {
		t.Errorf("%s: not a Response object: %s", in, raw)
	}
	w := rpcWant{id: string(id)}
	if hasError {
		var eo struct {
			Code    *int    `json:"code"`
			Message *string `json:"message"`
		}
		if json.Unmarshal(e, &eo) != nil || eo.Code == nil || eo.Message == nil {
			t.Errorf("%s: error without code or message: %s", in, raw)
		} else {
			w.code = *eo.Code
		}
	}
	return w, strings.TrimSpace(string(id))
}

func sameWants(got, want []rpcWant) bool {
	if len(got) != len(want) {
		return false
	}
	// A batch may be answered in any order.
	left := append([]rpcWant(nil), want...)
	for _, g := range got {
		found := false
		for i, w := range left {
			if w == g {
				left = append(left[:i], left[i+1:]...)
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
