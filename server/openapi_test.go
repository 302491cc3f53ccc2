package server

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/agent/model/modeltest"
	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
)

// The tests of this file run the real server and hold its answers against
// the committed OpenAPI document, docs/openapi.json: every operation it
// lists is called, every status must be one it lists for the operation,
// and every JSON body, NDJSON line and error must validate against the
// schema it documents (objects are closed: a key the document does not
// list is a failure).

// oaDoc is the decoded OpenAPI document.
type oaDoc struct {
	root map[string]any
	ops  map[string]*oaOp // by operationId
}

// oaOp is one documented operation.
type oaOp struct {
	id, method, path string
	o                map[string]any
}

func oaLoad(t *testing.T) *oaDoc {
	t.Helper()
	raw, err := os.ReadFile("../docs/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	d := &oaDoc{ops: map[string]*oaOp{}}
	if err := json.Unmarshal(raw, &d.root); err != nil {
		t.Fatalf("docs/openapi.json: %v", err)
	}
	if d.root["openapi"] != "3.1.0" {
		t.Fatalf("docs/openapi.json: openapi = %v", d.root["openapi"])
	}
	for path, item := range d.root["paths"].(map[string]any) {
		for method, o := range item.(map[string]any) {
			om, ok := o.(map[string]any)
			if !ok || method == "parameters" {
				continue
			}
			id, _ := om["operationId"].(string)
			if id == "" || d.ops[id] != nil {
				t.Fatalf("%s %s: operationId %q missing or taken", method, path, id)
			}
			d.ops[id] = &oaOp{id: id, method: strings.ToUpper(method), path: path, o: om}
		}
	}
	return d
}

// resolve follows a local $ref.
func (d *oaDoc) resolve(ref string) map[string]any {
	var cur any = d.root
	for _, p := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		m, _ := cur.(map[string]any)
		cur = m[p]
	}
	m, _ := cur.(map[string]any)
	return m
}

// deref resolves v when it is a $ref.
func (d *oaDoc) deref(v map[string]any) map[string]any {
	for v != nil {
		r, ok := v["$ref"].(string)
		if !ok {
			return v
		}
		v = d.resolve(r)
	}
	return v
}

func oaList(v any) []any {
	l, _ := v.([]any)
	return l
}

// validate checks the JSON value v (decoded with UseNumber) against the
// schema s and returns what is wrong with it.
func (d *oaDoc) validate(s map[string]any, v any, at string) []string {
	if r, ok := s["$ref"].(string); ok {
		rs := d.resolve(r)
		if rs == nil {
			return []string{at + ": unresolved " + r}
		}
		return d.validate(rs, v, at)
	}
	var errs []string
	for _, sub := range oaList(s["allOf"]) {
		errs = append(errs, d.validate(sub.(map[string]any), v, at)...)
	}
	if anyOf := oaList(s["anyOf"]); len(anyOf) > 0 {
		ok := false
		for _, sub := range anyOf {
			if len(d.validate(sub.(map[string]any), v, at)) == 0 {
				ok = true
				break
			}
		}
		if !ok {
			errs = append(errs, fmt.Sprintf("%s: %v matches none of anyOf", at, v))
		}
	}
	if enum, ok := s["enum"]; ok && !slices.ContainsFunc(oaList(enum), func(e any) bool { return e == v }) {
		errs = append(errs, fmt.Sprintf("%s: %v is not one of %v", at, v, enum))
	}
	var types []string
	switch ty := s["type"].(type) {
	case string:
		types = []string{ty}
	case []any:
		for _, x := range ty {
			types = append(types, x.(string))
		}
	}
	if len(types) == 0 {
		return errs
	}
	if !slices.ContainsFunc(types, func(ty string) bool { return oaTypeOK(ty, v) }) {
		return append(errs, fmt.Sprintf("%s: %v (%T) is not of type %v", at, v, v, types))
	}
	switch x := v.(type) {
	case map[string]any:
		props, closed := s["properties"].(map[string]any)
		for _, r := range oaList(s["required"]) {
			if _, ok := x[r.(string)]; !ok {
				errs = append(errs, fmt.Sprintf("%s: required %q is missing", at, r))
			}
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if ps, ok := props[k].(map[string]any); ok {
				errs = append(errs, d.validate(ps, x[k], at+"."+k)...)
			} else if ap, ok := s["additionalProperties"].(map[string]any); ok {
				errs = append(errs, d.validate(ap, x[k], at+"."+k)...)
			} else if closed {
				errs = append(errs, fmt.Sprintf("%s: %q is not a documented property", at, k))
			}
		}
	case []any:
		if items, ok := s["items"].(map[string]any); ok {
			for i, e := range x {
				errs = append(errs, d.validate(items, e, fmt.Sprintf("%s[%d]", at, i))...)
			}
		}
	case string:
		switch s["format"] {
		case "date-time":
			if _, err := time.Parse(time.RFC3339Nano, x); err != nil {
				errs = append(errs, fmt.Sprintf("%s: %q is not a date-time", at, x))
			}
		case "byte":
			if _, err := base64.StdEncoding.DecodeString(x); err != nil {
				errs = append(errs, fmt.Sprintf("%s: %q is not base64", at, x))
			}
		}
	case json.Number:
		if m, ok := s["minimum"].(float64); ok {
			if f, _ := x.Float64(); f < m {
				errs = append(errs, fmt.Sprintf("%s: %s is below the minimum %v", at, x, m))
			}
		}
	}
	return errs
}

func oaTypeOK(ty string, v any) bool {
	switch ty {
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "null":
		return v == nil
	case "number":
		n, ok := v.(json.Number)
		if ok {
			_, err := n.Float64()
			return err == nil
		}
	case "integer":
		n, ok := v.(json.Number)
		if ok {
			if _, err := strconv.ParseInt(n.String(), 10, 64); err == nil {
				return true
			}
			_, err := strconv.ParseUint(n.String(), 10, 64)
			return err == nil
		}
	}
	return false
}

// oaDecode decodes one JSON value, numbers kept exact.
func oaDecode(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("more than one JSON value")
	}
	return v, nil
}

// checkAnswer holds an answer against what the document says operation
// o answers with its status: the status must be listed, the media type
// must be one of the answer's, and the body must validate.
func (d *oaDoc) checkAnswer(t *testing.T, label string, o map[string]any, r reply) {
	t.Helper()
	responses, _ := o["responses"].(map[string]any)
	resp := d.deref(mapOf(responses[strconv.Itoa(r.status)]))
	if resp == nil {
		t.Errorf("%s: status %d is not documented (body %.300s)", label, r.status, r.body)
		return
	}
	d.checkBody(t, label, resp, r)
}

