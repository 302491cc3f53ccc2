package openapi

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
)

const regenerate = "go run ./api/internal/genopenapi > docs/openapi.json"

// openapiDoc returns the generated document, decoded.
func openapiDoc(t *testing.T) (raw []byte, doc map[string]any) {
	t.Helper()
	raw, err := Document()
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("Document() is not valid JSON: %v", err)
	}
	return raw, doc
}

func TestOpenAPICommitted(t *testing.T) {
	raw, _ := openapiDoc(t)
	committed, err := os.ReadFile("../../../docs/openapi.json")
	if err != nil {
		t.Fatalf("%v; create it with `%s` (from the module root)", err, regenerate)
	}
	if !bytes.Equal(committed, raw) {
		t.Fatalf("docs/openapi.json differs from openapi.Document(); regenerate it from the module root with `%s`", regenerate)
	}
	again, err := Document()
	if err != nil || !bytes.Equal(again, raw) {
		t.Fatal("Document() is not stable from one call to the next")
	}
	if !bytes.HasSuffix(raw, []byte("}\n")) {
		t.Fatal("the document does not end with a newline")
	}
}

func TestOpenAPIVersionAndRefs(t *testing.T) {
	raw, doc := openapiDoc(t)
	if doc["openapi"] != "3.1.0" {
		t.Fatalf("openapi = %v, want 3.1.0", doc["openapi"])
	}
	info, _ := doc["info"].(map[string]any)
	if info["title"] == nil || info["version"] != api.Version {
		t.Fatalf("info = %v", info)
	}
	desc, _ := info["description"].(string)
	for _, want := range []string{"JSON-RPC 2.0", api.NotifyEvent, `"content"`, "-32000"} {
		if !strings.Contains(desc, want) {
			t.Errorf("info.description does not mention %q", want)
		}
	}
	// Every $ref resolves.
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if r, ok := x["$ref"].(string); ok {
				if resolve(doc, r) == nil {
					t.Errorf("$ref %s does not resolve", r)
				}
			}
			for _, y := range x {
				walk(y)
			}
		case []any:
			for _, y := range x {
				walk(y)
			}
		}
	}
	walk(doc)
	// No object has a key twice (encoding/json would keep the last one).
	dec := json.NewDecoder(bytes.NewReader(raw))
	var check func() error
	check = func() error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return err
				}
				if seen[k.(string)] {
					t.Errorf("key %q twice in one object", k)
				}
				seen[k.(string)] = true
				if err := check(); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		case json.Delim('['):
			for dec.More() {
				if err := check(); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		}
		return nil
	}
	if err := check(); err != nil {
		t.Fatal(err)
	}
}

// resolve follows a local $ref.
func resolve(doc map[string]any, ref string) any {
	var cur any = doc
	for _, p := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

// docOps maps "METHOD path" to the operation objects of the document.
func docOps(t *testing.T, doc map[string]any) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for path, item := range doc["paths"].(map[string]any) {
		for method, o := range item.(map[string]any) {
			if method == "parameters" {
				continue
			}
			out[strings.ToUpper(method)+" "+path] = o.(map[string]any)
		}
	}
	return out
}

