package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"runtime/debug"
	"sync"

	"github.com/moat-sandbox/moat/api"
)

// rpcMessage is a notification the server sends (process.event).
type rpcMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params,omitempty"`
}

// rpcResponse is a JSON-RPC 2.0 Response object: always an id (null when
// the request's could not be read), and either result (null included) or
// error, never both.
type rpcResponse struct {
	ID     json.RawMessage
	Result any
	Error  *rpcError
}

func (r rpcResponse) MarshalJSON() ([]byte, error) {
	id := r.ID
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	if r.Error != nil {
		return json.Marshal(struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Error   *rpcError       `json:"error"`
		}{"2.0", id, r.Error})
	}
	return json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  any             `json:"result"`
	}{"2.0", id, r.Result})
}

type rpcError struct {
	Code    int        `json:"code"`
	Message string     `json:"message"`
	Data    *api.Error `json:"data,omitempty"`
}

// eventParams are the params of a process.event notification.
type eventParams struct {
	ID    json.RawMessage `json:"id"`
	Event api.Event       `json:"event"`
}

// ServeRPC answers JSON-RPC 2.0 requests read from r, one JSON value per
// line, writing responses and notifications to w, for caller c. Requests
// run concurrently and may be answered out of order. It returns when r
// ends (the calls still running are cancelled and waited for) or ctx is
// done.
func (s *Service) ServeRPC(ctx context.Context, r io.Reader, w io.Writer, c Caller) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := &rpcWriter{w: w, inflight: map[string]context.CancelFunc{}, eof: make(chan struct{})}
	var wg sync.WaitGroup
	defer wg.Wait()
	// The calls still running when the input ends are waited for (a
	// piped batch runs to its end), except follow streams, which never
	// end on their own: they end with the input.
	defer close(out.eof)
	// A line holds at most a file's content, base64-encoded, plus the
	// envelope.
	maxLine := int(s.cfg.MaxFileBytes/3*4) + MaxJSONBody
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, tooLong, err := readLine(br, maxLine)
		if len(bytes.TrimSpace(line)) > 0 || tooLong {
			if tooLong {
				out.send(rpcResponse{Error: &rpcError{Code: api.RPCInvalidRequest,
					Message: "request line too long", Data: api.Errorf(api.CodeTooLarge, "a request line is at most %d bytes", maxLine)}})
			} else {
				wg.Add(1)
				go func(line []byte) {
					defer wg.Done()
					s.rpcLine(ctx, line, out, c)
				}(line)
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// readLine reads one line; a line longer than max is consumed and
// reported as tooLong.
func readLine(br *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > max {
			tooLong = true
			line = nil
		} else if !tooLong {
			line = append(line, chunk...)
		}
		if err != bufio.ErrBufferFull {
			return line, tooLong, err
		}
	}
}

// rpcLine answers one line: a request, a notification or a batch.
func (s *Service) rpcLine(ctx context.Context, line []byte, out *rpcWriter, c Caller) {
	trimmed := bytes.TrimSpace(line)
	if !json.Valid(trimmed) {
		// Not JSON at all (a batch with one broken element included):
		// one parse error, id null.
		out.send(parseErrorResponse(trimmed))
		return
	}
	if trimmed[0] == '[' {
		var batch []json.RawMessage
		if err := json.Unmarshal(trimmed, &batch); err != nil || len(batch) == 0 {
			// An empty array is one Invalid Request, not an array.
			out.send(invalidRequest(nil, "an empty batch"))
			return
		}
		resps := make([]*rpcResponse, len(batch))
		var wg sync.WaitGroup
		for i, raw := range batch {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resps[i] = s.rpcRequest(ctx, raw, out, c)
			}()
		}
		wg.Wait()
		var list []*rpcResponse
		for _, r := range resps {
			if r != nil {
				list = append(list, r)
			}
		}
		// Only notifications: nothing at all, never an empty array.
		if len(list) > 0 {
			out.sendRaw(list)
		}
		for _, r := range list {
			releaseAnswer(r.Result)
		}
		return
	}
	if resp := s.rpcRequest(ctx, trimmed, out, c); resp != nil {
		out.send(*resp)
		releaseAnswer(resp.Result)
	}
}

// parseErrorResponse answers what is not JSON: -32700, id null.
func parseErrorResponse(line []byte) rpcResponse {
	msg := "parse error"
	var v any
	if err := json.Unmarshal(line, &v); err != nil {
		msg += ": " + err.Error()
	}
	return rpcResponse{Error: &rpcError{Code: api.RPCParseError, Message: msg,
		Data: api.Errorf(api.CodeInvalidArgument, "%s", msg)}}
}

