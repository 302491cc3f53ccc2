package server

import (
	"bytes"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/api"
)

// buildInput binds r as build.create (or the operation named) would be,
// without a handler: what a handler's decode and body read would see.
func buildInput(t *testing.T, s *Service, name string, r *http.Request) (*input, error) {
	t.Helper()
	op, ok := api.Lookup(name)
	if !ok {
		t.Fatalf("no operation %s", name)
	}
	return s.httpInput(httptest.NewRecorder(), r, op)
}

// multipartBody writes parts (name, content) as a multipart form.
func multipartBody(t *testing.T, parts ...[2]string) (string, []byte) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", `form-data; name="`+p[0]+`"`)
		w, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, p[1])
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return mw.FormDataContentType(), buf.Bytes()
}

func codeOf(err error) string {
	var e *api.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// TestBuildCreateQuery: with a tar body the settings bind from the query,
// repeated keys as lists, cpus as a number and labels as one JSON object;
// the body reaches the handler as sent.
func TestBuildCreateQuery(t *testing.T) {
	s := &Service{cfg: Config{MaxFileBytes: 10}}
	q := url.Values{
		"command":       {"make", "all"},
		"outputs":       {"out/a", "out/b"},
		"env":           {"A=1", "B=2"},
		"allow_domains": {"x.example", "y.example"},
		"cpus":          {"1.5"},
		"labels":        {`{"team":"infra","k":"v"}`},
		"detach":        {"true"},
		"max_files":     {"10"},
		"net":           {"proxy"},
	}
	for _, ct := range []string{"", "application/x-tar", "application/gzip", "application/octet-stream"} {
		// The source is larger than MaxFileBytes: build.create's body is
		// not capped by it.
		src := strings.Repeat("t", 100)
		r := httptest.NewRequest("POST", "/v1/builds?"+q.Encode(), strings.NewReader(src))
		if ct != "" {
			r.Header.Set("Content-Type", ct)
		}
		in, err := buildInput(t, s, api.OpBuildCreate, r)
		if err != nil {
			t.Fatalf("%q: %v", ct, err)
		}
		var got api.CreateBuild
		if err := in.decode(&got); err != nil {
			t.Fatalf("%q: decode: %v", ct, err)
		}
		want := api.CreateBuild{Command: []string{"make", "all"}, Outputs: []string{"out/a", "out/b"}, Env: []string{"A=1", "B=2"},
			AllowDomains: []string{"x.example", "y.example"}, CPUs: 1.5, Labels: map[string]string{"team": "infra", "k": "v"},
			Detach: true, MaxFiles: 10, Net: "proxy"}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%q: settings %+v, want %+v", ct, got, want)
		}
		b, err := io.ReadAll(in.body)
		if err != nil || string(b) != src {
			t.Errorf("%q: body %q %v", ct, b, err)
		}
	}
	for _, bad := range []string{"cpus=many", "cpus=NaN", "labels=notjson", `labels=["a"]`, "bogus=1", "content=eA=="} {
		r := httptest.NewRequest("POST", "/v1/builds?"+bad, strings.NewReader("x"))
		in, err := buildInput(t, s, api.OpBuildCreate, r)
		if err == nil {
			var got api.CreateBuild
			err = in.decode(&got)
			if bad == "content=eA==" && err == nil {
				// content is a field: bound, and the handler reads
				// the body (over HTTP in.body is set, so it wins).
				if in.body == nil {
					t.Error("content in the query: no body")
				}
				continue
			}
		}
		if codeOf(err) != api.CodeInvalidArgument {
			t.Errorf("%s: %v, want invalid_argument", bad, err)
		}
	}
}

// TestBuildCreateMultipart: a settings part then a source part bind as
// the settings and the body; the query overrides the part, as it does a
// JSON body.
func TestBuildCreateMultipart(t *testing.T) {
	s := &Service{cfg: Config{MaxFileBytes: 1 << 20}}
	ct, body := multipartBody(t, [2]string{"settings", `{"command":["cc","-o","hello","hello.c"],"outputs":["hello"],"env":["SECRET=x"],"labels":{"a":"b"},"cpus":0.5}`},
		[2]string{"source", "TARBYTES"})
	r := httptest.NewRequest("POST", "/v1/builds?template=host", bytes.NewReader(body))
	r.Header.Set("Content-Type", ct)
	in, err := buildInput(t, s, api.OpBuildCreate, r)
	if err != nil {
		t.Fatal(err)
	}
	var got api.CreateBuild
	if err := in.decode(&got); err != nil {
		t.Fatal(err)
	}
	want := api.CreateBuild{Template: "host", Command: []string{"cc", "-o", "hello", "hello.c"}, Outputs: []string{"hello"},
		Env: []string{"SECRET=x"}, Labels: map[string]string{"a": "b"}, CPUs: 0.5}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("settings %+v, want %+v", got, want)
	}
	b, err := io.ReadAll(in.body)
	if err != nil || string(b) != "TARBYTES" {
		t.Errorf("source %q %v", b, err)
	}
}

