package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"os"
	"reflect"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/api"
)

// RequestTimeout is the default of Config.RequestTimeout: it bounds every
// HTTP request except the ones that follow a process (exec, wait, output),
// which are bounded by the sandbox's life; the bodies of all of them must
// arrive within it.
const RequestTimeout = 5 * time.Minute

// Defaults of Config.BodyTimeout and Config.BodyChunk: a request body must
// arrive at 1 MiB per 10 s at least (a smaller body whole within 10 s).
const (
	DefaultBodyTimeout = 10 * time.Second
	DefaultBodyChunk   = 1 << 20
)

// longOps may last as long as a sandbox (or a workflow run) does.
var longOps = map[string]bool{api.OpExec: true, api.OpWait: true, api.OpOutput: true, api.OpApprovalList: true, api.OpWorkflowEvents: true,
	api.OpBuildCreate: true, api.OpBuildGet: true, api.OpBuildLog: true, api.OpAgentEvents: true}

// Handler is the HTTP API: /v1 (bearer token required), /healthz,
// /readyz and /metrics.
func (s *Service) Handler(tokens *Tokens) http.Handler {
	mux := http.NewServeMux()
	byPath := map[string][]api.Op{}
	var paths []string
	for _, op := range api.Ops {
		if byPath[op.Path] == nil {
			paths = append(paths, op.Path)
		}
		byPath[op.Path] = append(byPath[op.Path], op)
	}
	for _, p := range paths {
		ops := byPath[p]
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			for _, op := range ops {
				if op.Method == r.Method {
					s.serveOp(w, r, op, tokens)
					return
				}
			}
			allow := make([]string, len(ops))
			for i, op := range ops {
				allow[i] = op.Method
			}
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeError(w, api.Errorf(api.CodeMethodNotAllowed, "%s is not allowed on %s", r.Method, p))
		})
	}
	getOnly := func(path string, h http.HandlerFunc) {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				w.Header().Set("Allow", "GET")
				writeError(w, api.Errorf(api.CodeMethodNotAllowed, "%s is not allowed on %s", r.Method, path))
				return
			}
			h(w, r)
		})
	}
	getOnly("/healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, api.Health{Status: "ok"})
	})
	getOnly("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := s.Ready(); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, api.Health{Status: "unavailable", Reason: err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, api.Health{Status: "ok"})
	})
	getOnly("/metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		s.metrics.write(w)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, api.Errorf(api.CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
	})
	return recoverJSON(s, mux)
}

// recoverJSON answers a panic with a JSON 500 instead of a dropped
// connection, and logs it.
func recoverJSON(s *Service, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("panic in handler", "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
				writeError(w, api.Errorf(api.CodeInternal, "internal error"))
			}
		}()
		h.ServeHTTP(w, r)
	})
}

// bearer extracts the token of an Authorization header.
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

func (s *Service) serveOp(w http.ResponseWriter, r *http.Request, op api.Op, tokens *Tokens) {
	if r.Body != nil && r.Body != http.NoBody {
		// A body must keep arriving, whatever the operation and whoever
		// sends it (a slow trickle would otherwise hold a connection):
		// each BodyChunk within BodyTimeout. Once the body is read,
		// net/http clears the deadline for its own watch of the
		// connection, so a long exec is not cut off. A request without a
		// body gets no deadline: that watch would end it.
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout))
		r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc, timeout: s.cfg.BodyTimeout, chunk: s.cfg.BodyChunk}
	}
	c, err := tokens.Authenticate(bearer(r))
	if err != nil {
		// Failures are counted per source and written to the audit
		// together (authLimiter), so a flood of bad tokens neither
		// rotates the audit's history away nor costs an fsync each; a
		// source over its rate is answered 429.
		if ok, retry := s.authFails.fail(r.RemoteAddr, op.Name, time.Now()); !ok {
			s.metrics.denied("token_rate")
			w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(retry.Seconds())))))
			writeError(w, api.Errorf(api.CodeTooMany, "too many failed authentications from this address; retry in %s", retry.Round(time.Second)))
			return
		}
		s.metrics.denied("token")
		w.Header().Set("WWW-Authenticate", `Bearer realm="moat"`)
		writeError(w, api.Errorf(api.CodeUnauthenticated, "%v", err))
		return
	}
	ctx := r.Context()
	if !longOps[op.Name] {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.RequestTimeout)
		defer cancel()
	}
	in, err := s.httpInput(w, r, op)
	if err != nil {
		writeError(w, err)
		return
	}
	var raw *lazyWriter
	if op.Out == api.BodyRaw {
		ct := "application/octet-stream"
		if op.Name == api.OpFileDownload {
			ct = "application/x-tar"
		}
		raw = &lazyWriter{w: w, contentType: ct}
		if op.Name == api.OpBuildArtifact {
			// An artifact is named by its content's digest: it is its
			// entity tag.
			if d := r.PathValue("digest"); isSHA256Hex(d) {
				raw.etag = `"sha256:` + d + `"`
			}
		}
		in.out = raw
	}
	in.long = r.Context()
	st := &ndjson{w: w}
	in.emit = st.emit
	in.open = st.open
	resp, err := s.call(ctx, c, op.Name, in)
	defer releaseAnswer(resp)
	switch {
	case st.started():
		if err != nil {
			st.emit(api.Event{Seq: st.seq + 1, Type: api.EventError, Error: api.AsError(err)})
		}
	case raw != nil && raw.started:
		if err != nil {
			// Part of the body is out: break the connection so the
			// client sees a failed transfer, not a short file.
			panic(http.ErrAbortHandler)
		}
	case err != nil:
		writeError(w, err)
	case op.Out == api.BodyStream:
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
	case raw != nil:
		raw.start()
	default:
		status := http.StatusOK
		if op.Name == api.OpSandboxCreate || op.Name == api.OpStart || op.Name == api.OpWorkflowCreate || op.Name == api.OpBuildCreate || op.Name == api.OpAgentCreate {
			status = http.StatusCreated
		}
		writeJSON(w, status, resp)
	}
}

