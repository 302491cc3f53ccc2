// Package openapi builds the OpenAPI document of moat's HTTP API from the
// wire contract, package api: its operations table ([api.Ops]) and the
// json tags of its request and answer types. It lives apart from package
// api so that the Go SDK (package client) and other users of api do not
// compile it; cmd genopenapi and the tests use it.
package openapi

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/sandbox"
)

// Document returns the OpenAPI 3.1 document of the HTTP API as indented
// JSON ending with a newline. It is built from [Ops] and from the json
// tags of the request and answer types, so it cannot drift from what the
// server binds; docs/openapi.json is its committed output
// (`go run ./api/internal/genopenapi > docs/openapi.json`).
func Document() ([]byte, error) {
	g := &openapiGen{
		types:     map[reflect.Type]bool{},
		request:   map[reflect.Type]bool{},
		response:  map[reflect.Type]bool{},
		pathBound: map[reflect.Type]map[string]bool{},
	}
	doc, err := g.document()
	if err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	return buf.Bytes(), nil
}

// errorCodes lists every error code of the API, in the order of
// errors.go.
var errorCodes = []string{
	api.CodeInvalidArgument, api.CodeUnauthenticated, api.CodePermissionDenied, api.CodeNotFound, api.CodeMethodNotAllowed,
	api.CodeTimeout, api.CodeBusy, api.CodeConflict, api.CodeGone, api.CodeTooLarge, api.CodeUnsupportedMedia, api.CodeTooMany,
	api.CodeInternal, api.CodeSetup, api.CodeUnavailable, api.CodeFile, api.CodeNotRunning, api.CodeUnimplemented, api.CodePolicyDenied,
	api.CodeStorage,
}

// fileErrnos are the errno names of file_error that have a status of
// their own (any other errno is 400).
var fileErrnos = []string{"ENOENT", "ENOTDIR", "EACCES", "EPERM", "EROFS", "EEXIST", "ENOTEMPTY", "EISDIR",
	"EBUSY", "ETOOBIG", "ENOSPC", "EFBIG", "ENAMETOOLONG"}

// object is a JSON object that keeps its members in insertion order.
type object []member

type member struct {
	k string
	v any
}

func (o object) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, err := marshalPlain(m.k)
		if err != nil {
			return nil, err
		}
		buf.Write(k)
		buf.WriteByte(':')
		v, err := marshalPlain(m.v)
		if err != nil {
			return nil, err
		}
		buf.Write(v)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// marshalPlain is json.Marshal without HTML escaping.
func marshalPlain(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// set replaces the member k, or appends it.
func (o *object) set(k string, v any) {
	for i := range *o {
		if (*o)[i].k == k {
			(*o)[i].v = v
			return
		}
	}
	*o = append(*o, member{k, v})
}

// openapiGen builds the document.
type openapiGen struct {
	// types are the named struct types that become component schemas.
	types map[reflect.Type]bool
	// request and response say where a type is reachable from.
	request, response map[reflect.Type]bool
	// pathBound names the fields of a request type that some operation
	// fills from its path.
	pathBound map[reflect.Type]map[string]bool
	names     map[reflect.Type]string
}

var (
	timeType          = reflect.TypeFor[time.Time]()
	rawType           = reflect.TypeFor[json.RawMessage]()
	jsonMarshalerType = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

// jsonField is one field of a struct as encoding/json sees it.
type jsonField struct {
	name      string
	typ       reflect.Type
	omitempty bool // omitempty or omitzero
	goName    string
}

// jsonFields returns the fields encoding/json reads and writes for the
// struct type t, embedded structs flattened.
func jsonFields(t reflect.Type) ([]jsonField, error) {
	var out []jsonField
	seen := map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			et := f.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				sub, err := jsonFields(et)
				if err != nil {
					return nil, err
				}
				for _, s := range sub {
					if seen[s.name] {
						return nil, fmt.Errorf("%s: field %q appears twice", t, s.name)
					}
					seen[s.name] = true
					out = append(out, s)
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		jf := jsonField{name: name, typ: f.Type, goName: f.Name}
		for _, o := range strings.Split(opts, ",") {
			switch o {
			case "omitempty", "omitzero":
				jf.omitempty = true
			case "string":
				return nil, fmt.Errorf("%s.%s: the ,string option is not supported", t, f.Name)
			}
		}
		if seen[name] {
			return nil, fmt.Errorf("%s: field %q appears twice", t, name)
		}
		seen[name] = true
		out = append(out, jf)
	}
	return out, nil
}

// collect records the named struct types reachable from t.
func (g *openapiGen) collect(t reflect.Type, request bool) error {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
		if t == rawType {
			return nil
		}
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == timeType {
		return nil
	}
	if t.Name() == "" {
		return fmt.Errorf("anonymous struct types are not supported (%s)", t)
	}
	mark := g.response
	if request {
		mark = g.request
	}
	if mark[t] {
		return nil
	}
	mark[t] = true
	g.types[t] = true
	fields, err := jsonFields(t)
	if err != nil {
		return err
	}
	for _, f := range fields {
		if err := g.collect(f.typ, request); err != nil {
			return fmt.Errorf("%s.%s: %w", t.Name(), f.goName, err)
		}
	}
	return nil
}

// name assigns component names: a type's Go name, or, when two packages
// use the same name, the package's name before it for the types outside
// package api (a sandbox.Event beside api.Event would be "SandboxEvent").
func (g *openapiGen) nameTypes() {
	byName := map[string][]reflect.Type{}
	for t := range g.types {
		byName[t.Name()] = append(byName[t.Name()], t)
	}
	apiPkg := reflect.TypeFor[api.Op]().PkgPath()
	g.names = map[reflect.Type]string{}
	for n, ts := range byName {
		for _, t := range ts {
			if len(ts) == 1 || t.PkgPath() == apiPkg {
				g.names[t] = n
				continue
			}
			pkg := t.PkgPath()[strings.LastIndex(t.PkgPath(), "/")+1:]
			g.names[t] = strings.ToUpper(pkg[:1]) + pkg[1:] + n
		}
	}
}

func ref(name string) object {
	return object{{"$ref", "#/components/schemas/" + name}}
}

// schema is the JSON schema of values of type t.
func (g *openapiGen) schema(t reflect.Type) (object, error) {
	switch {
	case t == timeType:
		return object{{"type", "string"}, {"format", "date-time"}}, nil
	case t == rawType:
		return object{{"description", "Any JSON value."}}, nil
	}
	if t.Kind() != reflect.Pointer && (t.Implements(jsonMarshalerType) || t.Implements(textMarshalerType) ||
		reflect.PointerTo(t).Implements(jsonMarshalerType) || reflect.PointerTo(t).Implements(textMarshalerType)) {
		return nil, fmt.Errorf("%s marshals itself: its schema is unknown", t)
	}
	switch t.Kind() {
	case reflect.Pointer:
		return g.schema(t.Elem())
	case reflect.Struct:
		name, ok := g.names[t]
		if !ok {
			return nil, fmt.Errorf("%s was not collected", t)
		}
		return ref(name), nil
	case reflect.Slice, reflect.Array:
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
			return object{{"type", "string"}, {"format", "byte"}, {"contentEncoding", "base64"}}, nil
		}
		items, err := g.schema(t.Elem())
		if err != nil {
			return nil, err
		}
		return object{{"type", "array"}, {"items", items}}, nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("%s: only maps with string keys are supported", t)
		}
		v, err := g.schema(t.Elem())
		if err != nil {
			return nil, err
		}
		return object{{"type", "object"}, {"additionalProperties", v}}, nil
	case reflect.String:
		return object{{"type", "string"}}, nil
	case reflect.Bool:
		return object{{"type", "boolean"}}, nil
	case reflect.Int, reflect.Int64:
		return object{{"type", "integer"}, {"format", "int64"}}, nil
	case reflect.Int8, reflect.Int16, reflect.Int32:
		return object{{"type", "integer"}, {"format", "int32"}}, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return object{{"type", "integer"}, {"format", "int64"}, {"minimum", 0}}, nil
	case reflect.Float32:
		return object{{"type", "number"}, {"format", "float"}}, nil
	case reflect.Float64:
		return object{{"type", "number"}, {"format", "double"}}, nil
	case reflect.Interface:
		return object{{"description", "Any JSON value."}}, nil
	}
	return nil, fmt.Errorf("%s: kind %s has no JSON schema", t, t.Kind())
}

// requiredIn says whether a request must carry field f of type t: a
// string or a list that is always encoded, that no path fills and that
// the server cannot do without.
func (g *openapiGen) requiredIn(t reflect.Type, f jsonField) bool {
	if f.omitempty || g.pathBound[t][f.name] || optionalRequestFields[g.names[t]+"."+f.name] {
		return false
	}
	k := f.typ.Kind()
	return k == reflect.String || k == reflect.Slice && f.typ.Elem().Kind() != reflect.Uint8
}

// optionalRequestFields are request fields always encoded that a caller
// may still leave out.
var optionalRequestFields = map[string]bool{
	"Bind.target": true, // defaults to the source
}