func TestOpenAPIOperations(t *testing.T) {
	_, doc := openapiDoc(t)
	ops := docOps(t, doc)
	count := map[string]int{}
	for key, o := range ops {
		id, _ := o["operationId"].(string)
		count[id]++
		sec, hasSec := o["security"].([]any)
		if strings.Contains(key, " /v1/") {
			if _, ok := api.Lookup(id); !ok {
				t.Errorf("%s: operationId %q is not in api.Ops", key, id)
			}
			if !hasSec || len(sec) != 1 || sec[0].(map[string]any)["bearer"] == nil {
				t.Errorf("%s: security = %v, want bearer", key, o["security"])
			}
		} else if hasSec && len(sec) > 0 {
			t.Errorf("%s: needs no token, but security = %v", key, sec)
		}
		resp, _ := o["responses"].(map[string]any)
		if len(resp) == 0 {
			t.Errorf("%s: no responses", key)
		}
	}
	for id, n := range count {
		if n != 1 {
			t.Errorf("operationId %q appears %d times", id, n)
		}
	}
	for _, want := range []string{"GET /healthz", "GET /readyz", "GET /metrics"} {
		if ops[want] == nil {
			t.Errorf("%s is not documented", want)
		}
	}
	for _, op := range api.Ops {
		o := ops[op.Method+" "+op.Path]
		if o == nil {
			t.Errorf("%s: %s %s is not in the document", op.Name, op.Method, op.Path)
			continue
		}
		if o["operationId"] != op.Name || o["summary"] != op.Summary {
			t.Errorf("%s: operationId %v, summary %v", op.Name, o["operationId"], o["summary"])
		}
		if count[op.Name] != 1 {
			t.Errorf("%s appears %d times", op.Name, count[op.Name])
		}
		checkOpShape(t, doc, op, o)
	}
}

