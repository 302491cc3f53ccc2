package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moat-sandbox/moat/api"
)

// Timeouts of the stdio child.
const (
	// stdioCloseGrace is how long Close waits for the child to exit after
	// closing its stdin before it kills it.
	stdioCloseGrace = 5 * time.Second
	// stdioExitWait is how long a failed call waits for the exit status of
	// a child that closed its output, to say why.
	stdioExitWait = 2 * time.Second
)

// stdioTransport speaks JSON-RPC 2.0, one message per line, with a
// `moat serve --stdio` child. Calls are multiplexed: a reader goroutine
// queues each message for the call whose id it carries, and each call
// drains its own queue, so a slow consumer of one stream holds up no other
// call.
type stdioTransport struct {
	cmd    *exec.Cmd
	name   string   // the child's command line, for messages
	stdin  *os.File // write end of the child's stdin
	stdout *os.File // read end of the child's stdout

	wmu    sync.Mutex // serialises writes of whole lines
	nextID atomic.Uint64

	mu      sync.Mutex
	pending map[uint64]*pendingCall
	dead    error         // why the connection ended; set before deadCh closes
	deadCh  chan struct{} // closed when the reader has stopped
	closing atomic.Bool

	exited  chan struct{} // closed when the child has been waited for
	exitErr error         // cmd.Wait's answer; read after exited closes

	closeGrace time.Duration
	closeOnce  sync.Once
	closeErr   error
}

// pendingCall is the queue of messages (events, then the response) of
// one call in flight.
type pendingCall struct {
	mu     sync.Mutex
	queue  []inbound
	notify chan struct{} // capacity 1: "the queue has grown"
}

// inbound is one message for a call: an event or its response.
type inbound struct {
	event *api.Event
	resp  *rpcMessage
}

func (p *pendingCall) push(m inbound) {
	p.mu.Lock()
	p.queue = append(p.queue, m)
	p.mu.Unlock()
	select {
	case p.notify <- struct{}{}:
	default:
	}
}

func (p *pendingCall) take() []inbound {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.queue
	p.queue = nil
	return q
}

// rpcRequest is a JSON-RPC request.
type rpcRequest struct {
	JSONRPC string `json:"jsonrpc"`
	ID      uint64 `json:"id,omitempty"` // 0: a notification
	Method  string `json:"method"`
	Params  any    `json:"params"`
}

// rpcMessage is any message from the server: a response (ID with Result
// or Error) or a notification (Method and Params).
type rpcMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

// rpcError is a JSON-RPC error; moat puts an api.Error in Data.
type rpcError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// apiError maps a JSON-RPC error to the api.Error it carries, or to one
// made from its standard code.
func (e *rpcError) apiError() *api.Error {
	var ae api.Error
	if len(e.Data) > 0 && json.Unmarshal(e.Data, &ae) == nil && ae.Code != "" {
		return &ae
	}
	code := api.CodeInternal
	switch e.Code {
	case api.RPCParseError, api.RPCInvalidRequest, api.RPCInvalidParams:
		code = api.CodeInvalidArgument
	case api.RPCMethodNotFound:
		code = api.CodeUnimplemented
	}
	msg := e.Message
	if msg == "" {
		msg = "JSON-RPC error " + strconv.Itoa(e.Code)
	}
	return &api.Error{Code: code, Message: msg}
}

// eventParams are the params of a process.event notification.
type eventParams struct {
	ID    json.RawMessage `json:"id"`
	Event api.Event       `json:"event"`
}