// component is the schema of the named struct type t.
func (g *openapiGen) component(t reflect.Type) (object, error) {
	name := g.names[t]
	fields, err := jsonFields(t)
	if err != nil {
		return nil, err
	}
	var props object
	var reqResp, reqReq []string
	for _, f := range fields {
		s, err := g.schema(f.typ)
		if err != nil {
			return nil, fmt.Errorf("%s.%s: %w", t.Name(), f.goName, err)
		}
		key := name + "." + f.name
		if e, ok := enums[key]; ok {
			s.set("enum", e)
		}
		desc := fieldDocs[key]
		if desc == "" && g.pathBound[t][f.name] {
			desc = fmt.Sprintf("Over HTTP, taken from the path ({%s}); over JSON-RPC, required.", f.name)
		}
		if desc != "" {
			if s[0].k == "$ref" {
				// Keep $ref alone in its object for older tools.
				s = object{{"description", desc}, {"allOf", []object{s}}}
			} else {
				s.set("description", desc)
			}
		}
		if f.typ.Kind() == reflect.Pointer && !f.omitempty {
			s = object{{"anyOf", []object{s, {{"type", "null"}}}}}
		}
		props.set(f.name, s)
		if !f.omitempty {
			reqResp = append(reqResp, f.name)
		}
		if g.requiredIn(t, f) {
			reqReq = append(reqReq, f.name)
		}
	}
	var required []string
	switch {
	case g.request[t] && g.response[t]:
		if !slices.Equal(reqReq, reqResp) {
			return nil, fmt.Errorf("%s is both a request and an answer, with different required fields", t)
		}
		required = reqResp
	case g.request[t]:
		required = reqReq
	default:
		required = reqResp
	}
	out := object{{"type", "object"}}
	if d := typeDocs[name]; d != "" {
		out.set("description", d)
	}
	if props == nil {
		props = object{}
	}
	out.set("properties", props)
	if len(required) > 0 {
		out.set("required", required)
	}
	return out, nil
}

// Tags group the operations by the first element of their names.
var openapiTags = []struct{ name, desc string }{
	{"sandbox", "Sandboxes: create, list, describe, delete."},
	{"process", "Processes in a sandbox: run to completion, start in the background, follow output, stdin, signals."},
	{"file", "Files inside a sandbox, read and written by the sandbox's agent under the sandbox's own protections."},
	{"audit", "The caller's audit events."},
	{"approvals", "Calls that a policy's ask rule holds until a person answers: list and follow them (any token of the tenant), answer them (approver tokens)."},
	{"build", "Sandboxed builds of untrusted source: a source package (a tar) checked and normalized, built by a command in a sandbox of a toolchain template, its outputs collected as artifacts by sha256."},
	{"workflow", "Workflow runs: DAGs of sandboxed steps (sequential chains retried from snapshots, parallel groups under a budget, concurrent groups by priority), kept in the store across daemon restarts."},
	{"agent", "Agent runs: an agent of an agents document works on a task, its model calls made by the daemon's one model client, every tool call an API call of the run's owner in the agent's sandbox; kept in the store across daemon restarts."},
	{"health", "Liveness, readiness and metrics (no token)."},
}

func (g *openapiGen) document() (object, error) {
	for _, op := range api.Ops {
		rt := reflect.TypeOf(op.Request)
		for _, p := range pathParams(op.Path) {
			if g.pathBound[rt] == nil {
				g.pathBound[rt] = map[string]bool{}
			}
			g.pathBound[rt][p] = true
		}
		if err := g.collect(rt, true); err != nil {
			return nil, fmt.Errorf("%s: %w", op.Name, err)
		}
		if err := g.collect(reflect.TypeOf(op.Response), false); err != nil {
			return nil, fmt.Errorf("%s: %w", op.Name, err)
		}
	}
	for _, v := range []any{api.Event{}, api.Error{}, api.Health{}} {
		if err := g.collect(reflect.TypeOf(v), false); err != nil {
			return nil, err
		}
	}
	g.nameTypes()

	paths := object{}
	index := map[string]int{}
	for _, op := range api.Ops {
		o, err := g.operation(op)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op.Name, err)
		}
		i, ok := index[op.Path]
		if !ok {
			i = len(paths)
			index[op.Path] = i
			paths.set(op.Path, object{})
		}
		item := paths[i].v.(object)
		for _, m := range item {
			if m.k == strings.ToLower(op.Method) {
				return nil, fmt.Errorf("%s: %s %s is taken", op.Name, op.Method, op.Path)
			}
		}
		item.set(strings.ToLower(op.Method), o)
		paths[i].v = item
	}
	healthResp := object{{"content", object{{"application/json", object{{"schema", ref("Health")}}}}}}
	withDesc := func(d string, o object) object { return append(object{{"description", d}}, o...) }
	paths.set("/healthz", object{{"get", object{
		{"operationId", "healthz"}, {"summary", "Liveness: the daemon answers."}, {"tags", []string{"health"}},
		{"security", []any{}},
		{"responses", object{{"200", withDesc("The daemon is alive.", healthResp)}}},
	}}})
	paths.set("/readyz", object{{"get", object{
		{"operationId", "readyz"}, {"summary", "Readiness: the daemon takes calls (503 while it shuts down)."},
		{"tags", []string{"health"}}, {"security", []any{}},
		{"responses", object{
			{"200", withDesc("The daemon takes calls.", healthResp)},
			{"503", withDesc("The daemon is shutting down; reason says why.", healthResp)},
		}},
	}}})
	paths.set("/metrics", object{{"get", object{
		{"operationId", "metrics"}, {"summary", "Prometheus metrics in the text exposition format (version 0.0.4)."},
		{"tags", []string{"health"}}, {"security", []any{}},
		{"responses", object{{"200", object{{"description", "The metrics."},
			{"content", object{{"text/plain", object{{"schema", object{{"type", "string"}}}}}}}}}}},
	}}})

	var names []string
	byName := map[string]reflect.Type{}
	for t, n := range g.names {
		names = append(names, n)
		byName[n] = t
	}
	sort.Strings(names)
	schemas := object{}
	for _, n := range names {
		c, err := g.component(byName[n])
		if err != nil {
			return nil, err
		}
		schemas.set(n, c)
	}

	var tags []object
	for _, t := range openapiTags {
		tags = append(tags, object{{"name", t.name}, {"description", t.desc}})
	}
	return object{
		{"openapi", "3.1.0"},
		{"info", object{
			{"title", "moat control-plane API"},
			{"version", api.Version},
			{"description", infoDescription},
		}},
		{"servers", []object{{{"url", "http://127.0.0.1:7070"}, {"description", "`moat serve` with its default --listen address"}}}},
		{"tags", tags},
		{"paths", paths},
		{"components", object{
			{"securitySchemes", object{{"bearer", object{
				{"type", "http"}, {"scheme", "bearer"},
				{"description", "An API token from <data>/tokens (one \"TENANT TOKEN\" per line); the token decides the tenant."},
			}}}},
			{"responses", errorResponses()},
			{"schemas", schemas},
		}},
	}, nil
}

// pathParams are the names of the {wildcards} of an HTTP path.
func pathParams(p string) []string {
	var out []string
	for _, seg := range strings.Split(p, "/") {
		if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") {
			out = append(out, seg[1:len(seg)-1])
		}
	}
	return out
}

