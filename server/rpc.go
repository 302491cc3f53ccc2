package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"

	"github.com/moat-sandbox/moat/api"
)

// rpcMessage is a JSON-RPC 2.0 request, response or notification.
type rpcMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
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
				out.send(rpcMessage{JSONRPC: "2.0", ID: json.RawMessage("null"), Error: &rpcError{Code: api.RPCInvalidRequest,
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
	if len(trimmed) > 0 && trimmed[0] == '[' {
		var batch []json.RawMessage
		if err := json.Unmarshal(trimmed, &batch); err != nil || len(batch) == 0 {
			out.send(parseErrorResponse(err))
			return
		}
		resps := make([]*rpcMessage, len(batch))
		var wg sync.WaitGroup
		for i, raw := range batch {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resps[i] = s.rpcRequest(ctx, raw, out, c)
			}()
		}
		wg.Wait()
		var list []*rpcMessage
		for _, r := range resps {
			if r != nil {
				list = append(list, r)
			}
		}
		if len(list) > 0 {
			out.sendRaw(list)
		}
		return
	}
	if resp := s.rpcRequest(ctx, trimmed, out, c); resp != nil {
		out.send(*resp)
	}
}

func parseErrorResponse(err error) rpcMessage {
	msg := "parse error"
	if err != nil {
		msg += ": " + err.Error()
	}
	return rpcMessage{JSONRPC: "2.0", ID: json.RawMessage("null"), Error: &rpcError{Code: api.RPCParseError, Message: msg,
		Data: api.Errorf(api.CodeInvalidArgument, "%s", msg)}}
}

// rpcRequest runs one request and returns its response (nil for a
// notification).
func (s *Service) rpcRequest(ctx context.Context, raw []byte, out *rpcWriter, c Caller) *rpcMessage {
	var req rpcMessage
	if err := json.Unmarshal(raw, &req); err != nil {
		m := parseErrorResponse(err)
		return &m
	}
	id := req.ID
	notification := len(id) == 0
	fail := func(code int, e *api.Error) *rpcMessage {
		if notification {
			return nil
		}
		return &rpcMessage{JSONRPC: "2.0", ID: id, Error: &rpcError{Code: code, Message: e.Message, Data: e}}
	}
	if req.JSONRPC != "2.0" || req.Method == "" || !validID(id) {
		if len(id) == 0 || !validID(id) {
			id = json.RawMessage("null")
			notification = false
		}
		return fail(api.RPCInvalidRequest, api.Errorf(api.CodeInvalidArgument, "not a JSON-RPC 2.0 request"))
	}
	if req.Method == api.RPCCancel {
		if notification {
			out.cancel(req.Params)
			return nil
		}
		return fail(api.RPCInvalidRequest, api.Errorf(api.CodeInvalidArgument, "%s is a notification (no id)", api.RPCCancel))
	}
	op, ok := api.Lookup(req.Method)
	if !ok {
		return fail(api.RPCMethodNotFound, api.Errorf(api.CodeNotFound, "no method %q", req.Method))
	}
	params := req.Params
	if len(bytes.TrimSpace(params)) == 0 || string(params) == "null" {
		params = json.RawMessage("{}")
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
	}
	if op.Name == api.OpApprovalList {
		var stop context.CancelFunc
		ctx, stop = context.WithCancel(ctx)
		defer stop()
		go func() {
			select {
			case <-out.eof:
				stop()
			case <-ctx.Done():
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
	resp, err := s.call(ctx, c, op.Name, in)
	if err != nil {
		e := api.AsError(err)
		code := api.RPCServerError
		if e.Code == api.CodeInvalidArgument {
			code = api.RPCInvalidParams
		}
		return fail(code, e)
	}
	if notification {
		return nil
	}
	if fc, ok := resp.(*api.FileContent); ok && op.Out == api.BodyRaw {
		fc.Content = buf.Bytes()
		if fc.Content == nil {
			fc.Content = []byte{}
		}
	}
	return &rpcMessage{JSONRPC: "2.0", ID: id, Result: resp}
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

func (o *rpcWriter) send(m rpcMessage) { o.sendRaw(m) }

func (o *rpcWriter) sendRaw(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(rpcMessage{JSONRPC: "2.0", ID: json.RawMessage("null"),
			Error: &rpcError{Code: api.RPCInternalError, Message: err.Error(), Data: api.Errorf(api.CodeInternal, "%v", err)}})
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	_, _ = o.w.Write(append(b, '\n'))
}