func mapOf(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// checkBody validates the body of r against the documented answer resp.
func (d *oaDoc) checkBody(t *testing.T, label string, resp map[string]any, r reply) {
	t.Helper()
	content, _ := resp["content"].(map[string]any)
	mt, _, err := mime.ParseMediaType(r.header.Get("Content-Type"))
	if err != nil {
		t.Errorf("%s: Content-Type %q: %v", label, r.header.Get("Content-Type"), err)
		return
	}
	media := mapOf(content[mt])
	if media == nil {
		var list []string
		for k := range content {
			list = append(list, k)
		}
		t.Errorf("%s: %d answered %s, documented %v", label, r.status, mt, list)
		return
	}
	schema := mapOf(media["schema"])
	switch mt {
	case "application/json":
		v, err := oaDecode(r.body)
		if err != nil {
			t.Errorf("%s: body %.300q: %v", label, r.body, err)
			return
		}
		for _, e := range d.validate(schema, v, label) {
			t.Error(e)
		}
	case "application/x-ndjson":
		lines := bytes.Split(bytes.TrimSuffix(r.body, []byte("\n")), []byte("\n"))
		if len(r.body) == 0 {
			lines = nil
		}
		for i, line := range lines {
			v, err := oaDecode(line)
			if err != nil {
				t.Errorf("%s: line %d %q: %v", label, i+1, line, err)
				continue
			}
			for _, e := range d.validate(schema, v, fmt.Sprintf("%s line %d", label, i+1)) {
				t.Error(e)
			}
		}
	default:
		if ty, _ := schema["type"].(string); ty != "string" {
			t.Errorf("%s: %s is documented with schema %v", label, mt, schema)
		}
	}
}

// oaCall is one request of the conformance run.
type oaCall struct {
	op    string            // operationId
	vals  map[string]string // path values
	query url.Values
	body  any    // JSON value, or []byte for a raw body
	ct    string // the body's Content-Type, of those documented (needed when several are)
	token string
	want  int // expected status; 0: the operation's 2xx
	check func(t *testing.T, r reply)
}

// oaRunner sends calls described by the document.
type oaRunner struct {
	t       *testing.T
	h       *harness
	doc     *oaDoc
	covered map[string]bool
}

// fill puts path values into a documented path.
func fill(path string, vals map[string]string) string {
	for k, v := range vals {
		path = strings.ReplaceAll(path, "{"+k+"}", url.PathEscape(v))
	}
	return path
}

// successStatus is the operation's documented 2xx status.
func successStatus(o map[string]any) int {
	for k := range mapOf(o["responses"]) {
		if n, err := strconv.Atoi(k); err == nil && n >= 200 && n < 300 {
			return n
		}
	}
	return 0
}

// call sends c as the document says operation c.op travels, and checks
// the answer.
func (rn *oaRunner) call(c oaCall) reply {
	t := rn.t
	t.Helper()
	op := rn.doc.ops[c.op]
	if op == nil {
		t.Fatalf("operation %s is not in docs/openapi.json", c.op)
	}
	label := c.op
	path := fill(op.path, c.vals)
	if strings.Contains(path, "{") {
		t.Fatalf("%s: path %s has unfilled parameters", label, path)
	}
	// Every query parameter sent is documented, every required one is sent.
	params := map[string]map[string]any{}
	for _, p := range oaList(op.o["parameters"]) {
		pm := p.(map[string]any)
		params[pm["in"].(string)+":"+pm["name"].(string)] = pm
		if pm["in"] == "query" && pm["required"] == true && c.query.Get(pm["name"].(string)) == "" && c.want == 0 {
			t.Errorf("%s: required query parameter %s not sent", label, pm["name"])
		}
	}
	for k := range c.query {
		if params["query:"+k] == nil && c.want == 0 {
			t.Errorf("%s: query parameter %s is not documented", label, k)
		}
	}
	if len(c.query) > 0 {
		path += "?" + c.query.Encode()
	}
	var ct string
	var body []byte
	if c.body != nil {
		rb := mapOf(op.o["requestBody"])
		content := mapOf(rb["content"])
		if c.ct != "" {
			mt, _, _ := mime.ParseMediaType(c.ct)
			if content[mt] == nil {
				t.Fatalf("%s: sends %s, documented %v", label, mt, rb)
			}
			content = map[string]any{mt: content[mt]}
		}
		if len(content) != 1 {
			t.Fatalf("%s: sends a body, documented %v", label, rb)
		}
		for k, m := range content {
			ct = k
			if c.ct != "" {
				ct = c.ct // with its parameters (a multipart boundary)
			}
			if b, ok := c.body.([]byte); ok {
				body = b
			} else {
				j, err := json.Marshal(c.body)
				if err != nil {
					t.Fatal(err)
				}
				body = j
				if ct != "application/json" {
					t.Fatalf("%s: JSON body, documented %s", label, ct)
				}
				v, _ := oaDecode(j)
				if c.want == 0 {
					for _, e := range rn.doc.validate(mapOf(mapOf(m)["schema"]), v, label+" request") {
						t.Error(e)
					}
				}
			}
		}
	}
	tok := c.token
	if tok == "" {
		tok = tokenA
	}
	r := rn.h.send(op.method, path, tok, ct, body)
	want := c.want
	if want == 0 {
		want = successStatus(op.o)
	}
	if r.status != want {
		t.Errorf("%s %s: status %d, want %d (body %.400s)", op.method, path, r.status, want, r.body)
	}
	rn.doc.checkAnswer(t, fmt.Sprintf("%s (%s %s)", label, op.method, path), op.o, r)
	if c.check != nil && r.status == want {
		c.check(t, r)
	}
	rn.covered[c.op] = true
	return r
}

// eventsOf decodes an NDJSON body.
func eventsOf(t *testing.T, b []byte) []api.Event {
	t.Helper()
	return events(t, b)
}

func TestOpenAPIConformance(t *testing.T) {
	doc := oaLoad(t)
	// The agent runs' model: a task "block" is held until the test ends.
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	models := modeltest.NewOpenAI(t)
	models.Respond(func(r modeltest.Received) modeltest.Turn {
		if len(r.Messages) > 0 && r.Messages[0].Text == "block" {
			return modeltest.Turn{Hold: block}
		}
		return modeltest.Turn{Text: "done"}
	})
	h := newHarness(t, func(c *Config) {
		withLayers(t)(c)
		withProviders(t, []fakeProvider{{"fake", nil, models}})(c)
		// The unauthenticated subtest sends two bad tokens to every
		// route: more than a source's burst of failures (TestAuthFlood).
		c.AuthFailBurst = 1 << 20
	})
	rn := &oaRunner{t: t, h: h, doc: doc, covered: map[string]bool{}}

	// Sandboxes.
	var sb api.Sandbox
	rn.call(oaCall{op: api.OpSandboxCreate, body: api.CreateSandbox{Hostname: "oa", Labels: map[string]string{"suite": "openapi"},
		TimeoutMs: 600_000, IdleTimeoutMs: 600_000, Network: &api.Network{Mode: "proxy", AllowDomains: []string{"example.com"}, DenyDomains: []string{"bad.example.com"}}}, check: func(t *testing.T, r reply) { r.decode(t, &sb) }})
	if sb.ID == "" {
		t.Fatal("no sandbox")
	}
	in := map[string]string{"sandbox": sb.ID}
	rn.call(oaCall{op: api.OpSandboxList, query: url.Values{"state": {"running"}, "limit": {"10"}}, check: func(t *testing.T, r reply) {
		var l api.SandboxList
		r.decode(t, &l)
		if len(l.Sandboxes) != 1 || l.Sandboxes[0].ID != sb.ID {
			t.Errorf("list: %s", r.body)
		}
	}})
	rn.call(oaCall{op: api.OpSandboxList, query: url.Values{"state": {"sideways"}}, want: http.StatusBadRequest})
	rn.call(oaCall{op: api.OpSandboxList, query: url.Values{"bogus": {"1"}}, want: http.StatusBadRequest})
	rn.call(oaCall{op: api.OpSandboxGet, vals: in})
	// Another tenant's sandbox is reported like a missing one.
	rn.call(oaCall{op: api.OpSandboxGet, vals: in, token: tokenB, want: http.StatusNotFound})
	rn.call(oaCall{op: api.OpSandboxGet, vals: map[string]string{"sandbox": "no-such-sandbox"}, want: http.StatusNotFound})
	// The network changes: the lists, then an address entry without the
	// managed policy's allow_cidr_entries, and mode open.
	rn.call(oaCall{op: api.OpSandboxNetwork, vals: in, body: api.SetNetwork{Mode: "proxy", AllowDomains: []string{"example.com", "bad.example.com"}, DenyDomains: []string{"bad.example.com"}},
		check: func(t *testing.T, r reply) {
			var n api.Network
			r.decode(t, &n)
			if len(n.Dropped) != 1 || n.Dropped[0].Entry != "bad.example.com" {
				t.Errorf("network: %s", r.body)
			}
		}})
	rn.call(oaCall{op: api.OpSandboxNetwork, vals: in, body: api.SetNetwork{AllowDomains: []string{"10.0.0.0/8"}}, want: http.StatusForbidden})
	rn.call(oaCall{op: api.OpSandboxNetwork, vals: in, body: api.SetNetwork{Mode: "open"}, want: http.StatusConflict})
	rn.call(oaCall{op: api.OpSandboxNetwork, vals: in, body: api.SetNetwork{Mode: "bridge"}, want: http.StatusBadRequest})

	// Processes run to completion.
	rn.call(oaCall{op: api.OpExec, vals: in, body: api.Exec{Args: []string{"sh", "-c", "echo out; echo err >&2"},
		Env: []string{"OA_SECRET=hunter2-value"}}, check: func(t *testing.T, r reply) {
		var res struct{ Stdout, Stderr string }
		r.decode(t, &res)
		if res.Stdout != "out\n" || res.Stderr != "err\n" {
			t.Errorf("exec: %s", r.body)
		}
	}})
	rn.call(oaCall{op: api.OpExec, vals: in, body: api.Exec{Args: []string{"sh", "-c", `echo text; printf '\377\376'; echo e >&2`}, Stream: true},
		check: func(t *testing.T, r reply) {
			evs := eventsOf(t, r.body)
			if len(evs) == 0 || evs[len(evs)-1].Type != api.EventExit || evs[len(evs)-1].Result == nil {
				t.Errorf("exec stream: %s", r.body)
			}
		}})
	rn.call(oaCall{op: api.OpExec, vals: in, body: api.Exec{}, want: http.StatusBadRequest})
	rn.call(oaCall{op: api.OpExec, vals: in, body: map[string]any{"args": []string{"true"}, "bogus": 1}, want: http.StatusBadRequest})

	// Background processes.
	var p1 api.Process
	rn.call(oaCall{op: api.OpStart, vals: in, body: api.Exec{Args: []string{"sh", "-c", "cat; echo done >&2"}, OutputLimit: 65536},
		check: func(t *testing.T, r reply) { r.decode(t, &p1) }})
	if p1.ID == 0 {
		t.Fatal("no process")
	}
	pin := map[string]string{"sandbox": sb.ID, "process": strconv.FormatUint(p1.ID, 10)}
	rn.call(oaCall{op: api.OpProcessList, vals: in})
	rn.call(oaCall{op: api.OpProcessGet, vals: pin})
	rn.call(oaCall{op: api.OpProcessGet, vals: map[string]string{"sandbox": sb.ID, "process": "99999"}, want: http.StatusNotFound})
	rn.call(oaCall{op: api.OpProcessGet, vals: map[string]string{"sandbox": sb.ID, "process": "x"}, want: http.StatusBadRequest})
	rn.call(oaCall{op: api.OpStdin, vals: pin, body: api.Stdin{Data: "hello\n"}})
	rn.call(oaCall{op: api.OpStdin, vals: pin, body: api.Stdin{DataBase64: []byte{0xff, '\n'}, EOF: true}})
	rn.call(oaCall{op: api.OpWait, vals: pin, body: api.ProcessRef{TimeoutMs: 30_000}, check: func(t *testing.T, r reply) {
		var p api.Process
		r.decode(t, &p)
		if p.State != api.ProcExited {
			t.Errorf("wait: %s", r.body)
		}
	}})
	rn.call(oaCall{op: api.OpStdin, vals: pin, body: api.Stdin{Data: "late"}, want: http.StatusGone})
	rn.call(oaCall{op: api.OpOutput, vals: pin, query: url.Values{"after": {"0"}, "follow": {"true"}}, check: func(t *testing.T, r reply) {
		evs := eventsOf(t, r.body)
		if len(evs) < 2 || evs[len(evs)-1].Type != api.EventExit {
			t.Errorf("output: %s", r.body)
		}
		var out []byte
		for _, e := range evs {
			if e.Type == api.EventStdout {
				out = append(out, e.Output()...)
			}
		}
		if string(out) != "hello\n\xff\n" {
			t.Errorf("output: stdout %q", out)
		}
	}})
	var p2 api.Process
	rn.call(oaCall{op: api.OpStart, vals: in, body: api.Exec{Args: []string{"sleep", "60"}}, check: func(t *testing.T, r reply) { r.decode(t, &p2) }})
	if p2.ID == 0 {
		t.Fatal("no process")
	}
	p2in := map[string]string{"sandbox": sb.ID, "process": strconv.FormatUint(p2.ID, 10)}
	rn.call(oaCall{op: api.OpOutput, vals: p2in})
	rn.call(oaCall{op: api.OpSignal, vals: p2in, body: api.Signal{Signal: "TERM"}})
	rn.call(oaCall{op: api.OpSignal, vals: p2in, body: api.Signal{Signal: "NOPE"}, want: http.StatusBadRequest})
	rn.call(oaCall{op: api.OpWait, vals: p2in, body: api.ProcessRef{TimeoutMs: 30_000}})

	// Files.
	content := []byte("hello openapi\n")
	rn.call(oaCall{op: api.OpFileWrite, vals: in, query: url.Values{"path": {"/workspace/a.txt"}, "mode": {"0600"}}, body: content})
	rn.call(oaCall{op: api.OpFileRead, vals: in, query: url.Values{"path": {"/workspace/a.txt"}}, check: func(t *testing.T, r reply) {
		if !bytes.Equal(r.body, content) {
			t.Errorf("read: %q", r.body)
		}
	}})
	rn.call(oaCall{op: api.OpFileRead, vals: in, query: url.Values{"path": {"/workspace/missing"}}, want: http.StatusNotFound,
		check: func(t *testing.T, r reply) {
			if e := r.apiErr(t); e.Code != api.CodeFile || e.Errno != "ENOENT" {
				t.Errorf("read missing: %s", r.body)
			}
		}})
	rn.call(oaCall{op: api.OpFileRead, vals: in, query: url.Values{"path": {"/workspace/a.txt"}, "max_bytes": {"3"}}, want: http.StatusRequestEntityTooLarge})
	rn.call(oaCall{op: api.OpFileRead, vals: in, want: http.StatusBadRequest})
	rn.call(oaCall{op: api.OpFileStat, vals: in, query: url.Values{"path": {"/workspace/a.txt"}}})
	rn.call(oaCall{op: api.OpFileMkdir, vals: in, body: api.Mkdir{Path: "/workspace/d/e", Parents: true, Mode: "0755"}})
	rn.call(oaCall{op: api.OpFileMkdir, vals: in, body: api.Mkdir{Path: "/workspace/d/e"}, want: http.StatusConflict})
	rn.call(oaCall{op: api.OpFileMove, vals: in, body: api.Move{From: "/workspace/a.txt", To: "/workspace/d/a.txt"}})
	rn.call(oaCall{op: api.OpFileList, vals: in, query: url.Values{"path": {"/workspace/d"}}, check: func(t *testing.T, r reply) {
		var l api.DirList
		r.decode(t, &l)
		if len(l.Entries) != 2 {
			t.Errorf("list: %s", r.body)
		}
	}})
	var arc bytes.Buffer
	tw := tar.NewWriter(&arc)
	up := []byte("uploaded\n")
	if err := tw.WriteHeader(&tar.Header{Name: "up.txt", Mode: 0o644, Size: int64(len(up)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	tw.Write(up)
	tw.Close()
	rn.call(oaCall{op: api.OpFileUpload, vals: in, query: url.Values{"path": {"/workspace/d"}}, body: arc.Bytes()})
	rn.call(oaCall{op: api.OpFileUpload, vals: in, query: url.Values{"path": {"/workspace/d"}}, body: []byte("not a tar"), want: http.StatusBadRequest})
	rn.call(oaCall{op: api.OpFileDownload, vals: in, query: url.Values{"path": {"/workspace/d"}}, check: func(t *testing.T, r reply) {
		tr := tar.NewReader(bytes.NewReader(r.body))
		var names []string
		for {
			hdr, err := tr.Next()
			if err != nil {
				if err != io.EOF {
					t.Errorf("download: %v", err)
				}
				break
			}
			names = append(names, hdr.Name)
		}
		joined := strings.Join(names, " ")
		if !strings.Contains(joined, "up.txt") || !strings.Contains(joined, "a.txt") {
			t.Errorf("download: entries %v", names)
		}
	}})
	rn.call(oaCall{op: api.OpFileRemove, vals: in, body: api.Remove{Path: "/workspace/d"}, want: http.StatusConflict})
	rn.call(oaCall{op: api.OpFileRemove, vals: in, body: api.Remove{Path: "/workspace/d", Recursive: true}})

	// A second exec while one runs is busy unless concurrent.
	done := make(chan reply, 1)
	go func() {
		j, _ := json.Marshal(api.Exec{Args: []string{"sh", "-c", "touch /workspace/started; sleep 3"}})
		done <- h.send("POST", "/v1/sandboxes/"+sb.ID+"/exec", tokenA, "application/json", j)
	}()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if h.send("GET", "/v1/sandboxes/"+sb.ID+"/files/stat?path=/workspace/started", tokenA, "", nil).status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first exec did not start")
		}
	}
	rn.call(oaCall{op: api.OpExec, vals: in, body: api.Exec{Args: []string{"true"}}, want: http.StatusConflict, check: func(t *testing.T, r reply) {
		if e := r.apiErr(t); e.Code != api.CodeBusy {
			t.Errorf("busy: %s", r.body)
		}
	}})
	rn.call(oaCall{op: api.OpExec, vals: in, body: api.Exec{Args: []string{"true"}, Concurrent: true}})
	if r := <-done; r.status != http.StatusOK {
		t.Errorf("the first exec: %d %s", r.status, r.body)
	}

	// Templates and snapshots: capture, list, restore, fork, delete.
	rn.call(oaCall{op: api.OpTemplateList, check: func(t *testing.T, r reply) {
		var l api.TemplateList
		r.decode(t, &l)
		if len(l.Templates) != 1 || l.Templates[0].Name != "host" {
			t.Errorf("templates: %s", r.body)
		}
	}})
	var snap api.Snapshot
	rn.call(oaCall{op: api.OpSnapshotCreate, vals: in, body: api.CreateSnapshot{}, check: func(t *testing.T, r reply) { r.decode(t, &snap) }})
	if snap.ID == "" {
		t.Fatal("no snapshot")
	}
	sin := map[string]string{"snapshot": snap.ID}
	rn.call(oaCall{op: api.OpSnapshotList})
	rn.call(oaCall{op: api.OpSnapshotGet, vals: sin})
	rn.call(oaCall{op: api.OpSnapshotGet, vals: map[string]string{"snapshot": "snap-00000000000000000000"}, want: http.StatusNotFound})
	rn.call(oaCall{op: api.OpSandboxRestore, vals: in, body: api.RestoreSandbox{Snapshot: snap.ID}})
	rn.call(oaCall{op: api.OpSandboxRestore, vals: in, body: api.RestoreSandbox{}, want: http.StatusBadRequest})
	var forks api.SandboxList
	rn.call(oaCall{op: api.OpSnapshotFork, vals: sin, body: api.ForkSnapshot{Count: 1, Sandbox: api.CreateSandbox{Labels: map[string]string{"fork": "1"}}},
		check: func(t *testing.T, r reply) { r.decode(t, &forks) }})
	rn.call(oaCall{op: api.OpSnapshotFork, vals: sin, body: api.ForkSnapshot{Count: 100}, want: http.StatusBadRequest})
	rn.call(oaCall{op: api.OpSnapshotDelete, vals: sin, want: http.StatusConflict})
	if len(forks.Sandboxes) == 1 {
		var child api.Snapshot
		fin := map[string]string{"sandbox": forks.Sandboxes[0].ID}
		rn.call(oaCall{op: api.OpSnapshotCreate, vals: fin, body: api.CreateSnapshot{}, check: func(t *testing.T, r reply) { r.decode(t, &child) }})
		rn.call(oaCall{op: api.OpSnapshotDelete, vals: map[string]string{"snapshot": child.ID}})
	}

	// Audit: the caller's events; env values are never recorded.
	rn.call(oaCall{op: api.OpAuditQuery, query: url.Values{"limit": {"1000"}}, check: func(t *testing.T, r reply) {
		if bytes.Contains(r.body, []byte("hunter2-value")) {
			t.Errorf("the audit holds an env value: %s", r.body)
		}
		if !bytes.Contains(r.body, []byte(`"env_keys":["OA_SECRET"]`)) {
			t.Errorf("the audit lacks env_keys: %.2000s", r.body)
		}
	}})
	rn.call(oaCall{op: api.OpAuditQuery, query: url.Values{"sandbox": {sb.ID}, "kind": {"file.write"}, "since": {time.Now().Add(-time.Hour).Format(time.RFC3339)}}})
	rn.call(oaCall{op: api.OpAuditQuery, query: url.Values{"limit": {"1000000"}}, want: http.StatusBadRequest})

	// Policy and approvals: an ask rule holds a streamed exec in an
	// approval that the follow stream shows; an approver answers it.
	writePolicy(t, h.user, "version = 1\nask = [\"Exec(touch /workspace/asked)\"]\n")
	rn.call(oaCall{op: api.OpApprovalList, query: url.Values{"state": {"all"}, "sandbox": {sb.ID}}})
	rn.call(oaCall{op: api.OpApprovalList, query: url.Values{"state": {"sideways"}}, want: http.StatusBadRequest})
	folCtx, stopFollow := context.WithCancel(context.Background())
	lop := doc.ops[api.OpApprovalList]
	freq, _ := http.NewRequestWithContext(folCtx, "GET", h.srv.URL+lop.path+"?follow=true", nil)
	freq.Header.Set("Authorization", "Bearer "+tokenA)
	fresp, err := h.srv.Client().Do(freq)
	if err != nil {
		t.Fatal(err)
	}
	fol := bufio.NewReader(fresp.Body)
	nextApproval := func(state string) api.Approval {
		t.Helper()
		for {
			line, err := fol.ReadBytes('\n')
			if err != nil {
				t.Fatalf("follow: %v", err)
			}
			doc.checkAnswer(t, "approvals.list follow", lop.o, reply{status: fresp.StatusCode, header: fresp.Header, body: line})
			var ev api.Event
			if err := json.Unmarshal(line, &ev); err != nil || ev.Approval == nil {
				t.Fatalf("follow: %q", line)
			}
			if ev.Approval.State == state {
				return *ev.Approval
			}
		}
	}
	asked := h.async(context.Background(), "POST", "/v1/sandboxes/"+sb.ID+"/exec", tokenA, api.Exec{Args: []string{"touch", "/workspace/asked"}, Stream: true})
	ap := nextApproval(api.ApprovalPending)
	apIn := map[string]string{"id": ap.ID}
	rn.call(oaCall{op: api.OpApprovalGet, vals: apIn})
	rn.call(oaCall{op: api.OpApprovalGet, vals: apIn, token: tokenB, want: http.StatusNotFound})
	rn.call(oaCall{op: api.OpApprovalAnswer, vals: apIn, body: api.AnswerApproval{Decision: "allow"}, want: http.StatusForbidden})
	rn.call(oaCall{op: api.OpApprovalAnswer, vals: apIn, token: approverA, body: api.AnswerApproval{Decision: "yes"}, want: http.StatusBadRequest})
	rn.call(oaCall{op: api.OpApprovalAnswer, vals: apIn, token: approverA, body: api.AnswerApproval{Decision: "allow", Scope: "once", Reason: "checked"}})
	rn.call(oaCall{op: api.OpApprovalAnswer, vals: apIn, token: approverA, body: api.AnswerApproval{Decision: "deny"}, want: http.StatusConflict})
	nextApproval(api.ApprovalAllowed)
	stopFollow()
	fresp.Body.Close()
	if r := await(t, asked); r.status != http.StatusOK {
		t.Errorf("the approved exec: %d %s", r.status, r.body)
	} else {
		doc.checkAnswer(t, "process.exec after an approval", doc.ops[api.OpExec].o, r)
	}
	rn.call(oaCall{op: api.OpExec, vals: in, body: api.Exec{Args: []string{"touch", "/workspace/x"}, Policy: &api.CallRules{Deny: []string{"Exec(touch *)"}}},
		want: http.StatusForbidden, check: func(t *testing.T, r reply) {
			if e := r.apiErr(t); e.Code != api.CodePolicyDenied || e.Rule != "deny Exec(touch *)" || e.Source != "per-call exec deny[0]" {
				t.Errorf("policy_denied: %s", r.body)
			}
		}})
	rn.call(oaCall{op: api.OpStart, vals: in, body: api.Exec{Args: []string{"touch", "/workspace/x"}, Policy: &api.CallRules{Deny: []string{"Exec(touch *)"}}}, want: http.StatusForbidden})
	writePolicy(t, h.user, "version = 1\n")

	// JSON bodies must be JSON.
	op := doc.ops[api.OpFileMkdir]
	r := h.send(op.method, fill(op.path, in), tokenA, "text/plain", []byte(`{"path":"x"}`))
	if r.status != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain body: %d %s", r.status, r.body)
	}
	doc.checkAnswer(t, "mkdir text/plain", op.o, r)

	// Deleting answers with the stopped sandbox, which stays readable.
	rn.call(oaCall{op: api.OpSandboxDelete, vals: in, check: func(t *testing.T, r reply) {
		var s api.Sandbox
		r.decode(t, &s)
		if s.State != api.StateStopped || s.EndReason != api.EndDeleted {
			t.Errorf("delete: %s", r.body)
		}
	}})
	rn.call(oaCall{op: api.OpSandboxGet, vals: in})
	rn.call(oaCall{op: api.OpSandboxList, query: url.Values{"state": {"stopped"}}})
	rn.call(oaCall{op: api.OpExec, vals: in, body: api.Exec{Args: []string{"true"}}, want: http.StatusConflict})
	rn.call(oaCall{op: api.OpSandboxDelete, vals: in})

	// Workflows: a run to its end, its events, the listing; a run held in
	// a concurrent group, for add_step, cancel and resume.
	var run api.WorkflowRun
	rn.call(oaCall{op: api.OpWorkflowCreate, body: api.CreateWorkflow{Document: "steps:\n  - {id: a, sh: echo oa, snapshot: none}\n",
		Labels: map[string]string{"suite": "openapi"}}, check: func(t *testing.T, r reply) { r.decode(t, &run) }})
	if run.ID == "" {
		t.Fatal("no run")
	}
	win := map[string]string{"run": run.ID}
	rn.call(oaCall{op: api.OpWorkflowCreate, body: api.CreateWorkflow{Document: "steps:\n  - {id: a, sh: x, bogus: 1}\n"}, want: http.StatusBadRequest,
		check: func(t *testing.T, r reply) {
			if e := r.apiErr(t); !strings.Contains(e.Message, "line 2") {
				t.Errorf("invalid document: %s", r.body)
			}
		}})
	rn.call(oaCall{op: api.OpWorkflowEvents, vals: win, query: url.Values{"follow": {"true"}, "after": {"0"}}, check: func(t *testing.T, r reply) {
		evs := eventsOf(t, r.body)
		if len(evs) == 0 || evs[len(evs)-1].Workflow == nil || evs[len(evs)-1].Workflow.Type != api.WfRunSucceeded {
			t.Errorf("workflow events: %s", r.body)
		}
	}})
	rn.call(oaCall{op: api.OpWorkflowGet, vals: win, check: func(t *testing.T, r reply) {
		var got api.WorkflowRun
		r.decode(t, &got)
		if got.State != api.RunSucceeded || len(got.Steps) != 1 || got.Steps[0].Result == nil {
			t.Errorf("workflow get: %s", r.body)
		}
	}})
	rn.call(oaCall{op: api.OpWorkflowGet, vals: win, token: tokenB, want: http.StatusNotFound})
	rn.call(oaCall{op: api.OpWorkflowList, query: url.Values{"state": {"succeeded"}, "limit": {"10"}}})
	rn.call(oaCall{op: api.OpWorkflowList, query: url.Values{"state": {"sideways"}}, want: http.StatusBadRequest})
	rn.call(oaCall{op: api.OpWorkflowCancel, vals: win, body: struct{}{}, want: http.StatusConflict})
	var held api.WorkflowRun
	rn.call(oaCall{op: api.OpWorkflowCreate, body: api.CreateWorkflow{Document: "steps:\n  - group: g\n    mode: concurrent\n    steps:\n" +
		"      - {id: hold, run: [sleep, \"60\"], snapshot: none}\n"}, check: func(t *testing.T, r reply) { r.decode(t, &held) }})
	hin := map[string]string{"run": held.ID}
	rn.call(oaCall{op: api.OpWorkflowAdd, vals: hin, body: api.AddWorkflowStep{Group: "g", Step: json.RawMessage(`{"id": "more", "sh": "echo more", "snapshot": "none", "priority": "critical"}`)}})
	rn.call(oaCall{op: api.OpWorkflowAdd, vals: hin, body: api.AddWorkflowStep{Group: "nope", Step: json.RawMessage(`{"id": "x", "sh": "echo x"}`)}, want: http.StatusNotFound})
	rn.call(oaCall{op: api.OpWorkflowResume, vals: hin, body: api.ResumeWorkflow{}, want: http.StatusConflict})
	rn.call(oaCall{op: api.OpWorkflowCancel, vals: hin, body: struct{}{}, check: func(t *testing.T, r reply) {
		var got api.WorkflowRun
		r.decode(t, &got)
		if got.State != api.RunCancelled {
			t.Errorf("workflow cancel: %s", r.body)
		}
	}})
	rn.call(oaCall{op: api.OpWorkflowResume, vals: hin, body: api.ResumeWorkflow{From: "hold"}})
	rn.call(oaCall{op: api.OpWorkflowCancel, vals: hin, body: struct{}{}})

	// Agent runs: a run to its end, its events, the listing; a run held
	// in its model call, for cancel and resume.
	const agents = "agents:\n  - {name: a, model: m}\n"
	var arun api.AgentRun
	rn.call(oaCall{op: api.OpAgentCreate, body: api.CreateAgentRun{Document: agents, Agent: "a", Task: "answer", Labels: map[string]string{"suite": "openapi"}},
		check: func(t *testing.T, r reply) { r.decode(t, &arun) }})
	if arun.ID == "" {
		t.Fatal("no agent run")
	}
	ain := map[string]string{"run": arun.ID}
	rn.call(oaCall{op: api.OpAgentCreate, body: api.CreateAgentRun{Document: "agents:\n  - {name: a, model: m, bogus: 1}\n", Agent: "a", Task: "t"}, want: http.StatusBadRequest})
	rn.call(oaCall{op: api.OpAgentEvents, vals: ain, query: url.Values{"follow": {"true"}, "after": {"0"}}, check: func(t *testing.T, r reply) {
		evs := eventsOf(t, r.body)
		if len(evs) == 0 || evs[len(evs)-1].Agent == nil || evs[len(evs)-1].Agent.Type != api.AgentEvRunSucceeded {
			t.Errorf("agent events: %s", r.body)
		}
	}})
	rn.call(oaCall{op: api.OpAgentGet, vals: ain, check: func(t *testing.T, r reply) {
		var got api.AgentRun
		r.decode(t, &got)
		if got.State != api.AgentSucceeded || got.Answer != "done" {
			t.Errorf("agent get: %s", r.body)
		}
	}})
	rn.call(oaCall{op: api.OpAgentGet, vals: ain, token: tokenB, want: http.StatusNotFound})
	rn.call(oaCall{op: api.OpAgentList, query: url.Values{"state": {"succeeded"}, "limit": {"10"}}})
	rn.call(oaCall{op: api.OpAgentList, query: url.Values{"state": {"sideways"}}, want: http.StatusBadRequest})
	rn.call(oaCall{op: api.OpAgentCancel, vals: ain, body: struct{}{}, want: http.StatusConflict})
	var aheld api.AgentRun
	rn.call(oaCall{op: api.OpAgentCreate, body: api.CreateAgentRun{Document: agents, Agent: "a", Task: "block"}, check: func(t *testing.T, r reply) { r.decode(t, &aheld) }})
	ahin := map[string]string{"run": aheld.ID}
	rn.call(oaCall{op: api.OpAgentCancel, vals: ahin, body: struct{}{}, check: func(t *testing.T, r reply) {
		var got api.AgentRun
		r.decode(t, &got)
		if got.State != api.AgentCancelled {
			t.Errorf("agent cancel: %s", r.body)
		}
	}})
	rn.call(oaCall{op: api.OpAgentResume, vals: ahin, body: api.ResumeAgentRun{Task: "again"}})
	rn.call(oaCall{op: api.OpAgentCancel, vals: ahin, body: struct{}{}})

	// Builds: a tar body with the settings in the query, a multipart one
	// whose source is refused (a build, not an error), a malformed
	// multipart body; the log, the artifact by its digest, another
	// tenant's view, the delete.
	var src bytes.Buffer
	stw := tar.NewWriter(&src)
	stw.WriteHeader(&tar.Header{Name: "hello.txt", Mode: 0o644, Size: 3, Typeflag: tar.TypeReg})
	stw.Write([]byte("hi\n"))
	stw.Close()
	var bld api.Build
	rn.call(oaCall{op: api.OpBuildCreate, ct: "application/x-tar", body: src.Bytes(),
		query: url.Values{"command": {"sh", "-c", "echo built"}, "outputs": {"hello.txt"}, "labels": {`{"suite":"openapi"}`}},
		check: func(t *testing.T, r reply) { r.decode(t, &bld) }})
	if bld.Status != api.BuildSucceeded || len(bld.Artifacts) != 1 {
		t.Fatalf("build: %+v", bld)
	}
	bin := map[string]string{"id": bld.ID}
	mpType, mpBody := multipartBody(t, [2]string{"settings", `{"command":["true"]}`}, [2]string{"source", "not a tar"})
	rn.call(oaCall{op: api.OpBuildCreate, ct: mpType, body: mpBody, check: func(t *testing.T, r reply) {
		var b api.Build
		r.decode(t, &b)
		if b.Status != api.BuildRefused || b.Reason != api.ReasonSourceUnreadable {
			t.Errorf("a build of no tar: %s", r.body)
		}
	}})
	mpType, mpBody = multipartBody(t, [2]string{"source", "x"}, [2]string{"settings", `{"command":["true"]}`})
	rn.call(oaCall{op: api.OpBuildCreate, ct: mpType, body: mpBody, want: http.StatusBadRequest})
	rn.call(oaCall{op: api.OpBuildList, query: url.Values{"status": {"succeeded"}, "limit": {"10"}}})
	rn.call(oaCall{op: api.OpBuildGet, vals: bin, query: url.Values{"wait": {"true"}}})
	rn.call(oaCall{op: api.OpBuildGet, vals: bin, token: tokenB, want: http.StatusNotFound})
	rn.call(oaCall{op: api.OpBuildLog, vals: bin, query: url.Values{"offset": {"0"}, "follow": {"true"}}, check: func(t *testing.T, r reply) {
		var log []byte
		for _, e := range eventsOf(t, r.body) {
			log = append(log, e.Output()...)
		}
		if string(log) != "built\n" {
			t.Errorf("build log: %s", r.body)
		}
	}})
	art := bld.Artifacts[0]
	rn.call(oaCall{op: api.OpBuildArtifact, vals: map[string]string{"id": bld.ID, "digest": art.SHA256}, check: func(t *testing.T, r reply) {
		if string(r.body) != "hi\n" || r.header.Get("ETag") != `"sha256:`+art.SHA256+`"` {
			t.Errorf("artifact: %q, ETag %q", r.body, r.header.Get("ETag"))
		}
	}})
	rn.call(oaCall{op: api.OpBuildArtifact, vals: map[string]string{"id": bld.ID, "digest": strings.Repeat("0", 64)}, want: http.StatusNotFound})
	rn.call(oaCall{op: api.OpBuildDelete, vals: bin})
	rn.call(oaCall{op: api.OpBuildGet, vals: bin, want: http.StatusNotFound})

	// Health.
	rn.call(oaCall{op: "healthz"})
	rn.call(oaCall{op: "readyz"})

	t.Run("unauthenticated", func(t *testing.T) {
		for _, op := range sortedOps(doc) {
			if !strings.HasPrefix(op.path, "/v1/") {
				continue
			}
			path := fill(op.path, map[string]string{"sandbox": "sb-x", "process": "1", "id": "ap_x", "run": "wf-x", "digest": "00"})
			for _, tok := range []string{"", "moat_wrong_token_0123456789abcdef0123456789"} {
				r := h.send(op.method, path, tok, "", nil)
				label := fmt.Sprintf("%s %s (token %q)", op.method, path, tok)
				if r.status != http.StatusUnauthorized {
					t.Errorf("%s: status %d, want 401 (%s)", label, r.status, r.body)
					continue
				}
				if e := r.apiErr(t); e.Code != api.CodeUnauthenticated {
					t.Errorf("%s: %s", label, r.body)
				}
				if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("%s: WWW-Authenticate %q", label, r.header.Get("WWW-Authenticate"))
				}
				doc.checkAnswer(t, label, op.o, r)
			}
		}
	})

	t.Run("method not allowed", func(t *testing.T) {
		errSchema := map[string]any{"$ref": "#/components/schemas/Error"}
		if doc.resolve("#/components/responses/MethodNotAllowed") == nil {
			t.Error("no MethodNotAllowed answer in the document")
		}
		for path, item := range doc.root["paths"].(map[string]any) {
			documented := map[string]bool{}
			for m := range item.(map[string]any) {
				documented[strings.ToUpper(m)] = true
			}
			for _, m := range []string{"GET", "POST", "PUT", "DELETE", "PATCH"} {
				if documented[m] {
					continue
				}
				p := fill(path, map[string]string{"sandbox": "sb-x", "process": "1", "id": "ap_x", "run": "wf-x", "digest": "00"})
				r := h.send(m, p, tokenA, "", nil)
				label := m + " " + p
				e := r.apiErr(t)
				v, _ := oaDecode(r.body)
				for _, msg := range doc.validate(errSchema, v, label) {
					t.Error(msg)
				}
				switch {
				case r.status == http.StatusMethodNotAllowed && e.Code == api.CodeMethodNotAllowed:
					allow := strings.Split(r.header.Get("Allow"), ", ")
					var want []string
					for d := range documented {
						want = append(want, d)
					}
					sort.Strings(allow)
					sort.Strings(want)
					if !slices.Equal(allow, want) {
						t.Errorf("%s: Allow %v, documented %v", label, allow, want)
					}
				case !strings.HasPrefix(path, "/v1/") && r.status == http.StatusNotFound && e.Code == api.CodeNotFound:
					// Known: /healthz, /readyz and /metrics are registered
					// as "GET /path" patterns, so Go's ServeMux sends other
					// methods to the catch-all "/" (404), not 405.
					t.Logf("%s: 404 not_found rather than 405", label)
				default:
					t.Errorf("%s: %d %s, want 405 method_not_allowed", label, r.status, r.body)
				}
			}
		}
	})

	t.Run("unknown path", func(t *testing.T) {
		errSchema := map[string]any{"$ref": "#/components/schemas/Error"}
		for _, p := range []string{"/", "/v1", "/v1/", "/v1/nope", "/nope", "/v1/sandboxes/x/nope", "/v1/sandboxes/x/processes/1/nope", "/v2/sandboxes"} {
			if doc.root["paths"].(map[string]any)[p] != nil {
				t.Fatalf("%s is documented", p)
			}
			for _, tok := range []string{tokenA, ""} {
				r := h.send("GET", p, tok, "", nil)
				if r.status != http.StatusNotFound || r.apiErr(t).Code != api.CodeNotFound {
					t.Errorf("GET %s: %d %s, want 404 not_found", p, r.status, r.body)
				}
				v, _ := oaDecode(r.body)
				for _, msg := range doc.validate(errSchema, v, "GET "+p) {
					t.Error(msg)
				}
			}
		}
	})

	// Metrics last: every family the documentation names has a sample.
	rn.call(oaCall{op: "metrics", check: func(t *testing.T, r reply) {
		for _, name := range []string{"moat_sandboxes_running ", "moat_sandboxes_created_total",
			`moat_sandboxes_ended_total{reason="deleted"}`, `moat_calls_total{op="sandbox.create",code="ok"}`,
			`moat_errors_total{op="process.exec",code="invalid_argument"}`, `moat_call_duration_seconds_bucket{op="process.exec",le="0.0005"}`,
			`moat_call_duration_seconds_count{op="process.exec"}`, `moat_denials_total{reason="token"}`, "moat_audit_errors_total", "# TYPE moat_slow_writes_total counter",
			"moat_approvals_pending 0", `moat_policy_decisions_total{effect="ask"} 1`, `moat_policy_decisions_total{effect="deny"}`} {
			if !bytes.Contains(r.body, []byte(name)) {
				t.Errorf("metrics lack %s", name)
			}
		}
	}})

	for _, op := range sortedOps(doc) {
		if !rn.covered[op.id] {
			t.Errorf("%s (%s %s) was not exercised", op.id, op.method, op.path)
		}
	}
	for _, o := range api.Ops {
		if doc.ops[o.Name] == nil {
			t.Errorf("%s is not documented", o.Name)
		}
	}
}