// httpInput binds a request to the operation's input: path values and the
// query string by json name, a JSON body, or a raw body (build.create's:
// see buildBody).
func (s *Service) httpInput(w http.ResponseWriter, r *http.Request, op api.Op) (*input, error) {
	vals := map[string][]string{}
	for k, v := range r.URL.Query() {
		vals[k] = v
	}
	var body []byte
	switch op.In {
	case api.BodyJSON:
		if r.ContentLength != 0 {
			if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
				return nil, api.Errorf(api.CodeUnsupportedMedia, "the body must be application/json")
			}
			b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxJSONBody))
			if err != nil {
				if isMaxBytesError(err) {
					return nil, api.Errorf(api.CodeTooLarge, "a JSON body is at most %d bytes", MaxJSONBody)
				}
				if ae := (*api.Error)(nil); errors.As(err, &ae) {
					return nil, ae
				}
				return nil, api.Errorf(api.CodeInvalidArgument, "reading the body: %v", err)
			}
			body = b
		}
	case api.BodyNone:
		if r.ContentLength > 0 {
			return nil, api.Errorf(api.CodeInvalidArgument, "%s %s takes no body", op.Method, op.Path)
		}
	}
	in := &input{}
	switch {
	case op.Name == api.OpBuildCreate:
		// The settings part of a multipart body binds as a JSON body.
		settings, err := s.buildBody(w, r, in)
		if err != nil {
			return nil, err
		}
		body = settings
	case op.In == api.BodyRaw:
		in.body = http.MaxBytesReader(w, r.Body, s.cfg.MaxFileBytes)
	}
	pathVals := map[string]string{}
	for _, name := range []string{"sandbox", "process", "snapshot", "id", "run", "digest"} {
		if v := r.PathValue(name); v != "" {
			pathVals[name] = v
		}
	}
	in.decode = func(v any) error {
		if len(body) > 0 {
			dec := json.NewDecoder(strings.NewReader(string(body)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(v); err != nil {
				return api.Errorf(api.CodeInvalidArgument, "body: %v", err)
			}
			if dec.More() {
				return api.Errorf(api.CodeInvalidArgument, "body: more than one JSON value")
			}
		}
		if err := bindValues(v, vals, false); err != nil {
			return err
		}
		pv := map[string][]string{}
		for k, x := range pathVals {
			pv[k] = []string{x}
		}
		return bindValues(v, pv, true)
	}
	return in, nil
}

// bindValues sets the fields of the struct v points to from string values
// keyed by json name. Unknown keys are refused unless lenient.
func bindValues(v any, vals map[string][]string, lenient bool) error {
	if len(vals) == 0 {
		return nil
	}
	rv := reflect.ValueOf(v).Elem()
	rt := rv.Type()
	fields := map[string]int{}
	for i := 0; i < rt.NumField(); i++ {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			fields[name] = i
		}
	}
	for key, list := range vals {
		i, ok := fields[key]
		if !ok {
			if lenient {
				continue
			}
			return api.Errorf(api.CodeInvalidArgument, "unknown parameter %q", key)
		}
		f := rv.Field(i)
		if len(list) == 0 {
			continue
		}
		if err := setField(f, list); err != nil {
			return api.Errorf(api.CodeInvalidArgument, "parameter %q: %v", key, err)
		}
	}
	return nil
}

var timeType = reflect.TypeFor[time.Time]()