// startStdio starts the child and its reader.
func startStdio(bin string, args []string, stderr io.Writer) (*stdioTransport, error) {
	if bin == "" {
		bin = DefaultBinary
	}
	if len(args) == 0 {
		args = []string{"serve", "--stdio"}
	}
	name := strings.Join(append([]string{bin}, args...), " ")
	cmd := exec.Command(bin, args...)
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("moat client: starting %s: %w", name, err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("moat client: starting %s: %w", name, err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, stderr
	if stderr == io.Discard {
		cmd.Stderr = nil // the null device: no copying goroutine
	}
	cmd.WaitDelay = time.Second
	setProcAttr(cmd)
	err = cmd.Start()
	// The child holds its own copies of these ends.
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("moat client: starting %s: %w", name, err)
	}
	t := &stdioTransport{
		cmd: cmd, name: name, stdin: inW, stdout: outR,
		pending:    map[uint64]*pendingCall{},
		deadCh:     make(chan struct{}),
		exited:     make(chan struct{}),
		closeGrace: stdioCloseGrace,
	}
	go func() {
		t.exitErr = cmd.Wait()
		close(t.exited)
	}()
	go t.readLoop()
	return t, nil
}

// readLoop dispatches the child's messages until its output ends.
func (t *stdioTransport) readLoop() {
	br := bufio.NewReaderSize(t.stdout, 64<<10)
	var err error
	for {
		line, rerr := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			if err = t.dispatch(line); err != nil {
				break
			}
		}
		if rerr != nil {
			err = rerr
			break
		}
	}
	t.fail(err)
}

// dispatch queues one message for the call it belongs to.
func (t *stdioTransport) dispatch(line []byte) error {
	var m rpcMessage
	if err := json.Unmarshal(line, &m); err != nil {
		if len(line) > 200 {
			line = append(line[:200:200], "…"...)
		}
		return fmt.Errorf("moat client: %s sent a line that is not JSON-RPC: %q", t.name, bytes.TrimSpace(line))
	}
	if m.Method != "" {
		if m.Method != api.NotifyEvent {
			return nil // no other notification is defined; requests are not served
		}
		var p eventParams
		if err := json.Unmarshal(m.Params, &p); err != nil {
			return fmt.Errorf("moat client: %s sent a malformed %s: %w", t.name, api.NotifyEvent, err)
		}
		if id, ok := parseID(p.ID); ok {
			t.deliver(id, inbound{event: &p.Event})
		}
		return nil
	}
	if id, ok := parseID(m.ID); ok {
		t.deliver(id, inbound{resp: &m})
	}
	// A response without a usable id (a parse error of a line this
	// client sent) cannot be matched to a call; it is dropped.
	return nil
}

// parseID reads a JSON-RPC id this client issued (a number; a string of
// digits is accepted too).
func parseID(raw json.RawMessage) (uint64, bool) {
	s := strings.Trim(string(bytes.TrimSpace(raw)), `"`)
	id, err := strconv.ParseUint(s, 10, 64)
	return id, err == nil
}

func (t *stdioTransport) deliver(id uint64, m inbound) {
	t.mu.Lock()
	pc := t.pending[id]
	t.mu.Unlock()
	if pc != nil {
		pc.push(m) // messages of abandoned calls are dropped
	}
}

// fail records why the connection ended and wakes every call.
func (t *stdioTransport) fail(err error) {
	switch {
	case t.closing.Load():
		err = ErrClosed
	case err == io.EOF || errors.Is(err, os.ErrClosed):
		timer := time.NewTimer(stdioExitWait)
		select {
		case <-t.exited:
			if t.exitErr != nil {
				err = fmt.Errorf("moat client: %s ended: %w", t.name, t.exitErr)
			} else {
				err = fmt.Errorf("moat client: %s exited", t.name)
			}
		case <-timer.C:
			err = fmt.Errorf("moat client: %s closed its output", t.name)
		}
		timer.Stop()
	}
	t.mu.Lock()
	t.dead = err
	t.mu.Unlock()
	close(t.deadCh)
}