func sortedOps(d *oaDoc) []*oaOp {
	var out []*oaOp
	for _, o := range d.ops {
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path+out[i].method < out[j].path+out[j].method })
	return out
}

// TestOpenAPINumbers checks the figures docs/openapi.json and docs/API.md
// state against the server's constants.
func TestOpenAPINumbers(t *testing.T) {
	mib := func(n int64) string { return fmt.Sprintf("%d MiB", n>>20) }
	for file, phrases := range map[string][]string{
		"../docs/openapi.json": {
			"JSON body (at most " + mib(MaxJSONBody),
			mib(DefaultMaxFileBytes) + " by default",
			fmt.Sprintf("limited to %d minutes", int(RequestTimeout/time.Minute)),
			fmt.Sprintf("server default (%d h)", int(DefaultTimeout/time.Hour)),
			fmt.Sprintf("server default (%d min)", int(DefaultIdleTimeout/time.Minute)),
			fmt.Sprintf("(%d h by default)", int(DefaultMaxTimeout/time.Hour)),
			"At most " + mib(maxStdinPending) + " may wait",
			"default buffer " + mib(DefaultOutputBuffer),
		},
		"../docs/API.md": {
			"are at most " + mib(MaxJSONBody) + " (`413 too_large`)",
			mib(DefaultMaxFileBytes) + " by default",
			fmt.Sprintf("Each request may last %d minutes", int(RequestTimeout/time.Minute)),
			fmt.Sprintf("server default (%d h, `--default-timeout`)", int(DefaultTimeout/time.Hour)),
			fmt.Sprintf("server default (%d min, `--idle-timeout`)", int(DefaultIdleTimeout/time.Minute)),
			fmt.Sprintf("server's maximum (%d h)", int(DefaultMaxTimeout/time.Hour)),
			"At most " + mib(maxStdinPending) + " may wait unread",
			fmt.Sprintf("At most %d background processes may run", maxProcsRunning),
			fmt.Sprintf("the newest %d per sandbox, and at most %s", maxProcsKept, mib(maxEndedOutput)),
			"server's output buffer (" + mib(DefaultOutputBuffer) + ")",
			fmt.Sprintf("tenant (%d by default, `--max-per-tenant`) or the daemon (%d,", DefaultMaxPerTenant, DefaultMaxSandboxes),
			fmt.Sprintf("ends at most %d expired sandboxes per", DefaultPruneBatch),
			fmt.Sprintf("checks once every %v", DefaultPruneInterval),
			fmt.Sprintf("for %d hours after it ended", int(DefaultKeepStopped/time.Hour)),
			fmt.Sprintf("(default %d, at most %d", audit.DefaultLimit, audit.MaxLimit),
		},
	} {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		// Markdown wraps lines: compare with runs of spaces folded.
		text := strings.Join(strings.Fields(string(raw)), " ")
		for _, want := range phrases {
			if !strings.Contains(text, want) {
				t.Errorf("%s does not say %q", file, want)
			}
		}
	}
}