// invalidRequest answers JSON that is not a valid Request object: -32600
// with the request's id when it could be read, else null.
func invalidRequest(id json.RawMessage, format string, args ...any) rpcResponse {
	e := api.Errorf(api.CodeInvalidArgument, "invalid request: "+format, args...)
	return rpcResponse{ID: id, Error: &rpcError{Code: api.RPCInvalidRequest, Message: e.Message, Data: e}}
}

// rpcRequestObject is a Request object, checked member by member (names
// are case-sensitive, types exact).
type rpcRequestObject struct {
	id           json.RawMessage // as sent; nil when absent or unreadable
	notification bool            // no id member at all
	method       string
	params       json.RawMessage // an object or an array; nil when absent
}

// parseRequest reads one JSON value (already known to be valid JSON) as
// a Request object. A value that is not one is answered -32600, with
// its id if the id could be read.
func parseRequest(raw []byte) (rpcRequestObject, *rpcResponse) {
	var req rpcRequestObject
	raw = bytes.TrimSpace(raw)
	var members map[string]json.RawMessage
	if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &members) != nil {
		r := invalidRequest(nil, "not a JSON object")
		return req, &r
	}
	idRaw, hasID := members["id"]
	req.notification = !hasID
	if hasID {
		idRaw = bytes.TrimSpace(idRaw)
		if !validID(idRaw) {
			r := invalidRequest(nil, "id must be a string, a number or null")
			return req, &r
		}
		req.id = idRaw
	}
	fail := func(format string, args ...any) (rpcRequestObject, *rpcResponse) {
		r := invalidRequest(req.id, format, args...)
		return req, &r
	}
	var version string
	if v, ok := members["jsonrpc"]; !ok || json.Unmarshal(v, &version) != nil || version != "2.0" {
		return fail(`jsonrpc must be exactly "2.0"`)
	}
	m, ok := members["method"]
	if !ok || json.Unmarshal(m, &req.method) != nil || bytes.TrimSpace(m)[0] != '"' {
		return fail("method must be a string")
	}
	if p, ok := members["params"]; ok {
		p = bytes.TrimSpace(p)
		if p[0] != '{' && p[0] != '[' {
			return fail("params must be an object or an array when present")
		}
		req.params = p
	}
	return req, nil
}

// rpcRequest runs one request and returns its response (nil for a
// notification).
func (s *Service) rpcRequest(ctx context.Context, raw []byte, out *rpcWriter, c Caller) (resp *rpcResponse) {
	req, bad := parseRequest(raw)
	if bad != nil {
		return bad
	}
	id, notification := req.id, req.notification
	fail := func(code int, e *api.Error) *rpcResponse {
		if notification {
			return nil
		}
		return &rpcResponse{ID: id, Error: &rpcError{Code: code, Message: e.Message, Data: e}}
	}
	defer func() {
		// A fault of moat is an Internal error, never the end of the
		// daemon.
		if v := recover(); v != nil {
			s.log.Error("panic in JSON-RPC call", "method", req.method, "panic", v, "stack", string(debug.Stack()))
			resp = fail(api.RPCInternalError, api.Errorf(api.CodeInternal, "internal error"))
		}
	}()
	if req.method == api.RPCCancel {
		if notification {
			out.cancel(req.params)
			return nil
		}
		return fail(api.RPCMethodNotFound, api.Errorf(api.CodeInvalidArgument, "%s is a notification: send it without an id", api.RPCCancel))
	}
	op, ok := api.Lookup(req.method)
	if !ok {
		return fail(api.RPCMethodNotFound, api.Errorf(api.CodeNotFound, "no method %q", req.method))
	}
	params := req.params
	switch {
	case params == nil:
		params = json.RawMessage("{}")
	case params[0] == '[':
		return fail(api.RPCInvalidParams, api.Errorf(api.CodeInvalidArgument, "params: %s takes named parameters (an object), not an array", req.method))
	}
	in := &input{decode: func(v any) error {
		dec := json.NewDecoder(bytes.NewReader(params))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			return api.Errorf(api.CodeInvalidArgument, "params: %v", err)
		}
		return nil
	}}
	var buf bytes.Buffer
	if op.Out == api.BodyRaw {
		in.out = &buf
		if op.Name == api.OpBuildArtifact {
			// The artifact travels base64 in one line: at most what a
			// file.read may carry.
			in.out = &cappedWriter{w: &buf, max: s.cfg.MaxFileBytes, what: "an artifact over JSON-RPC"}
		}
	}
	if op.Name == api.OpApprovalList || op.Name == api.OpWorkflowEvents || op.Name == api.OpBuildLog || op.Name == api.OpAgentEvents {
		// A follow ends with the input, as the daemon does (a run may
		// last for hours).
		fctx, stop := context.WithCancel(ctx)
		ctx = fctx // the goroutine reads fctx: ctx is reassigned below
		defer stop()
		go func() {
			select {
			case <-out.eof:
				stop()
			case <-fctx.Done():
			}
		}()
	}
	if !notification {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		defer out.track(id, cancel)()
		in.emit = func(ev api.Event) error {
			out.send(rpcMessage{JSONRPC: "2.0", Method: api.NotifyEvent, Params: mustJSON(eventParams{ID: id, Event: ev})})
			return nil
		}
	}
	result, err := s.call(ctx, c, op.Name, in)
	if err != nil {
		e := api.AsError(err)
		code := api.RPCServerError
		switch e.Code {
		case api.CodeInvalidArgument:
			code = api.RPCInvalidParams
		case api.CodeInternal:
			code = api.RPCInternalError
		}
		return fail(code, e)
	}
	if notification {
		releaseAnswer(result)
		return nil
	}
	if fc, ok := result.(*api.FileContent); ok && op.Out == api.BodyRaw {
		fc.Content = buf.Bytes()
		if fc.Content == nil {
			fc.Content = []byte{}
		}
	}
	return &rpcResponse{ID: id, Result: result}
}