// TestBuildCreateMultipartRefused: every malformed multipart body is 400
// invalid_argument (a part after the source when the source ends), a
// settings part over 1 MiB 413, an unknown media type 415.
func TestBuildCreateMultipartRefused(t *testing.T) {
	s := &Service{cfg: Config{MaxFileBytes: 1 << 20}}
	settings := [2]string{"settings", `{"command":["true"]}`}
	source := [2]string{"source", "TAR"}
	for _, c := range []struct {
		name  string
		parts [][2]string
		code  string // from httpInput
		read  string // from decode or reading the body
	}{
		{name: "source first", parts: [][2]string{source, settings}, code: api.CodeInvalidArgument},
		{name: "other first", parts: [][2]string{{"file", "x"}, source}, code: api.CodeInvalidArgument},
		{name: "other second", parts: [][2]string{settings, {"tar", "x"}}, code: api.CodeInvalidArgument},
		{name: "no source", parts: [][2]string{settings}, code: api.CodeInvalidArgument},
		{name: "no parts", parts: nil, code: api.CodeInvalidArgument},
		{name: "settings not JSON", parts: [][2]string{{"settings", "command=true"}, source}, code: api.CodeInvalidArgument},
		{name: "settings an array", parts: [][2]string{{"settings", `["true"]`}, source}, code: api.CodeInvalidArgument},
		{name: "settings with content", parts: [][2]string{{"settings", `{"command":["true"],"content":"eA=="}`}, source}, code: api.CodeInvalidArgument},
		{name: "settings too large", parts: [][2]string{{"settings", `{"command":["` + strings.Repeat("a", MaxJSONBody) + `"]}`}, source}, code: api.CodeTooLarge},
		{name: "unknown setting", parts: [][2]string{{"settings", `{"command":["true"],"bogus":1}`}, source}, read: api.CodeInvalidArgument},
		{name: "a third part", parts: [][2]string{settings, source, {"extra", "x"}}, read: api.CodeInvalidArgument},
	} {
		ct, body := multipartBody(t, c.parts...)
		r := httptest.NewRequest("POST", "/v1/builds", bytes.NewReader(body))
		r.Header.Set("Content-Type", ct)
		in, err := buildInput(t, s, api.OpBuildCreate, r)
		if c.code != "" {
			if codeOf(err) != c.code {
				t.Errorf("%s: %v, want %s", c.name, err, c.code)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		var got api.CreateBuild
		err = in.decode(&got)
		if err == nil {
			_, err = io.ReadAll(in.body)
		}
		if codeOf(err) != c.read {
			t.Errorf("%s: %v, want %s", c.name, err, c.read)
		}
	}
	for _, ct := range []string{"text/plain", "application/json", "multipart/form-data", "a/b/c"} {
		r := httptest.NewRequest("POST", "/v1/builds", strings.NewReader("x"))
		r.Header.Set("Content-Type", ct)
		_, err := buildInput(t, s, api.OpBuildCreate, r)
		want := api.CodeUnsupportedMedia
		if ct == "multipart/form-data" {
			want = api.CodeInvalidArgument // no boundary
		}
		if codeOf(err) != want {
			t.Errorf("Content-Type %s: %v, want %s", ct, err, want)
		}
	}
}

// zeros reads as many zero bytes as asked.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestBuildCreateBodyCap: build.create's body is capped at 2 ×
// max_total_bytes + 64 MiB, raw or multipart; past it a read is
// too_large (and still an *http.MaxBytesError), and the cap before it
// reads whole.
func TestBuildCreateBodyCap(t *testing.T) {
	s := &Service{cfg: Config{MaxFileBytes: 1 << 20}}
	s.cfg.Build.MaxTotalBytes = 1 << 10
	limit := s.buildBodyCap()
	if limit != 2<<10+64<<20 {
		t.Fatalf("cap %d", limit)
	}
	read := func(r *http.Request) error {
		in, err := buildInput(t, s, api.OpBuildCreate, r)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, in.body)
		return err
	}
	at := httptest.NewRequest("POST", "/v1/builds", io.LimitReader(zeros{}, limit))
	if err := read(at); err != nil {
		t.Errorf("a body of the cap: %v", err)
	}
	over := httptest.NewRequest("POST", "/v1/builds", io.LimitReader(zeros{}, limit+1))
	err := read(over)
	if codeOf(err) != api.CodeTooLarge || !isMaxBytesError(err) {
		t.Errorf("a body past the cap: %v", err)
	}
	ct, head := multipartBody(t, [2]string{"settings", `{"command":["true"]}`})
	// The head without its closing boundary, then a source part that
	// never ends.
	head = head[:bytes.LastIndex(head, []byte("\r\n--"))]
	boundary := ct[strings.Index(ct, "boundary=")+len("boundary="):]
	part := "\r\n--" + boundary + "\r\nContent-Disposition: form-data; name=\"source\"\r\n\r\n"
	mp := httptest.NewRequest("POST", "/v1/builds", io.MultiReader(bytes.NewReader(head), strings.NewReader(part), io.LimitReader(zeros{}, limit)))
	mp.Header.Set("Content-Type", ct)
	if err := read(mp); codeOf(err) != api.CodeTooLarge {
		t.Errorf("a multipart body past the cap: %v", err)
	}
}

// TestBuildPathValues: {id} and {digest} bind build.artifact's fields.
func TestBuildPathValues(t *testing.T) {
	s := &Service{cfg: Config{MaxFileBytes: 1 << 20}}
	digest := strings.Repeat("ab", 32)
	r := httptest.NewRequest("GET", "/v1/builds/bld-1/artifacts/"+digest, nil)
	r.SetPathValue("id", "bld-1")
	r.SetPathValue("digest", digest)
	in, err := buildInput(t, s, api.OpBuildArtifact, r)
	if err != nil {
		t.Fatal(err)
	}
	var got api.BuildArtifactRef
	if err := in.decode(&got); err != nil {
		t.Fatal(err)
	}
	if got != (api.BuildArtifactRef{ID: "bld-1", Digest: digest}) {
		t.Errorf("bound %+v", got)
	}
	if !isSHA256Hex(digest) || isSHA256Hex(strings.ToUpper(digest)) || isSHA256Hex(digest[1:]) || isSHA256Hex(digest[1:]+"g") {
		t.Error("isSHA256Hex")
	}
}

// TestBuildRoutes: through the whole HTTP handler (fake runtime), a
// malformed multipart body and an unknown media type are refused before
// any handler runs, with the documented statuses.
func TestBuildRoutes(t *testing.T) {
	h := newFakeHarness(t, nil)
	ct, body := multipartBody(t, [2]string{"source", "x"}, [2]string{"settings", "{}"})
	if r := h.send("POST", "/v1/builds", tokenA, ct, body); r.status != http.StatusBadRequest || r.apiErr(t).Code != api.CodeInvalidArgument {
		t.Errorf("source first: %d %s", r.status, r.body)
	}
	if r := h.send("POST", "/v1/builds", tokenA, "text/plain", []byte("x")); r.status != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain: %d %s", r.status, r.body)
	}
	if r := h.send("POST", "/v1/builds?cpus=lots", tokenA, "application/x-tar", []byte("x")); r.status != http.StatusBadRequest {
		t.Errorf("cpus=lots: %d %s", r.status, r.body)
	}
	if r := h.send("PUT", "/v1/builds", tokenA, "", nil); r.status != http.StatusMethodNotAllowed {
		t.Errorf("PUT: %d %s", r.status, r.body)
	}
}

// TestCappedWriter: JSON-RPC's artifact buffer refuses past its cap.
func TestCappedWriter(t *testing.T) {
	var buf bytes.Buffer
	w := &cappedWriter{w: &buf, max: 4, what: "x"}
	if n, err := w.Write([]byte("abc")); n != 3 || err != nil {
		t.Fatal(n, err)
	}
	if _, err := w.Write([]byte("de")); codeOf(err) != api.CodeTooLarge {
		t.Errorf("past the cap: %v", err)
	}
	if n, err := w.Write([]byte("d")); n != 1 || err != nil || buf.String() != "abcd" {
		t.Errorf("to the cap: %d %v %q", n, err, buf.String())
	}
}