// checkOpShape checks an operation's parameters, body and answers against
// how server/http.go binds it.
func checkOpShape(t *testing.T, doc map[string]any, op api.Op, o map[string]any) {
	t.Helper()
	params := map[string]string{} // name → in
	for _, p := range asList(o["parameters"]) {
		pm := p.(map[string]any)
		params[pm["name"].(string)] = pm["in"].(string)
	}
	want := map[string]string{}
	var pathNames []string
	for _, seg := range strings.Split(op.Path, "/") {
		if strings.HasPrefix(seg, "{") {
			n := strings.Trim(seg, "{}")
			want[n] = "path"
			pathNames = append(pathNames, n)
		}
	}
	if op.In == api.BodyNone || op.In == api.BodyRaw {
		for _, n := range testJSONNames(reflect.TypeOf(op.Request)) {
			if !slices.Contains(pathNames, n) && !(op.In == api.BodyRaw && n == "content") {
				want[n] = "query"
			}
		}
	}
	if !reflect.DeepEqual(params, want) {
		t.Errorf("%s: parameters %v, want %v", op.Name, params, want)
	}
	if pt, ok := want["process"]; ok && pt == "path" {
		for _, p := range asList(o["parameters"]) {
			pm := p.(map[string]any)
			if pm["name"] == "process" && pm["schema"].(map[string]any)["type"] != "integer" {
				t.Errorf("%s: {process} is not an integer", op.Name)
			}
		}
	}
	body, _ := o["requestBody"].(map[string]any)
	switch op.In {
	case api.BodyNone:
		if body != nil {
			t.Errorf("%s: takes no body but documents one", op.Name)
		}
	case api.BodyJSON:
		if mediaTypes(body) != "application/json" {
			t.Errorf("%s: request media types %q", op.Name, mediaTypes(body))
		}
	case api.BodyRaw:
		wantMT := "application/octet-stream"
		switch op.Name {
		case api.OpFileUpload:
			wantMT = "application/x-tar"
		case api.OpBuildCreate:
			// A tar of any of server/http_build.go's types, or multipart.
			wantMT = "application/gzip,application/octet-stream,application/x-tar,multipart/form-data"
		}
		if mediaTypes(body) != wantMT {
			t.Errorf("%s: request media types %q, want %s", op.Name, mediaTypes(body), wantMT)
		}
	}
	responses := o["responses"].(map[string]any)
	ok := "200"
	if op.Name == api.OpSandboxCreate || op.Name == api.OpStart || op.Name == api.OpWorkflowCreate || op.Name == api.OpBuildCreate || op.Name == api.OpAgentCreate {
		ok = "201"
	}
	success, _ := responses[ok].(map[string]any)
	if success == nil {
		t.Fatalf("%s: no %s answer", op.Name, ok)
	}
	var wantOut string
	switch op.Out {
	case api.BodyJSON:
		wantOut = "application/json"
		if op.Name == api.OpExec || op.Name == api.OpApprovalList {
			wantOut += ",application/x-ndjson"
		}
	case api.BodyRaw:
		wantOut = "application/octet-stream"
		if op.Name == api.OpFileDownload {
			wantOut = "application/x-tar"
		}
	case api.BodyStream:
		wantOut = "application/x-ndjson"
	}
	if got := mediaTypes(success); got != wantOut {
		t.Errorf("%s: answer media types %q, want %q", op.Name, got, wantOut)
	}
	for code, r := range responses {
		n, err := strconv.Atoi(code)
		if err != nil || n < 400 {
			continue
		}
		rm := r.(map[string]any)
		if ref, ok := rm["$ref"].(string); ok {
			rm, _ = resolve(doc, ref).(map[string]any)
		}
		content, _ := rm["content"].(map[string]any)
		mt, _ := content["application/json"].(map[string]any)
		if mt == nil || mt["schema"].(map[string]any)["$ref"] != "#/components/schemas/Error" {
			t.Errorf("%s: answer %s is not an Error", op.Name, code)
		}
	}
	for _, code := range []string{"400", "401", "500"} {
		if responses[code] == nil {
			t.Errorf("%s: %s is not documented", op.Name, code)
		}
	}
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// mediaTypes lists the media types of a body or answer, sorted, joined
// by commas.
func mediaTypes(v map[string]any) string {
	c, _ := v["content"].(map[string]any)
	var out []string
	for k := range c {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// testJSONNames are the json names of the fields of struct type t,
// computed apart from the generator.
func testJSONNames(t reflect.Type) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			et := f.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			out = append(out, testJSONNames(et)...)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	return out
}

// wireTypes are the named struct types the API carries.
func wireTypes() map[reflect.Type]bool {
	out := map[reflect.Type]bool{}
	var add func(t reflect.Type)
	add = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || t == reflect.TypeFor[time.Time]() || out[t] {
			return
		}
		out[t] = true
		for i := 0; i < t.NumField(); i++ {
			add(t.Field(i).Type)
		}
	}
	for _, op := range api.Ops {
		add(reflect.TypeOf(op.Request))
		add(reflect.TypeOf(op.Response))
	}
	add(reflect.TypeFor[api.Event]())
	add(reflect.TypeFor[api.Error]())
	add(reflect.TypeFor[api.Health]())
	return out
}

func TestOpenAPISchemas(t *testing.T) {
	_, doc := openapiDoc(t)
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	types := wireTypes()
	byName := map[string][]reflect.Type{}
	for ty := range types {
		byName[ty.Name()] = append(byName[ty.Name()], ty)
	}
	used := map[string]bool{}
	for ty := range types {
		name := ty.Name()
		if len(byName[name]) > 1 && ty.PkgPath() != reflect.TypeFor[api.Op]().PkgPath() {
			pkg := ty.PkgPath()[strings.LastIndex(ty.PkgPath(), "/")+1:]
			name = strings.ToUpper(pkg[:1]) + pkg[1:] + name
		}
		used[name] = true
		s, _ := schemas[name].(map[string]any)
		if s == nil {
			t.Errorf("%s (%s) has no schema", name, ty)
			continue
		}
		props, _ := s["properties"].(map[string]any)
		var got []string
		for k := range props {
			got = append(got, k)
		}
		want := testJSONNames(ty)
		sort.Strings(got)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Errorf("schema %s has properties %v; %s has json fields %v", name, got, ty, want)
		}
		for _, r := range asList(s["required"]) {
			if props[r.(string)] == nil {
				t.Errorf("schema %s requires %v, which it does not have", name, r)
			}
		}
	}
	for name := range schemas {
		if !used[name] {
			t.Errorf("schema %s matches no Go type of the API", name)
		}
	}
	for _, want := range []string{"CreateSandbox", "Sandbox", "Result", "Enforcement", "FileInfo", "Event", "Error", "AuditEvent", "Health"} {
		if schemas[want] == nil {
			t.Errorf("no schema %s", want)
		}
	}
	// Answers: exactly the fields without omitempty are required.
	for _, c := range []struct {
		name string
		v    any
	}{{"Sandbox", api.Sandbox{}}, {"Process", api.Process{}}, {"Result", sandbox.Result{}}, {"Event", api.Event{}}, {"Error", api.Error{}}} {
		var req []string
		for _, r := range asList(schemas[c.name].(map[string]any)["required"]) {
			req = append(req, r.(string))
		}
		var want []string
		ty := reflect.TypeOf(c.v)
		for i := 0; i < ty.NumField(); i++ {
			tag := ty.Field(i).Tag.Get("json")
			if !strings.Contains(tag, "omitempty") && !strings.Contains(tag, "omitzero") {
				name, _, _ := strings.Cut(tag, ",")
				want = append(want, name)
			}
		}
		if !slices.Equal(req, want) {
			t.Errorf("%s requires %v, want %v", c.name, req, want)
		}
	}
}