// validID accepts the ids JSON-RPC allows: a string, a number or null.
func validID(id json.RawMessage) bool {
	if len(id) == 0 {
		return true
	}
	var v any
	if json.Unmarshal(id, &v) != nil {
		return false
	}
	switch v.(type) {
	case string, float64, nil:
		return true
	}
	return false
}

// rpcWriter serialises messages, one per line, and keeps the cancel
// functions of the requests in flight by id.
type rpcWriter struct {
	mu sync.Mutex
	w  io.Writer

	imu      sync.Mutex
	inflight map[string]context.CancelFunc

	eof chan struct{} // closed when the input has ended
}

// track registers a request's cancel function; the returned func
// unregisters it.
func (o *rpcWriter) track(id json.RawMessage, cancel context.CancelFunc) func() {
	key := string(bytes.TrimSpace(id))
	o.imu.Lock()
	o.inflight[key] = cancel
	o.imu.Unlock()
	return func() {
		o.imu.Lock()
		delete(o.inflight, key)
		o.imu.Unlock()
	}
}

// cancel cancels the request in flight with id, if any.
func (o *rpcWriter) cancel(params json.RawMessage) {
	var p struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(params, &p) != nil {
		return
	}
	o.imu.Lock()
	c := o.inflight[string(bytes.TrimSpace(p.ID))]
	o.imu.Unlock()
	if c != nil {
		c()
	}
}

// send writes one message: an rpcResponse or an rpcMessage.
func (o *rpcWriter) send(m any) { o.sendRaw(m) }

func (o *rpcWriter) sendRaw(v any) {
	if r, ok := v.(rpcResponse); ok && r.Error == nil {
		if a, ok := r.Result.(answerStreamer); ok {
			// Written as it is encoded: the envelope MarshalJSON
			// writes, around the answer.
			id := r.ID
			if len(id) == 0 {
				id = json.RawMessage("null")
			}
			idb, err := json.Marshal(id) // as MarshalJSON has it
			if err != nil {
				idb = []byte("null")
			}
			o.mu.Lock()
			defer o.mu.Unlock()
			_, _ = io.WriteString(o.w, `{"jsonrpc":"2.0","id":`)
			_, _ = o.w.Write(idb)
			_, _ = io.WriteString(o.w, `,"result":`)
			// An error is the output's: the line is cut short, and the
			// reader learns of it as a broken line.
			_ = a.encodeJSON(o.w)
			_, _ = io.WriteString(o.w, "}\n")
			return
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		var id json.RawMessage
		if r, ok := v.(rpcResponse); ok {
			id = r.ID
		}
		b, _ = json.Marshal(rpcResponse{ID: id,
			Error: &rpcError{Code: api.RPCInternalError, Message: err.Error(), Data: api.Errorf(api.CodeInternal, "%v", err)}})
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	_, _ = o.w.Write(append(b, '\n'))
}

// cappedWriter passes at most max bytes to w; a write past them fails
// with too_large (what names the content).
type cappedWriter struct {
	w    io.Writer
	max  int64
	n    int64
	what string
}

func (c *cappedWriter) Write(p []byte) (int, error) {
	if c.n+int64(len(p)) > c.max {
		return 0, api.Errorf(api.CodeTooLarge, "%s is at most %d bytes (the daemon's max file bytes); download it over HTTP", c.what, c.max)
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