func setField(f reflect.Value, list []string) error {
	one := list[len(list)-1]
	switch {
	case f.Type() == timeType:
		t, err := time.Parse(time.RFC3339Nano, one)
		if err != nil {
			return errors.New("want an RFC 3339 time")
		}
		f.Set(reflect.ValueOf(t))
	case f.Kind() == reflect.String:
		f.SetString(one)
	case f.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(one)
		if err != nil {
			return errors.New("want true or false")
		}
		f.SetBool(b)
	case f.Kind() == reflect.Float64:
		n, err := strconv.ParseFloat(one, 64)
		if err != nil || math.IsNaN(n) || math.IsInf(n, 0) {
			return errors.New("want a number")
		}
		f.SetFloat(n)
	case f.Kind() == reflect.Map && f.Type().Key().Kind() == reflect.String && f.Type().Elem().Kind() == reflect.String:
		// A map (labels) travels as one JSON object.
		m := reflect.New(f.Type())
		if err := json.Unmarshal([]byte(one), m.Interface()); err != nil {
			return errors.New(`want a JSON object of strings, e.g. {"team":"infra"}`)
		}
		f.Set(m.Elem())
	case f.Kind() == reflect.Int || f.Kind() == reflect.Int64:
		n, err := strconv.ParseInt(one, 10, 64)
		if err != nil {
			return errors.New("want an integer")
		}
		f.SetInt(n)
	case f.Kind() == reflect.Uint64:
		n, err := strconv.ParseUint(one, 10, 64)
		if err != nil {
			return errors.New("want a non-negative integer")
		}
		f.SetUint(n)
	case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.String:
		f.Set(reflect.ValueOf(append([]string(nil), list...)))
	case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.Uint8:
		b, err := base64.StdEncoding.DecodeString(one)
		if err != nil {
			return errors.New("want base64")
		}
		f.SetBytes(b)
	default:
		return fmt.Errorf("cannot be given in the query string")
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if a, ok := v.(answerStreamer); ok {
		// Written as it is encoded, as json.Encoder would write it.
		if a.encodeJSON(w) == nil {
			_, _ = io.WriteString(w, "\n")
		}
		return
	}
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, err error) {
	e := api.AsError(err)
	writeJSON(w, api.HTTPStatus(e), e)
}

// ndjson writes stream events as JSON lines, flushing each; the headers
// go out with the first event.
type ndjson struct {
	mu  sync.Mutex
	w   http.ResponseWriter
	on  bool
	seq uint64
}

func (n *ndjson) started() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.on
}

// open sends the headers of the stream (once) and flushes them, so that a
// follower that waits for its first event knows the stream is up.
func (n *ndjson) open() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.start()
	_ = http.NewResponseController(n.w).Flush()
}

// start writes the headers once; n.mu must be held.
func (n *ndjson) start() {
	if !n.on {
		n.on = true
		n.w.Header().Set("Content-Type", "application/x-ndjson")
		n.w.Header().Set("X-Content-Type-Options", "nosniff")
		n.w.WriteHeader(http.StatusOK)
	}
}

func (n *ndjson) emit(ev api.Event) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.start()
	n.seq = max(n.seq, ev.Seq)
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	if _, err := n.w.Write(append(b, '\n')); err != nil {
		return err
	}
	return http.NewResponseController(n.w).Flush()
}

// lazyWriter sends a raw answer's headers with its first byte, so that an
// error before it can still be a JSON error.
type lazyWriter struct {
	w           http.ResponseWriter
	contentType string
	etag        string // the ETag header, when the answer has one
	started     bool
}

func (l *lazyWriter) start() {
	if !l.started {
		l.started = true
		l.w.Header().Set("Content-Type", l.contentType)
		if l.etag != "" {
			l.w.Header().Set("ETag", l.etag)
		}
		l.w.WriteHeader(http.StatusOK)
	}
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	l.start()
	return l.w.Write(p)
}

// deadlineBody moves the read deadline of a request's connection on by
// timeout each time chunk more bytes of the body have arrived; a body
// slower than that fails with a timeout error.
type deadlineBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	timeout time.Duration
	chunk   int64
	n       int64 // bytes since the deadline last moved
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	switch {
	case err == nil && b.n >= b.chunk:
		// Not at EOF: there net/http has cleared the deadline for its
		// background read, which a new one would end.
		b.n = 0
		_ = b.rc.SetReadDeadline(time.Now().Add(b.timeout))
	case err != nil && errors.Is(err, os.ErrDeadlineExceeded):
		err = &api.Error{Code: api.CodeTimeout, Message: fmt.Sprintf(
			"the request body arrived too slowly (at least %d bytes, or the rest, every %s)", b.chunk, b.timeout)}
	}
	return n, err
}