// TestOpenAPIDocKeys checks that every description and enum names a
// property or operation that exists.
func TestOpenAPIDocKeys(t *testing.T) {
	_, doc := openapiDoc(t)
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	has := func(key string) bool {
		comp, field, _ := strings.Cut(key, ".")
		s, _ := schemas[comp].(map[string]any)
		props, _ := s["properties"].(map[string]any)
		return props[field] != nil
	}
	for k := range fieldDocs {
		if !has(k) {
			t.Errorf("fieldDocs[%q] names no property", k)
		}
	}
	for k := range enums {
		if !has(k) {
			t.Errorf("enums[%q] names no property", k)
		}
	}
	for k := range typeDocs {
		if schemas[k] == nil {
			t.Errorf("typeDocs[%q] names no schema", k)
		}
	}
	for k := range opDocs {
		if _, ok := api.Lookup(k); !ok {
			t.Errorf("opDocs[%q] names no operation", k)
		}
	}
	for k := range queryDocs {
		i := strings.LastIndex(k, ".")
		op, ok := api.Lookup(k[:i])
		if !ok || !slices.Contains(testJSONNames(reflect.TypeOf(op.Request)), k[i+1:]) {
			t.Errorf("queryDocs[%q] names no parameter", k)
		}
	}
}

// constValues returns the string constants of file whose names start
// with prefix.
func constValues(t *testing.T, file, prefix string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if !strings.HasPrefix(n.Name, prefix) || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					v, _ := strconv.Unquote(lit.Value)
					out = append(out, v)
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no %s* constants in %s", prefix, file)
	}
	return out
}

// TestOpenAPIEnums checks that the closed sets of the document hold every
// constant of the source.
func TestOpenAPIEnums(t *testing.T) {
	for _, c := range []struct{ file, prefix, key string }{
		{"../../errors.go", "Code", "Error.code"},
		{"../../api.go", "State", "Sandbox.state"},
		{"../../api.go", "End", "Sandbox.end_reason"},
		{"../../api.go", "Proc", "Process.state"},
		{"../../api.go", "Event", "Event.type"},
		{"../../../sandbox/result.go", "Reason", "Result.exit_reason"},
	} {
		want := constValues(t, c.file, c.prefix)
		got := enums[c.key]
		sort.Strings(want)
		got = slices.Clone(got)
		sort.Strings(got)
		if !slices.Equal(got, want) {
			t.Errorf("enum %s = %v; %s has %s* = %v", c.key, got, c.file, c.prefix, want)
		}
	}
	// Every status an error code has is a documented error answer.
	_, doc := openapiDoc(t)
	responses := doc["components"].(map[string]any)["responses"].(map[string]any)
	for _, c := range errorCodes {
		if responses[errorResponseName(api.HTTPStatus(&api.Error{Code: c}))] == nil {
			t.Errorf("code %s: no shared answer for status %d", c, api.HTTPStatus(&api.Error{Code: c}))
		}
	}
}