// roundTrip sends one request and processes its messages: events go to
// onEvent (nil: dropped), the response is decoded into result.
func (t *stdioTransport) roundTrip(ctx context.Context, method string, params any, onEvent func(api.Event) error, result any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	id := t.nextID.Add(1)
	pc := &pendingCall{notify: make(chan struct{}, 1)}
	t.mu.Lock()
	if t.dead != nil {
		err := t.dead
		t.mu.Unlock()
		return err
	}
	t.pending[id] = pc
	t.mu.Unlock()
	answered := false
	defer func() {
		t.mu.Lock()
		delete(t.pending, id)
		t.mu.Unlock()
		if !answered {
			// The caller gave up (ctx, or its event callback failed):
			// the daemon cancels the call, which kills its process.
			if c, err := json.Marshal(rpcRequest{JSONRPC: "2.0", Method: api.RPCCancel, Params: map[string]uint64{"id": id}}); err == nil {
				_ = t.write(append(c, '\n'))
			}
		}
	}()

	line, err := json.Marshal(rpcRequest{JSONRPC: "2.0", ID: id, Method: method, Params: params})
	if err != nil {
		return fmt.Errorf("moat client: %s: encoding the request: %w", method, err)
	}
	if err := t.write(append(line, '\n')); err != nil {
		select {
		case <-t.deadCh:
			return t.deadErr()
		default:
		}
		if t.closing.Load() {
			return ErrClosed
		}
		return fmt.Errorf("moat client: %s: writing to %s: %w", method, t.name, err)
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		msgs := pc.take()
		if len(msgs) == 0 {
			select {
			case <-pc.notify:
				continue
			case <-ctx.Done():
				return ctx.Err()
			case <-t.deadCh:
				// Everything the reader got is queued by now.
				if msgs = pc.take(); len(msgs) == 0 {
					return t.deadErr()
				}
			}
		}
		for _, m := range msgs {
			if m.event != nil {
				if onEvent != nil {
					if err := onEvent(*m.event); err != nil {
						return err
					}
				}
				continue
			}
			answered = true
			if m.resp.Error != nil {
				return m.resp.Error.apiError()
			}
			if result != nil && len(m.resp.Result) > 0 {
				if err := json.Unmarshal(m.resp.Result, result); err != nil {
					return fmt.Errorf("moat client: %s: decoding the answer: %w", method, err)
				}
			}
			return nil
		}
	}
}

func (t *stdioTransport) deadErr() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.dead
}

// write sends one whole line.
func (t *stdioTransport) write(line []byte) error {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	_, err := t.stdin.Write(line)
	return err
}

func (t *stdioTransport) call(ctx context.Context, op api.Op, req, resp any) error {
	return t.roundTrip(ctx, op.Name, req, nil, resp)
}

func (t *stdioTransport) stream(ctx context.Context, op api.Op, req any, onEvent func(api.Event) error, resp any) error {
	return t.roundTrip(ctx, op.Name, req, onEvent, resp)
}

func (t *stdioTransport) readRaw(ctx context.Context, op api.Op, req any, w io.Writer) error {
	var fc api.FileContent
	if err := t.roundTrip(ctx, op.Name, req, nil, &fc); err != nil {
		return err
	}
	if _, err := w.Write(fc.Content); err != nil {
		return fmt.Errorf("moat client: %s: %w", op.Name, err)
	}
	return nil
}

func (t *stdioTransport) writeRaw(ctx context.Context, op api.Op, req *api.WriteFile, body io.Reader, resp *api.Written) error {
	params := *req
	if body != nil {
		b, err := io.ReadAll(body)
		if err != nil {
			return fmt.Errorf("moat client: %s: reading the content: %w", op.Name, err)
		}
		params.Content = b
	}
	if params.Content == nil {
		params.Content = []byte{}
	}
	return t.roundTrip(ctx, op.Name, &params, nil, resp)
}

// close ends the child: closing its stdin asks it to delete its sandboxes
// and exit; after closeGrace it is killed.
func (t *stdioTransport) close() error {
	t.closeOnce.Do(func() {
		t.closing.Store(true)
		t.stdin.Close() // a write in progress fails; the child sees EOF
		timer := time.NewTimer(t.closeGrace)
		defer timer.Stop()
		select {
		case <-t.exited:
			if t.exitErr != nil {
				t.closeErr = fmt.Errorf("moat client: %s: %w", t.name, t.exitErr)
			}
		case <-timer.C:
			killChild(t.cmd)
			<-t.exited
			t.closeErr = fmt.Errorf("moat client: %s did not exit within %s of its stdin closing; killed it", t.name, t.closeGrace)
		}
		// Unblocks the reader even if a descendant of the child still
		// holds the pipe's write end.
		t.stdout.Close()
		<-t.deadCh
	})
	return t.closeErr
}