// errorStatuses are the statuses an error answer may have.
func errorStatuses() []int {
	set := map[int]bool{}
	for _, c := range errorCodes {
		if c == api.CodeFile {
			for _, e := range append(fileErrnos, "EINVAL") {
				set[api.HTTPStatus(&api.Error{Code: c, Errno: e})] = true
			}
			continue
		}
		set[api.HTTPStatus(&api.Error{Code: c})] = true
		if c == api.CodeTooMany {
			set[api.HTTPStatus(&api.Error{Code: c, Resource: api.ResourceOpenFiles})] = true
		}
	}
	var out []int
	for s := range set {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// errorResponseName names the shared response of an error status:
// "NotFound", "Conflict"…
func errorResponseName(status int) string {
	return strings.NewReplacer(" ", "", "-", "").Replace(http.StatusText(status))
}

// errorResponses are the shared error answers, one per status, each
// listing the codes (and file_error errnos) that have it.
func errorResponses() object {
	out := object{}
	for _, st := range errorStatuses() {
		var codes []string
		for _, c := range errorCodes {
			if c == api.CodeFile {
				var errnos []string
				for _, e := range fileErrnos {
					if api.HTTPStatus(&api.Error{Code: c, Errno: e}) == st {
						errnos = append(errnos, e)
					}
				}
				if api.HTTPStatus(&api.Error{Code: c, Errno: "EINVAL"}) == st {
					errnos = append(errnos, "any other: ELOOP, EBADTAR, EINVAL…")
				}
				if len(errnos) > 0 {
					codes = append(codes, fmt.Sprintf("%s (errno %s)", c, strings.Join(errnos, ", ")))
				}
				continue
			}
			if api.HTTPStatus(&api.Error{Code: c}) == st {
				codes = append(codes, c)
			}
			if c == api.CodeTooMany && api.HTTPStatus(&api.Error{Code: c, Resource: api.ResourceOpenFiles}) == st {
				codes = append(codes, fmt.Sprintf("%s (with resource, e.g. %s: the daemon's own)", c, api.ResourceOpenFiles))
			}
		}
		r := object{
			{"description", fmt.Sprintf("%s: %s.", http.StatusText(st), strings.Join(codes, "; "))},
		}
		if st == http.StatusUnauthorized {
			r.set("headers", object{{"WWW-Authenticate", object{
				{"description", `Bearer realm="moat"`}, {"schema", object{{"type", "string"}}},
			}}})
		}
		if st == http.StatusTooManyRequests {
			r.set("headers", object{{"Retry-After", object{
				{"description", "Seconds to wait: set when a source is over its rate of failed authentications."},
				{"schema", object{{"type", "integer"}}},
			}}})
		}
		r.set("content", object{{"application/json", object{{"schema", ref("Error")}}}})
		out.set(errorResponseName(st), r)
	}
	return out
}

// opStatuses are the error statuses an operation may answer.
func opStatuses(op api.Op) []int {
	// 429: a source over its rate of failed authentications; 503: the
	// daemon out of a resource of its own (open files).
	set := map[int]bool{400: true, 401: true, 408: true, 429: true, 500: true, 503: true}
	add := func(s ...int) {
		for _, x := range s {
			set[x] = true
		}
	}
	switch op.In {
	case api.BodyJSON:
		add(413, 415)
	case api.BodyRaw:
		add(413)
	}
	params := pathParams(op.Path)
	if slices.Contains(params, "sandbox") {
		add(404)
		if op.Name != api.OpSandboxGet && op.Name != api.OpSandboxDelete {
			add(409) // sandbox_not_running, busy, conflict
		}
	}
	if slices.Contains(params, "process") {
		add(404)
	}
	if slices.Contains(params, "snapshot") {
		add(404)
	}
	if slices.Contains(params, "run") {
		add(404)
		if op.Name != api.OpWorkflowGet && op.Name != api.OpWorkflowEvents && op.Name != api.OpAgentGet && op.Name != api.OpAgentEvents {
			add(409) // conflict: the run's state does not allow the call
		}
	}
	if strings.HasPrefix(op.Name, "snapshot.") || op.Name == api.OpSandboxRestore || op.Name == api.OpTemplateList || op.Name == api.OpSandboxCreate {
		add(501) // unimplemented: no template store, or no freezer
	}
	if strings.HasPrefix(op.Name, "file.") {
		add(403, 404, 409, 413) // file_error
	}
	switch op.Name {
	case api.OpSandboxCreate, api.OpExec, api.OpStart, api.OpStdin, api.OpFileWrite, api.OpFileMkdir, api.OpFileRemove, api.OpFileMove, api.OpFileUpload,
		api.OpSnapshotCreate, api.OpSnapshotFork, api.OpSandboxRestore, api.OpSandboxNetwork,
		api.OpWorkflowCreate, api.OpWorkflowResume, api.OpWorkflowAdd, api.OpAgentCreate, api.OpAgentResume:
		// New work: insufficient_storage while the daemon's data disk is
		// full (refused before it runs; or, for exec and start, ran but not
		// yet recorded: the error's result holds what it answered).
		add(507)
	}
	switch op.Name {
	case api.OpSandboxCreate:
		add(403, 429, 503) // 403: host paths refused, policy_denied
	case api.OpExec:
		add(403) // policy_denied
	case api.OpSandboxNetwork:
		add(403) // policy_denied: mode open, an address entry the managed policy does not permit
	case api.OpStart:
		add(403, 429) // policy_denied; resource_exhausted: too many running processes
	case api.OpApprovalGet:
		add(404)
	case api.OpApprovalAnswer:
		add(403, 404, 409) // permission_denied (not an approver); conflict (answered)
	case api.OpStdin, api.OpSignal:
		add(410)
	case api.OpSnapshotDelete:
		add(409) // conflict: a snapshot or live sandbox uses it
	case api.OpSnapshotFork:
		add(403, 429, 503) // as sandbox.create
	case api.OpSnapshotCreate:
		add(413, 507) // too_large: over the capture caps; insufficient_storage: the tenant's store quota
	case api.OpWorkflowCreate, api.OpWorkflowCancel, api.OpWorkflowResume, api.OpWorkflowAdd:
		add(503) // unavailable: the daemon is stopping
	case api.OpBuildCreate:
		// 415: a body neither a tar nor multipart; 429: too many
		// sandboxes; 501: no builds on this system; 503: stopping;
		// 507: the data disk is full.
		add(413, 415, 429, 501, 503, 507)
	case api.OpBuildGet, api.OpBuildLog, api.OpBuildArtifact, api.OpBuildDelete:
		add(404)
	case api.OpAgentCreate, api.OpAgentResume:
		// 429: the tenant's unfinished runs at the daemon's max_runs;
		// 501: no model providers configured; 503: stopping.
		add(429, 501, 503)
	case api.OpAgentCancel:
		add(503)
	}
	var out []int
	for s := range set {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// binary is the schema of a raw body of media type mt.
func binary(mt string) object {
	return object{{"type", "string"}, {"format", "binary"}, {"contentMediaType", mt}}
}

// buildSourceTypes are the media types of build.create's tar body.
var buildSourceTypes = []string{"application/x-tar", "application/gzip", "application/octet-stream"}

// rawMediaType is the media type of an operation's raw body.
func rawMediaType(op api.Op) string {
	if op.Name == api.OpFileUpload || op.Name == api.OpFileDownload {
		return "application/x-tar"
	}
	return "application/octet-stream"
}

// queryable says whether the server can bind a value of type t from the
// query string (server/http.go, setField).
func queryable(t reflect.Type) bool {
	switch {
	case t == timeType:
		return true
	case t.Kind() == reflect.Slice:
		return t.Elem().Kind() == reflect.String || t.Elem().Kind() == reflect.Uint8
	case jsonQuery(t):
		return true
	}
	switch t.Kind() {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int64, reflect.Uint64, reflect.Float64:
		return true
	}
	return false
}

// jsonQuery says whether a query parameter of type t travels as one JSON
// value (a map of strings: labels).
func jsonQuery(t reflect.Type) bool {
	return t.Kind() == reflect.Map && t.Key().Kind() == reflect.String && t.Elem().Kind() == reflect.String
}

func (g *openapiGen) operation(op api.Op) (object, error) {
	rt := reflect.TypeOf(op.Request)
	respName := g.names[reflect.TypeOf(op.Response)]
	reqName := g.names[rt]
	if respName == "" || reqName == "" {
		return nil, fmt.Errorf("request and answer must be named struct types")
	}
	fields, err := jsonFields(rt)
	if err != nil {
		return nil, err
	}
	byName := map[string]jsonField{}
	for _, f := range fields {
		byName[f.name] = f
	}
	tag, _, _ := strings.Cut(op.Name, ".")
	o := object{
		{"operationId", op.Name},
		{"summary", op.Summary},
	}
	if d := opDocs[op.Name]; d != "" {
		o.set("description", d)
	}
	o.set("tags", []string{tag})
	o.set("security", []object{{{"bearer", []string{}}}})

	var params []object
	pp := pathParams(op.Path)
	for _, p := range pp {
		f, ok := byName[p]
		if !ok {
			return nil, fmt.Errorf("path parameter {%s} is not a field of %s", p, rt)
		}
		s, err := g.schema(f.typ)
		if err != nil {
			return nil, err
		}
		desc := "The sandbox's id."
		switch {
		case p == "process":
			desc = "The process's id in its sandbox."
		case p == "id" && tag == "build":
			desc = "The build's id."
		case p == "digest":
			desc = "The artifact's sha256, 64 hex digits (artifacts[].sha256)."
		case p == "id":
			desc = "The approval's id (ap_...)."
		case p == "run" && tag == "agent":
			desc = "The agent run's id (ag-...)."
		case p == "run":
			desc = "The workflow run's id (wf-...)."
		}
		params = append(params, object{{"name", p}, {"in", "path"}, {"required", true}, {"description", desc}, {"schema", s}})
	}
	if op.In == api.BodyNone || op.In == api.BodyRaw {
		for _, f := range fields {
			if slices.Contains(pp, f.name) || op.In == api.BodyRaw && f.name == "content" {
				continue
			}
			if !queryable(f.typ) {
				return nil, fmt.Errorf("%s.%s cannot travel in a query string", rt.Name(), f.goName)
			}
			s, err := g.schema(f.typ)
			if err != nil {
				return nil, err
			}
			if e, ok := enums[reqName+"."+f.name]; ok {
				s.set("enum", e)
			}
			// build.create's settings may all come in its multipart body.
			required := g.requiredIn(rt, f) && op.Name != api.OpBuildCreate
			p := object{{"name", f.name}, {"in", "query"}, {"required", required}}
			if d := fieldDocs[reqName+"."+f.name]; d != "" {
				p.set("description", d)
			}
			if d := queryDocs[op.Name+"."+f.name]; d != "" {
				p.set("description", d)
			}
			if jsonQuery(f.typ) {
				// One JSON object: ?labels={"team":"infra"}.
				p.set("content", object{{"application/json", object{{"schema", s}}}})
			} else {
				p.set("schema", s)
			}
			params = append(params, p)
		}
	}
	if len(params) > 0 {
		o.set("parameters", params)
	}

	switch op.In {
	case api.BodyJSON:
		required := false
		for _, f := range fields {
			required = required || g.requiredIn(rt, f)
		}
		o.set("requestBody", object{
			{"required", required},
			{"content", object{{"application/json", object{{"schema", ref(reqName)}}}}},
		})
	case api.BodyRaw:
		if op.Name == api.OpBuildCreate {
			o.set("requestBody", buildRequestBody(reqName))
			break
		}
		mt := rawMediaType(op)
		desc := "The file's new content (at most the server's max file bytes, 64 MiB by default)."
		if mt == "application/x-tar" {
			desc = "A tar stream, extracted under path (at most the server's max file bytes unpacked, 64 MiB by default)."
		}
		o.set("requestBody", object{
			{"description", desc},
			{"required", true},
			{"content", object{{mt, object{{"schema", binary(mt)}}}}},
		})
	case api.BodyStream:
		return nil, fmt.Errorf("a request cannot be a stream")
	}

	status, statusDesc := "200", "OK."
	if op.Name == api.OpSandboxCreate || op.Name == api.OpStart || op.Name == api.OpWorkflowCreate || op.Name == api.OpBuildCreate || op.Name == api.OpAgentCreate {
		status, statusDesc = "201", "Created."
	}
	ndjson := object{{"application/x-ndjson", object{{"schema", ref("Event")}}}}
	var content object
	switch op.Out {
	case api.BodyJSON:
		content = object{{"application/json", object{{"schema", ref(respName)}}}}
		switch op.Name {
		case api.OpExec:
			content = append(content, ndjson...)
			statusDesc = "The process's result (application/json); with stream=true, an NDJSON stream of events, one Event per line, ending with an exit or error event."
		case api.OpApprovalList:
			content = append(content, ndjson...)
			statusDesc = "The approvals (application/json); with follow=true, an NDJSON stream of approval events, one Event per line, that lasts until the client goes away (or ends with an error event)."
		}
	case api.BodyRaw:
		mt := rawMediaType(op)
		content = object{{mt, object{{"schema", binary(mt)}}}}
		statusDesc = "The file's content."
		if mt == "application/x-tar" {
			statusDesc = "A tar stream of path (a file or a tree)."
		}
		if op.Name == api.OpBuildArtifact {
			statusDesc = "The artifact's bytes, with its digest as ETag."
		}
	case api.BodyStream:
		content = ndjson
		statusDesc = "An NDJSON stream of events, one Event per line."
	}
	ok := object{{"description", statusDesc}}
	if op.Name == api.OpBuildArtifact {
		ok.set("headers", object{{"ETag", object{
			{"description", "\"sha256:<hex>\": the artifact's digest."},
			{"schema", object{{"type", "string"}}},
		}}})
	}
	ok.set("content", content)
	responses := object{{status, ok}}
	for _, st := range opStatuses(op) {
		responses.set(strconv.Itoa(st), object{{"$ref", "#/components/responses/" + errorResponseName(st)}})
	}
	o.set("responses", responses)

	rpc := object{{"method", op.Name}, {"params", ref(reqName)}, {"result", ref(respName)}}
	if op.Out == api.BodyStream || op.Name == api.OpExec || op.Name == api.OpApprovalList {
		rpc.set("notification", api.NotifyEvent)
	}
	o.set("x-jsonrpc", rpc)
	return o, nil
}

// enums are the values of string fields with a closed set, by
// "Component.field".
var enums = map[string][]string{
	"Sandbox.state":       {api.StateRunning, api.StateStopped},
	"Sandbox.end_reason":  {api.EndDeleted, api.EndIdle, api.EndTimeout, api.EndLost, api.EndExited, api.EndShutdown},
	"ListSandboxes.state": {api.StateRunning, api.StateStopped},
	"Process.state":       {api.ProcRunning, api.ProcExited},
	"Event.type":          {api.EventSandbox, api.EventStdout, api.EventStderr, api.EventExit, api.EventError, api.EventLost, api.EventApproval, api.EventWorkflow, api.EventAgent},
	"Error.code":          errorCodes,
	"Result.exit_reason": {string(sandbox.ReasonExited), string(sandbox.ReasonSignaled), string(sandbox.ReasonTimeout),
		string(sandbox.ReasonSandboxTimeout), string(sandbox.ReasonOOM), string(sandbox.ReasonKilled), string(sandbox.ReasonSetupError)},
	"FileInfo.type":           {"file", "dir", "symlink", "other"},
	"Health.status":           {"ok", "unavailable"},
	"AuditEvent.decision":     {audit.DecisionAllow, audit.DecisionDeny, audit.DecisionAsk},
	"Approval.state":          approvalStates,
	"Approval.kind":           {"Exec", "Read", "Write"},
	"Approval.scope":          {api.ScopeOnce, api.ScopeAlways},
	"ListApprovals.state":     append(slices.Clone(approvalStates), "all"),
	"AnswerApproval.decision": {api.DecisionAllow, api.DecisionDeny},
	"AnswerApproval.scope":    {api.ScopeOnce, api.ScopeAlways},
	"CallRules.profile":       {"untrusted"},
	"SandboxPolicy.profile":   {"untrusted", "trusted"},
	"WorkflowRun.state":       workflowRunStates,
	"ListWorkflows.state":     workflowRunStates,
	"WorkflowGroup.state":     {api.StepPending, api.StepRunning, api.StepSucceeded, api.StepFailed, api.StepSkipped, api.StepCancelled},
	"WorkflowGroup.mode":      {"sequential", "parallel", "concurrent"},
	"WorkflowStep.state":      workflowStepStates,
	"WorkflowStep.priority":   {"critical", "normal", "background"},
	"WorkflowAttempt.state":   append(slices.Clone(workflowStepStates), "interrupted"),
	"Build.status":            buildStates,
	"ListBuilds.status":       buildStates,
	"Build.reason": {api.ReasonSourceTooManyFiles, api.ReasonSourceFileTooLarge, api.ReasonSourceTooLarge, api.ReasonSourceBadPath,
		api.ReasonSourceBadType, api.ReasonSourceUnreadable, api.ReasonPolicyDenied, api.ReasonTimeout, api.ReasonOOM,
		api.ReasonCompileFailed, api.ReasonOutputMissing, api.ReasonOutputTooLarge, api.ReasonInterrupted, api.ReasonSetupFailed},
	"CreateBuild.net":     {"none", "proxy"},
	"AgentRun.state":      agentRunStates,
	"ListAgentRuns.state": agentRunStates,
	"AgentEvent.type": {api.AgentEvRunStarted, api.AgentEvRunResumed, api.AgentEvRunSucceeded, api.AgentEvRunFailed, api.AgentEvRunCancelled,
		api.AgentEvRunInterrupted, api.AgentEvModelRequest, api.AgentEvModelResponse, api.AgentEvModelError, api.AgentEvToolCall,
		api.AgentEvToolResult, api.AgentEvHandoff, api.AgentEvHandoffResult, api.AgentEvMessage},
	"WorkflowEvent.type": {api.WfRunStarted, api.WfRunResumed, api.WfRunSucceeded, api.WfRunFailed, api.WfRunCancelled, api.WfRunInterrupted,
		api.WfStepAdded, api.WfStepStarted, api.WfStepSandbox, api.WfStepRetrying, api.WfStepSnapshot, api.WfStepArtifacts,
		api.WfStepSucceeded, api.WfStepFailed, api.WfStepSkipped, api.WfStepCancelled, api.WfGroupBudget},
}

// workflowRunStates and workflowStepStates are the states of a workflow
// run (and group) and of a step.
var (
	workflowRunStates  = []string{api.RunPending, api.RunRunning, api.RunSucceeded, api.RunFailed, api.RunCancelled}
	workflowStepStates = []string{api.StepPending, api.StepRunning, api.StepRetrying, api.StepSucceeded, api.StepFailed, api.StepSkipped, api.StepCancelled}
)

// agentRunStates are the states of an agent run.
var agentRunStates = []string{api.AgentPending, api.AgentRunning, api.AgentSucceeded, api.AgentFailed, api.AgentCancelled}

// buildStates are the states of a build.
var buildStates = []string{api.BuildRunning, api.BuildSucceeded, api.BuildRefused, api.BuildFailed, api.BuildTimeout}

// approvalStates are the states of an approval.
var approvalStates = []string{api.ApprovalPending, api.ApprovalAllowed, api.ApprovalDenied, api.ApprovalExpired, api.ApprovalWithdrawn}

// typeDocs describe the component schemas.
var typeDocs = map[string]string{
	"CreateSandbox": "The body of sandbox.create. Every field may be left out.",
	"Sandbox":       "One sandbox.",
	"SandboxRef":    "Names a sandbox (sandbox.get, sandbox.delete, process.list).",
	"ListSandboxes": "The parameters of sandbox.list.",
	"SandboxList":   "The answer of sandbox.list, newest first.",
	"Exec":          "The body of process.exec (run to completion) and process.start (run in the background).",
	"Process":       "A process started in a sandbox.",
	"ProcessRef":    "Names a process (process.get, process.wait).",
	"ProcessList":   "The answer of process.list, by id.",
	"ReadOutput":    "The parameters of process.output.",
	"Stdin":         "The body of process.stdin. data_base64 (bytes that are not UTF-8) wins over data.",
	"Signal":        "The body of process.signal.",
	"Event": "One element of a stream: an NDJSON line over HTTP, a process.event notification over JSON-RPC. " +
		"Seq numbers the events of one process from 1; a reader resumes with after = the last seq it saw.",
	"Error":       "The body of every failed call. Over JSON-RPC it is the data of the error.",
	"FilePath":    "Names a file (file.read, file.list, file.stat, file.download).",
	"WriteFile":   "The params of file.write and file.upload over JSON-RPC (over HTTP, path and mode are query parameters and the content is the raw body).",
	"FileContent": "The result of file.read and file.download over JSON-RPC (over HTTP the body is the raw content).",
	"Written":     "The answer of file.write and file.upload.",
	"DirList":     "The answer of file.list: the entries sorted by name.",
	"Mkdir":       "The body of file.mkdir.",
	"Remove":      "The body of file.remove.",
	"Move":        "The body of file.move.",
	"OK":          "The answer of operations that return nothing else.",
	"AuditQuery":  "The parameters of audit.query; the server restricts them to the caller's tenant.",
	"AuditPage":   "The answer of audit.query.",
	"AuditEvent":  "One audit record.",
	"Health":      "The answer of /healthz and /readyz.",
	"Result":      "The structured outcome of one process.",
	"Enforcement": "The protections in effect for a sandbox: the fields every runtime has, and the list of protections the runtime enforces.",
	"Protection":  "One protection a runtime enforces (runtime linux: user_namespace, seccomp, landlock, ...); a protection not listed is not in force.",
	"Limits":      "Resource limits of a whole sandbox, enforced by the kernel. Zero or absent values take the server's defaults.",
	"Bind":        "A host path made visible inside the sandbox (only on servers that allow host paths).",
	"FileInfo":    "One file inside a sandbox.",
	"CallRules": "Policy rules of one sandbox (sandbox.create) or one call (process.exec, process.start): the lowest layer, below the daemon's policy files. " +
		"They can only narrow: deny and ask rules count like any other, allow rules grant nothing, and the only profile they may name is untrusted. " +
		"Rules are Kind(pattern): Exec(git push*), Read(~/.ssh/**), Write(src/**), Net(domain:*.github.com).",
	"SandboxPolicy":    "What the policy made of a sandbox at its create. The kernel's part (restrictions) stays for the sandbox's life; the daemon's decisions follow the policy files as they change.",
	"Approval":         "A call that a policy's ask rule holds until an approver answers; unanswered it expires (denied).",
	"ListApprovals":    "The parameters of approvals.list.",
	"ApprovalList":     "The answer of approvals.list, oldest first.",
	"ApprovalRef":      "Names an approval (approvals.get).",
	"AnswerApproval":   "The body of approvals.answer.",
	"CreateWorkflow":   "The body of workflow.create: a workflow document (YAML; JSON accepted) as text.",
	"WorkflowRef":      "Names a workflow run (workflow.get, workflow.cancel).",
	"ListWorkflows":    "The parameters of workflow.list.",
	"WorkflowList":     "The answer of workflow.list, newest first; each run's steps carry their state, not their attempts.",
	"ResumeWorkflow":   "The body of workflow.resume.",
	"AddWorkflowStep":  "The body of workflow.add_step.",
	"WorkflowEvents":   "The parameters of workflow.events.",
	"WorkflowRun":      "A run of a workflow document: its state, steps (each with its attempts, snapshot and outputs) and groups.",
	"WorkflowGroup":    "One group of a run, with its budget; its state sums up its steps'.",
	"WorkflowStep":     "One step of a run, with its latest attempt's result.",
	"WorkflowAttempt":  "One attempt of a step: the sandbox it ran in and what it started from.",
	"WorkflowArtifact": "One regular file a step's outputs collected, with its size and sha256.",
	"WorkflowEvent":    "One event of a run (the workflow field of an Event of type workflow). Seq numbers the run's events from 1; a reader resumes with after = the last seq it saw.",
	"CreateBuild": "The settings of build.create. Over HTTP they are query parameters (command, outputs, env and allow_domains repeated; labels one JSON object) or the JSON part settings of a multipart body, the source being the body; over JSON-RPC this object with the tar in content (base64). " +
		"Caps (max_files, max_file_bytes, max_total_bytes, timeout_ms) may only narrow the operator's: above them is 400 invalid_argument naming the cap.",
	"Build":            "A build: its settings, its outcome (status and reason), its source's digest, its artifacts and the head and tail of its log.",
	"BuildSource":      "The normalized source package.",
	"Toolchain":        "The template a build ran on.",
	"BuildArtifact":    "One collected regular file; build.artifact downloads it by its sha256.",
	"BuildLog":         "The head (first 32 KiB) and tail (last 32 KiB) of the command's output, stdout and stderr interleaved; build.log streams all of it that was kept.",
	"BuildRef":         "Names a build (build.get, build.delete).",
	"ListBuilds":       "The parameters of build.list.",
	"BuildList":        "The answer of build.list, newest first.",
	"BuildLogRequest":  "The parameters of build.log.",
	"BuildArtifactRef": "Names an artifact of a build by its sha256 (build.artifact).",
	"CreateAgentRun":   "The body of agent.create: an agents document (YAML; JSON accepted) as text, the agent to run and its task.",
	"AgentRun":         "An agent run: its state, its agents (each with its conversation's length, sandbox, usage and tool calls), its turns, usage and final answer.",
	"AgentUsage":       "What model calls cost, in tokens.",
	"AgentState":       "One agent of a run, with its own persistent conversation and sandbox.",
	"AgentEvent":       "One event of an agent run (the agent field of an Event of type agent). Seq numbers the run's events from 1; a reader resumes with after = the last seq it saw.",
	"AgentToolCall":    "One tool call the model asked for: the policy's decision and, once it ran, the result the model got (a refusal or failure in error, given to the model as a tool error).",
	"AgentRunRef":      "Names an agent run (agent.get, agent.cancel).",
	"ListAgentRuns":    "The parameters of agent.list.",
	"AgentRunList":     "The answer of agent.list, newest first.",
	"AgentEvents":      "The parameters of agent.events.",
	"ResumeAgentRun":   "The body of agent.resume.",
}

// fieldDocs describe fields, by "Component.field".
var fieldDocs = map[string]string{
	"CreateSandbox.workspace":        "A host directory bound at /workspace; only on servers that allow host paths (stdio mode does, HTTP only with --allow-host-paths), else 403. Empty: an in-memory workspace.",
	"CreateSandbox.binds":            "Extra host paths; only on servers that allow host paths, else 403.",
	"CreateSandbox.timeout_ms":       "The sandbox's maximum age in milliseconds; 0 or absent takes the server default (1 h). At most the server's maximum (24 h by default).",
	"CreateSandbox.idle_timeout_ms":  "Ends the sandbox after this long without a call in flight; 0 or absent takes the server default (10 min).",
	"CreateSandbox.labels":           "At most 64; keys 1 to 128 bytes, values at most 1024.",
	"Sandbox.running":                "How many of the sandbox's background processes have not ended.",
	"Sandbox.end_reason":             "Why a stopped sandbox ended.",
	"ListSandboxes.state":            "Keep only sandboxes in this state; absent lists running ones and those that stopped recently.",
	"ListSandboxes.limit":            "At most this many sandboxes, newest first; 0 or absent: no limit.",
	"Exec.args":                      "The argv; args[0] is looked up in the sandbox's PATH when it has no slash.",
	"Exec.env":                       "KEY=VALUE pairs added to the sandbox's default environment. The audit records only the keys.",
	"Exec.cwd":                       "The working directory inside the sandbox; default /workspace.",
	"Exec.timeout_ms":                "Ends the process after this long (exit 124); 0 or absent: no timeout of its own.",
	"Exec.stdin":                     "The process's whole standard input (process.exec only; process.start refuses it: use process.stdin).",
	"Exec.stdin_base64":              "The same as stdin for bytes that are not UTF-8; wins over stdin.",
	"Exec.output_limit":              "process.exec: the cap of each captured stream (default 2,000,000 bytes). process.start: how much of the output is kept for process.output readers (default: the server's output buffer, default buffer 1 MiB; at most 4 times the buffer). Above the server's maximum ([output] max_limit, 8 MiB by default): 400 invalid_argument naming the maximum. What the daemon holds is also bounded by its output memory budget, in all and per tenant: past it an exec's capture keeps less (truncated) and a background process's oldest output is dropped (a lost event).",
	"Exec.stream":                    "process.exec only: answer with an NDJSON event stream while the process runs.",
	"Exec.concurrent":                "Let this exec run beside another running exec in the same sandbox; otherwise the second one is refused (409 busy).",
	"ProcessRef.timeout_ms":          "process.wait: answer after this long with the process still running; 0 or absent waits as long as the sandbox lives (at most the server's maximum timeout).",
	"ReadOutput.after":               "Resume after the event with this sequence number (0: from the first event kept).",
	"ReadOutput.follow":              "Keep the stream open until the process ends; otherwise answer with what is kept now.",
	"Stdin.eof":                      "Close the process's standard input after the data.",
	"Signal.signal":                  "A name (\"TERM\", \"SIGKILL\", \"sigint\") or a number (\"15\"); it goes to the process's group.",
	"Event.process":                  "The process's id (process.output).",
	"Event.lost_bytes":               "In a lost event: how many bytes of output were dropped before the next event (counted from the start of the output when the reader resumed after output already dropped).",
	"Event.text":                     "Output that is valid UTF-8.",
	"Event.data":                     "Output that is not valid UTF-8, base64.",
	"Event.result":                   "The process's result (exit event).",
	"Event.error":                    "Why the call failed (error event).",
	"Error.errno":                    "For file_error: the kernel's error name inside the sandbox (ENOENT, EACCES, EEXIST, ENOTDIR, EISDIR, ENOTEMPTY, EROFS, ELOOP, ENOSPC) or moat's own (ETOOBIG, EBADTAR, EINVAL).",
	"FilePath.path":                  "A path inside the sandbox: absolute, or relative to /workspace.",
	"FilePath.max_bytes":             "Cap a read or download below the server's cap (64 MiB by default); a bigger file is 413.",
	"WriteFile.content":              "The content (file.write) or a tar stream (file.upload), base64.",
	"WriteFile.mode":                 "The octal permission of a new file (default \"0644\"); file.upload ignores it.",
	"FileContent.content":            "The file's content (file.read) or a tar stream (file.download), base64.",
	"Written.size":                   "Bytes written (file.write), or bytes of the tar stream read (file.upload).",
	"Mkdir.parents":                  "Create missing parents too.",
	"Mkdir.mode":                     "The octal permission (default \"0755\").",
	"Remove.recursive":               "Remove a directory and everything in it.",
	"AuditQuery.call":                "Keep only events of this call id.",
	"AuditQuery.kind":                "Keep only events whose kind starts with this: \"process.\" matches process.exec, process.start and process.exit.",
	"AuditQuery.decision":            "Keep only events with this decision (allow, deny).",
	"AuditQuery.since":               "Keep only events at or after this time (RFC 3339).",
	"AuditQuery.until":               "Keep only events before this time (RFC 3339).",
	"AuditQuery.after_seq":           "Keep only events after this sequence number (paging).",
	"AuditQuery.sandbox":             "Keep only events of this sandbox.",
	"AuditQuery.limit":               fmt.Sprintf("At most this many events (default %d, at most %d).", audit.DefaultLimit, audit.MaxLimit),
	"AuditQuery.newest":              "Return the last limit matching events instead of the first ones (still in sequence order); more then says older ones match.",
	"AuditPage.more":                 "More events match: after the last one returned, or before the first one with newest.",
	"Result.exit_code":               "The exit status; 124 timeout (the call's, or the sandbox's maximum age: see exit_reason), 125 setup failure, 126 not executable, 127 not found, 128+N killed by signal N.",
	"Result.exit_reason":             "How the call ended. timeout: the call's own timeout_ms; sandbox_timeout: the call was still running when its sandbox reached its maximum age (the sandbox's timeout_ms) and was ended, so the sandbox is gone (exit 124 both); oom: the kernel's OOM killer ended the main process (exit 137); killed: cancelled; setup_error: the process could not be started (exit 125).",
	"Result.oom_kills":               "Processes the kernel's OOM killer ended in the sandbox's memory cgroup while the call ran, the main process or any other (a child killed while the main process survives is counted here only); absent when none. The memory cgroup is the sandbox's: calls running at the same time in one sandbox count each other's kills.",
	"Result.signal":                  "The number of the signal that ended the process, if any.",
	"Result.time_to_first_output_ms": "-1 when the process wrote nothing.",
	"Result.stdout":                  "Captured stdout (process.exec without stream), capped by output_limit; bytes that are not UTF-8 appear as U+FFFD.",
	"Result.stderr":                  "Captured stderr, like stdout.",
	"FileInfo.mode":                  "Permission bits (and setuid, setgid, sticky).",
	"FileInfo.target":                "A symlink's target, as stored.",
	"AuditEvent.actor":               "Who made the call: a token's id (token:xxxxxxxx), stdio, system, pruner, anonymous.",
	"AuditEvent.request":             "What was asked, redacted: the env of a process is reduced to its keys.",
	"AuditEvent.result":              "A summary of the outcome; for a call the policy judged, result.policy holds its decision (effect, decided, rule, source, reason, approval).",
	"AuditEvent.rule":                "The policy rule that decided the call, with its source: deny Exec(git push*) (user ~/.config/moat/policy.toml:3).",
	"CreateSandbox.policy":           "Rules of this sandbox, applied to every decision of its calls; they can only narrow.",
	"Sandbox.policy":                 "What the policy made of the sandbox (running sandboxes).",
	"Exec.policy":                    "Rules of this call alone, below the sandbox's; they can only narrow.",
	"Event.approval":                 "The approval (approval event): a streamed exec sends one when it starts waiting and one when it is answered.",
	"Error.rule":                     "policy_denied: the rule that decided (deny Read(~/.ssh/**), builtin: credentials ...).",
	"Error.source":                   "policy_denied: where the rule is written: \"user ~/.config/moat/policy.toml:3\", \"per-call exec deny[0]\", \"builtin\".",
	"Error.approval":                 "policy_denied after an ask: the approval that was denied or expired.",
	"Error.resource":                 "resource_exhausted answered 503: what the daemon itself ran out of (open_files); empty for a quota or rate limit (429).",
	"Error.result":                   "insufficient_storage or unavailable from an exec or start that ran but whose record is not yet on disk (the daemon keeps it in memory until the disk takes it): what the call would have answered (the exec's result, the started process).",
	"SandboxPolicy.restrictions":     "How many paths the policy hides or makes read-only in the sandbox.",
	"SandboxPolicy.unenforced":       "What only the daemon's decisions enforce (not the kernel), one line each.",
	"SandboxPolicy.created":          "Host entries created so they could be protected (the empty directory of a submodule that had none).",
	"SandboxPolicy.files":            "The policy files loaded at the create, with their layer.",
	"Approval.op":                    "The operation that waits: process.exec, process.start, file.read, ...",
	"Approval.actor":                 "Who made the call.",
	"Approval.request":               "The request written like a rule: Exec(git push origin), Write(/srv/project/.env).",
	"Approval.rule":                  "The ask rule that holds the call.",
	"Approval.source":                "Where the rule is written (layer, file and line).",
	"Approval.reason":                "The policy's sentence: why the call needs approval.",
	"Approval.expires_at":            "When a pending approval is denied for want of an answer (--approval-timeout after its creation).",
	"Approval.answered_by":           "The approver's token id (or stdio); system for an expired or withdrawn approval.",
	"Approval.scope":                 "Of an allow: once (this call), or always (later identical requests of the sandbox are allowed without asking, for the sandbox's life).",
	"Approval.comment":               "The approver's reason, given with the answer; a denial tells it to the agent.",
	"ListApprovals.state":            "Keep approvals in this state; absent: pending; all: every state (answered ones are kept a while: the newest 1000 per tenant).",
	"ListApprovals.sandbox":          "Keep only the approvals of this sandbox.",
	"ListApprovals.follow":           "Answer with an NDJSON stream of approval events: the matching approvals now, then every approval of the tenant (and sandbox, if given) created or answered from then on, whatever the state filter.",
	"AnswerApproval.decision":        "allow or deny.",
	"AnswerApproval.scope":           "Of an allow: once (default) or always.",
	"AnswerApproval.reason":          "Why; a denial tells it to the agent.",
	"CreateWorkflow.document":        "The workflow document: name, defaults and a list of steps and groups (see docs/API.md, Workflows). An invalid one is 400 invalid_argument, its message a line per problem (line N: field: why).",
	"CreateWorkflow.name":            "Overrides the document's name in listings.",
	"CreateWorkflow.labels":          "Kept with the run and given to every step's sandbox (with moat.workflow.run, moat.workflow.step and moat.workflow.attempt). At most 64; keys 1 to 128 bytes, values at most 1024.",
	"ListWorkflows.state":            "Keep only runs in this state.",
	"ListWorkflows.limit":            "At most this many runs, newest first (default 100, at most 1000).",
	"ResumeWorkflow.from":            "The step to run again, with every step after it; empty runs again every step that did not succeed.",
	"AddWorkflowStep.group":          "A concurrent group of the run that has not ended.",
	"AddWorkflowStep.step":           "The step as in a document: a JSON object, or YAML text as a JSON string.",
	"WorkflowEvents.after":           "Resume after the event with this sequence number.",
	"WorkflowEvents.follow":          "Keep the stream open until the run ends; otherwise answer with the events journalled now.",
	"WorkflowRun.error":              "Why a failed or cancelled run ended.",
	"WorkflowRun.resumes":            "How many times workflow.resume or a daemon restart took the run up again.",
	"WorkflowStep.kind":              "run (an argv, or sh: a /bin/sh -c script).",
	"WorkflowStep.attempt":           "The latest attempt's number (1 on the first); 0 before the first.",
	"WorkflowStep.snapshot":          "The snapshot kept after the step succeeded (none: empty). A light one is deleted when the run succeeds; a full one stays, a snapshot of the tenant.",
	"WorkflowStep.result":            "The latest attempt's result; stdout and stderr keep at most 64 KiB each.",
	"WorkflowStep.needs":             "The steps it waits for, resolved (groups and the order of sequential groups included).",
	"WorkflowStep.inputs":            "Step id to the path inside this step's sandbox where that step's outputs appear, read-only.",
	"WorkflowAttempt.start_snapshot": "The snapshot the attempt's sandbox started from; empty for a fresh sandbox of its template.",
	"WorkflowAttempt.state":          "interrupted: the daemon stopped while it ran; the step ran again after the restart.",
	"WorkflowArtifact.path":          "The file's path inside the step's sandbox (for a step that takes the outputs as inputs at /in: /in followed by this path).",
	"WorkflowEvent.message":          "What happened, in words: an error, a retry's reason and delay.",
	"WorkflowEvent.artifacts":        "The outputs collected (step.artifacts).",
	"Event.workflow":                 "The run's event (type workflow, workflow.events).",
	"CreateBuild.template":           "The toolchain: a template of the daemon; host (the default) is the host's /usr.",
	"CreateBuild.command":            "The build command's argv, run in /src.",
	"CreateBuild.outputs":            "Paths relative to /src (clean, no ..), files or directories, collected as artifacts when the command exits 0.",
	"CreateBuild.env":                "KEY=VALUE pairs: with moat's standard variables (PATH, HOME, TMPDIR, XDG_CACHE_HOME, LANG, SOURCE_DATE_EPOCH) the whole environment. PATH, LANG and SOURCE_DATE_EPOCH may be overridden; HOME, TMPDIR and XDG_CACHE_HOME may not (400).",
	"CreateBuild.timeout_ms":         "Bounds the command (default 10 min, at most the operator's cap, 1 h by default); past it the whole tree is killed (status timeout).",
	"CreateBuild.net":                "none (the default: loopback only) or proxy (the egress proxy, allow_domains only).",
	"CreateBuild.max_files":          "The source's entries (files, directories, symlinks): default the operator's (50000); only lower.",
	"CreateBuild.max_file_bytes":     "One file of the source: default the operator's (64 MiB); only lower.",
	"CreateBuild.max_total_bytes":    "The source's files added up: default the operator's (512 MiB); only lower.",
	"CreateBuild.labels":             "Kept with the build and given to its sandbox. Over HTTP as a query parameter: one JSON object.",
	"CreateBuild.detach":             "Answer as soon as the build is accepted (status running); build.get with wait=true waits for its end.",
	"CreateBuild.content":            "The source tar over JSON-RPC (base64); over HTTP the body, never a query parameter.",
	"Build.status":                   "running, then succeeded, refused (nothing ran), failed or timeout.",
	"Build.reason":                   "Why a build was refused or failed: a source_* code (refused), policy_denied, timeout, oom, compile_failed, output_missing, output_too_large, interrupted or setup_failed.",
	"Build.source_digest":            "sha256:<hex> of the normalized source tree: the same tree gives the same digest however it was packed.",
	"Build.env":                      "The names of the variables the command had; values are not kept.",
	"Build.source_date_epoch":        "SOURCE_DATE_EPOCH as the command saw it, and the mtime of every file of the normalized source (default 315532800, 1980-01-01).",
	"Build.exit_code":                "The command's exit code once it ran; absent if it never started.",
	"Build.skipped":                  "What the outputs held that is not collected (symlinks, special files; never followed), first 100.",
	"Build.duration_ms":              "Source check to last artifact.",
	"Build.sandbox":                  "The sandbox the command ran in (deleted after the build).",
	"BuildSource.files":              "Entries: files, directories, symlinks.",
	"BuildSource.bytes":              "The regular files' sizes added up.",
	"BuildSource.stripped":           "Files whose setuid/setgid bits were removed.",
	"Toolchain.digest":               "The template's layer digest; empty for the host template.",
	"BuildArtifact.path":             "Relative to /src.",
	"BuildArtifact.sha256":           "Hex; the artifact's name for build.artifact.",
	"BuildArtifact.mode":             "Permission bits.",
	"BuildLog.tail":                  "Empty when head holds it all.",
	"BuildLog.bytes":                 "Everything the command wrote.",
	"BuildLog.kept":                  "What build.log can give: at most the log cap (64 MiB by default).",
	"BuildLog.truncated":             "The command wrote more than the log cap.",
	"BuildRef.wait":                  "build.get: answer at the build's end.",
	"ListBuilds.status":              "Keep only builds of this status.",
	"ListBuilds.limit":               "At most this many builds, newest first.",
	"BuildLogRequest.offset":         "The byte of the log to start from.",
	"BuildLogRequest.follow":         "Keep the stream open until the build ends.",
}

// queryDocs describe query parameters that differ by operation, by
// "operation.field".
var queryDocs = map[string]string{
	"file.upload.path":    "The directory to extract under; it must exist.",
	"file.download.path":  "The file or tree to archive.",
	"file.write.path":     "The file to replace (atomically).",
	"file.upload.mode":    "Accepted and ignored: the modes come from the archive.",
	"build.create.labels": "One JSON object of strings: labels={\"team\":\"infra\"}.",
}

// opDocs describe operations beyond their summary.
var opDocs = map[string]string{
	api.OpSandboxCreate: "Another tenant never sees the sandbox: its id is 404 for them.",
	api.OpSandboxGet:    "A stopped sandbox is still described (from the store) for a day after it ended.",
	api.OpSandboxDelete: "Answers with the sandbox, stopped, end_reason deleted.",
	api.OpExec: "One exec at a time per sandbox unless concurrent is true (else 409 busy). The request lasts as long as the process. " +
		"A process that could not be started still answers 200 with exit_code 125 and exit_reason setup_error; one still running when its sandbox reaches its maximum age answers 200 with exit_code 124 and exit_reason sandbox_timeout (the sandbox has ended). " +
		"With stream=true, output arrives as stdout/stderr events and the last event is exit (with the result) or error.",
	api.OpStart:     "stdin and stdin_base64 are refused: write to the process with process.stdin. The process's output is kept for process.output.",
	api.OpOutput:    "Events are stdout/stderr (text, or data in base64), lost (output before it was dropped: the buffer is bounded), then exit once the process has ended. An error after the stream began arrives as an error event.",
	api.OpStdin:     "At most 1 MiB may wait unread by the process (else 409 busy). After eof, more data is 409 conflict.",
	api.OpWait:      "Answers with the process, exited, or still running when timeout_ms passed or the sandbox ended.",
	api.OpFileRead:  "Over JSON-RPC the result is a FileContent with the content in base64.",
	api.OpFileWrite: "The file is replaced atomically (temporary file, fsync, rename). Over JSON-RPC the params are a WriteFile with the content in base64.",
	api.OpFileUpload: "Absolute names, \"..\", links leaving the directory, devices and FIFOs are refused (file_error EBADTAR); setuid, setgid and sticky bits are dropped. " +
		"Over JSON-RPC the params are a WriteFile with the tar stream in content, base64.",
	api.OpFileDownload: "Over JSON-RPC the result is a FileContent with the tar stream in content, base64.",
	api.OpAuditQuery:   "Only the caller's tenant's events.",
	api.OpTemplateList: "The host template (the host's system directories, read-only) is always listed first. Templates are imported with `moat template import` on the daemon's host.",
	api.OpSnapshotCreate: "The sandbox is paused (cgroup freezer) while what changed in its root since its last snapshot is copied: the snapshot is layered on that one, or on the snapshot or template the sandbox started from. " +
		"Process state is not captured (see processes). A sandbox whose workspace is a host directory, or with a writable bind, is 400: a snapshot would miss those files. 501 where the host has no freezer or the server no template store. " +
		"Sparse files keep their holes. 413 over the capture caps (8 GiB of files, apparent size; 1,000,000 entries); 507 insufficient_storage when the tenant's snapshots would pass their store quota (nothing is kept).",
	api.OpSandboxRestore: "The sandbox keeps its id, policy, limits and network; its filesystem becomes the snapshot's and every process of it ends (their records go). The snapshot may be of another template.",
	api.OpSandboxNetwork: "The body replaces the sandbox's whole network (mode, allow_domains, deny_domains); an empty mode keeps the current one. " +
		"none -> proxy creates the egress proxy's listener (127.0.0.1:3128) inside the running sandbox's network namespace; proxy -> none closes it and every proxied connection. " +
		"open can be neither entered nor left after the create: 409 conflict. " +
		"An IP or CIDR entry in allow_domains outside the managed policy's allow_cidr_entries is 403 policy_denied. " +
		"Entries a deny rule of any policy layer covers are answered in dropped, with the rule, and stay refused. " +
		"The new policy decides the next connection and request as soon as the answer is sent; a change that narrows it closes the proxied connections open under the old one. " +
		"Audited as sandbox.network with the previous and the new network.",
	api.OpSnapshotList:   "Only the caller's tenant's snapshots, oldest first, with what they cost in the store together (store_bytes) and the tenant's quota (store_quota).",
	api.OpSnapshotGet:    "Another tenant's snapshot is 404.",
	api.OpSnapshotDelete: "409 conflict while a snapshot is layered on it or a live sandbox (a fork, a restored sandbox) uses it.",
	api.OpSnapshotFork:   "All or nothing: if one create fails, the others are deleted and the error is answered. Each create is audited as sandbox.create.",
	api.OpApprovalList:   "Any token of the tenant may list and follow its approvals. Over JSON-RPC, follow=true sends the events as process.event notifications until the request is cancelled ($/cancelRequest).",
	api.OpApprovalGet:    "Another tenant's approval is 404.",
	api.OpApprovalAnswer: "Only approver tokens (role approver in <data>/tokens) and the stdio peer may answer; another token is 403 permission_denied, so an agent cannot approve its own calls. " +
		"An approval that is no longer pending is 409 conflict. The waiting call then runs (allow) or fails with 403 policy_denied (deny).",
	api.OpWorkflowCreate: "The document is checked whole before anything runs: unknown fields, cycles, missing ids, a from that is not an ancestor, impossible budgets are 400 invalid_argument with a line per problem. " +
		"Every step's sandbox, process, snapshot and collected output is a call of the caller's tenant (sandbox.create, process.exec, snapshot.create, file.download, audited under the caller's actor and counted in its quotas); " +
		"the end of each step and of the run are audited as workflow.step and workflow.run. Another tenant never sees the run: its id is 404 for them.",
	api.OpWorkflowList:   "Only the caller's tenant's runs.",
	api.OpWorkflowGet:    "Another tenant's run is 404.",
	api.OpWorkflowEvents: "Events are Event objects of type workflow, their workflow field the run's event. With follow=true the stream ends when the run ends. Over JSON-RPC the events are process.event notifications and the result is the run as it is at the end.",
	api.OpWorkflowCancel: "Answers once the run has ended cancelled. A run that has ended is 409 conflict.",
	api.OpWorkflowResume: "Only a failed or cancelled run: the steps that succeeded before from keep their results, snapshots and outputs and are not run again; the others run again (their attempts numbered on). Another state is 409 conflict.",
	api.OpBuildCreate: "The body is the source package, a tar (plain or gzip), streamed: the settings come as query parameters, or the body is multipart/form-data with a JSON part settings then a part source. " +
		"Before anything runs the source is checked entry by entry and normalized (owners 1000:1000, mtimes SOURCE_DATE_EPOCH, setuid/setgid stripped) into the build's private layer at /src; a source refused is a build of status refused with a source_* reason, not an error. " +
		"The command runs in /src of a sandbox of the template, HOME, TMPDIR and XDG_CACHE_HOME under /build, no network unless net=proxy. Answers 201 with the ended build, or at once with detach=true (status running). " +
		"The sandbox's calls are judged by the policy and audited as the caller's; the build is audited once at its end (kind build).",
	api.OpBuildList:     "Only the caller's tenant's builds, kept until build.delete or the retention (7 days by default).",
	api.OpBuildGet:      "Another tenant's build is 404. With wait=true the request lasts until the build's end.",
	api.OpBuildLog:      "Events carry the log's bytes (text, or data in base64) as stdout events from offset; with follow=true the stream ends when the build ends. Over JSON-RPC the events are process.event notifications and the result is the build as it is at the end.",
	api.OpBuildArtifact: "application/octet-stream, the ETag the digest. A digest the build has no artifact of is 404. Over JSON-RPC the result is a FileContent with the bytes in content, base64 (at most the server's max file bytes).",
	api.OpBuildDelete:   "Answers with the build as it was last; its log and artifacts are removed.",
	api.OpAgentCreate: "The document is compiled whole first: an invalid one is 400 invalid_argument with a line per problem. It names no model providers: the daemon's own serve it (its --models file), and a providers section is 400 unless it is the daemon's own. " +
		"A daemon without providers answers 501 unimplemented; a tenant with [agent] max_runs runs unfinished 429. Every tool call is a call of the caller's tenant (sandbox.create, process.exec, file.write…, judged by the sandbox's policy, audited under the caller's actor); each model call is audited as model.call and the run's end as agent.run.",
	api.OpAgentList:   "Only the caller's tenant's runs.",
	api.OpAgentGet:    "Another tenant's run is 404.",
	api.OpAgentEvents: "Events are Event objects of type agent, their agent field the run's event. With follow=true the stream ends when the run ends. Over JSON-RPC the events are process.event notifications and the result is the run as it is at the end.",
	api.OpAgentCancel: "Stops the run's model and tool calls and deletes its sandboxes; answers the run, cancelled. A run that has ended is 409 conflict.",
	api.OpAgentResume: "An ended or interrupted run goes on with its conversations: with task as a new message to its agent, or without, from where it stopped. A running run is 409 conflict.",
	api.OpWorkflowAdd: "The step joins the group's priority queue. An invalid step, or a group that is not concurrent, is 400 (with the step's lines); a group the run does not have 404; a group that has ended, or a run that is not running, 409.",
}

const infoDescription = `The HTTP API of ` + "`moat serve`" + `: long-lived Linux sandboxes, their processes and files, for many tenants.
The human reference is docs/API.md.

**Authentication.** Every /v1 operation needs ` + "`Authorization: Bearer <token>`" + `. Tokens are listed in ` + "`<data>/tokens`" + `, one "TENANT TOKEN" per line, and reloaded on SIGHUP; the token decides the tenant. A tenant sees only its own sandboxes: another tenant's sandbox is 404. /healthz, /readyz and /metrics need no token.

**Binding.** Path parameters and the query string fill the request's fields of the same json names; a JSON body (at most 1 MiB, Content-Type application/json) fills the rest. Unknown body fields and unknown query parameters are refused with 400. Raw bodies (file.write, file.upload) are capped by the server's max file bytes (64 MiB by default); build.create's by 2 × the build's max_total_bytes + 64 MiB. Requests are limited to 5 minutes, except process.exec, process.wait, process.output, workflow.events, agent.events, build.create, build.get and build.log.

**Roles.** A token line may end with a role: "TENANT TOKEN approver". Only approver tokens may answer approvals (approvals.answer); the daemon writes one for tenant default to ` + "`<data>/approver-token`" + ` on first start. Give agents the other tokens.

**Policy.** Every process.exec and process.start, and every file operation on a path the sandbox sees from the host (its workspace, binds, system directories), is judged by the sandbox's policy (the daemon's policy files, re-read when they change, then the sandbox's and the call's own rules). A denial is 403 policy_denied with the rule's reason; an ask holds the call until an approver answers it (approvals), or it expires (denied).

**Errors.** Every error is an Error object (code, message, errno for file_error; rule, source, approval for policy_denied) with the HTTP status of its code. An error after a stream has begun arrives as its last event (type error).

**JSON-RPC 2.0 over stdio** (` + "`moat serve --stdio`" + `): one JSON value per line in each direction, no token (the caller is the local user). The method is the operationId (x-jsonrpc.method), the params are the request body with the path fields included (x-jsonrpc.params: e.g. {"sandbox": "…", "process": 3}), and the result is the answer (x-jsonrpc.result). Raw bodies travel base64-encoded in a "content" field: file.write and file.upload take a WriteFile, build.create a CreateBuild, file.read, file.download and build.artifact return a FileContent. Stream events (process.exec with stream=true, process.output, workflow.events, agent.events, build.log) arrive before the response as notifications {"jsonrpc": "2.0", "method": "process.event", "params": {"id": <request id>, "event": Event}}. A failed call is a JSON-RPC error with code -32602 for invalid_argument, -32603 for internal and -32000 for every other error, its data the Error object; -32700 (not JSON), -32600 (JSON that is not a Request object, answered with its id when the id can be read), -32601 and -32602 keep their standard meanings. Requests run concurrently and may be answered out of order; batches are accepted. The notification {"jsonrpc": "2.0", "method": "` + api.RPCCancel + `", "params": {"id": <request id>}} cancels a request in flight (a cancelled process.exec kills its process).`

// buildRequestBody is the body of build.create: a tar (the settings in
// the query string), or multipart/form-data with a JSON part settings
// (reqName without content) and a part source (the tar).
func buildRequestBody(reqName string) object {
	content := object{}
	for _, mt := range buildSourceTypes {
		content.set(mt, object{{"schema", binary(mt)}})
	}
	content.set("multipart/form-data", object{
		{"schema", object{
			{"type", "object"},
			{"properties", object{
				{"settings", object{{"description", "The settings: a " + reqName + " without content (unknown fields refused). The first part."}, {"allOf", []object{ref(reqName)}}}},
				{"source", object{{"description", "The source package: a tar, plain or gzip. The second and last part."}, {"type", "string"}, {"format", "binary"}}},
			}},
			{"required", []string{"settings", "source"}},
		}},
		{"encoding", object{
			{"settings", object{{"contentType", "application/json"}}},
			{"source", object{{"contentType", strings.Join(buildSourceTypes, ", ")}}},
		}},
	})
	return object{
		{"description", "The source package, a tar (plain or gzip, detected by its magic) streamed as the body, the settings in the query string; " +
			"or multipart/form-data: a part settings (JSON) then a part source (the tar), nothing else (400). " +
			"The body is at most 2 × the build's max_total_bytes + 64 MiB (413 too_large); the source is checked against the build's caps as it is unpacked (a refused build, not an error)."},
		{"required", true},
		{"content", content},
	}
}
