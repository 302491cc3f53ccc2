// Package client is the Go SDK of moat's control plane: it creates
// sandboxes, runs processes in them, moves files in and out and reads the
// audit trail, over either transport of the daemon:
//
//   - HTTP to a running `moat serve` (MOAT_URL, bearer token MOAT_TOKEN);
//   - stdio: the client starts `moat serve --stdio` as its own child and
//     speaks JSON-RPC 2.0 over its standard input and output. The child
//     and every sandbox it made end when the client is closed (or this
//     program ends, even killed); without MOAT_DATA the child's data
//     directory is temporary and removed with it. The child logs to a
//     file in its data directory, not to stderr (MOAT_LOG_STDERR=1 in
//     the environment it inherits sends the log to stderr).
//
// Both transports carry the same operations ([api.Ops]) with the same
// bodies, so the same code runs over either.
//
// # Configuration
//
// [New] without options reads the environment:
//
//	MOAT_MODE        http or stdio (default: http if MOAT_URL is set, else stdio)
//	MOAT_URL         base URL of the daemon (default http://127.0.0.1:7070), or unix:/PATH of its socket
//	MOAT_TOKEN       API token (http)
//	MOAT_TOKEN_FILE  file holding the token when MOAT_TOKEN is empty (default <MOAT_DATA>/token, else /var/lib/moat/token)
//	MOAT_BIN         the moat binary started in stdio mode (default "moat", from PATH)
//	MOAT_DATA        http: the daemon's data directory, whose token file is read;
//	                 stdio: passed as --data to `moat serve --stdio` (which then keeps it)
//
// [WithHTTP] and [WithStdio] choose a transport in code instead.
//
// # Copies with the host
//
// [Sandbox.CopyIn] and [Sandbox.CopyOut] copy files and trees between
// the host and a sandbox as cp -r does (what `moat sandbox cp` runs),
// following no symlink on the host: a sandbox can plant them in the host
// directories it writes, and an archive it sends can hold them. They are
// built on package fstree (openat2), the only part of moat's engines the
// SDK links, on Linux only: elsewhere they return [ErrCopyUnsupported].
//
// # Errors
//
// Everything the daemon refuses comes back as an [*api.Error]: use
// errors.As, errors.Is(err, &api.Error{Code: api.CodeNotFound}), or the
// helpers [Code], [IsNotFound], [IsBusy], [IsUnauthenticated], [IsGone]
// and [IsPolicyDenied].
//
// # Policy and approvals
//
// The daemon judges every exec, start and file operation by the
// sandbox's policy. A refusal is an *api.Error of code policy_denied
// ([IsPolicyDenied]) whose Message is the reason, with the rule. A call an
// ask rule holds waits until an approver answers: [Sandbox.ExecStream]
// yields an event of type approval when it starts waiting and when it is
// answered. Approvers list, follow and answer approvals with
// [Client.Approvals], [Client.FollowApprovals] and
// [Client.AnswerApproval] (an approver token: MOAT_APPROVER_TOKEN). Failures to reach the daemon are other errors (wrapping the
// network or process error; context errors are kept so errors.Is works).
//
// # Example
//
//	c, err := client.New() // from MOAT_* environment variables
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer c.Close()
//	sb, err := c.CreateSandbox(ctx, api.CreateSandbox{Limits: sandbox.Limits{MemoryBytes: 512 << 20}})
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer sb.Delete(context.WithoutCancel(ctx))
//	if err := sb.WriteFile(ctx, "/workspace/hello.py", []byte("print(6*7)\n"), 0o644); err != nil {
//		log.Fatal(err)
//	}
//	res, err := sb.Exec(ctx, api.Exec{Args: []string{"python3", "/workspace/hello.py"}})
//	if err != nil {
//		log.Fatal(err)
//	}
//	fmt.Print(res.Stdout) // 42
package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/moat-sandbox/moat/api"
)

// Defaults of the environment configuration.
const (
	// DefaultURL is the daemon's address when MOAT_URL is unset.
	DefaultURL = "http://127.0.0.1:7070"
	// DefaultTokenFile is read for the token when MOAT_TOKEN and
	// MOAT_TOKEN_FILE are unset.
	DefaultTokenFile = "/var/lib/moat/token"
	// DefaultBinary is the moat binary started in stdio mode when MOAT_BIN
	// is unset; it is looked up in PATH.
	DefaultBinary = "moat"
)

// Transport modes (MOAT_MODE).
const (
	ModeHTTP  = "http"
	ModeStdio = "stdio"
)

// ErrClosed is returned by calls made after [Client.Close].
var ErrClosed = errors.New("moat client: closed")

// transport carries the operations of [api.Ops]; http.go and stdio.go
// implement it.
type transport interface {
	// call sends req and decodes the answer into resp (nil: discard it).
	call(ctx context.Context, op api.Op, req, resp any) error
	// stream sends req and hands each event to onEvent, in order; a
	// non-nil error from onEvent ends the call with that error. resp
	// receives the final answer when the transport has one (JSON-RPC's
	// response; over HTTP only an exec's exit event fills it).
	stream(ctx context.Context, op api.Op, req any, onEvent func(api.Event) error, resp any) error
	// readRaw writes a raw answer (file content, tar stream) to w.
	readRaw(ctx context.Context, op api.Op, req any, w io.Writer) error
	// writeRaw sends body as the raw content of req.
	writeRaw(ctx context.Context, op api.Op, req *api.WriteFile, body io.Reader, resp *api.Written) error
	// close releases the transport (and ends a stdio child).
	close() error
}

// Client talks to one moat daemon. It is safe for concurrent use; close it
// when done (in stdio mode this ends the daemon and its sandboxes).
type Client struct {
	t         transport
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// settings collects what the options chose.
type settings struct {
	mode       string // "", ModeHTTP or ModeStdio
	url, token string
	httpClient *http.Client
	bin        string
	args       []string
	stderr     io.Writer
}

// Option configures [New].
type Option func(*settings) error

// WithHTTP talks to the daemon at baseURL with the given API token.
// baseURL is http://HOST:PORT or https://HOST[:PORT], optionally with a
// path prefix, or unix:/PATH for a daemon listening on a unix socket
// (moat serve --listen unix:/PATH).
func WithHTTP(baseURL, token string) Option {
	return func(s *settings) error {
		s.mode, s.url, s.token = ModeHTTP, baseURL, token
		return nil
	}
}

// WithHTTPFromEnv talks HTTP to the daemon named by MOAT_URL (default
// [DefaultURL]) with the token of MOAT_TOKEN, MOAT_TOKEN_FILE or
// <MOAT_DATA>/token (default [DefaultTokenFile]), whatever MOAT_MODE says. Commands that need a long-lived daemon (the CLI's
// `moat sandbox`) use it.
func WithHTTPFromEnv() Option {
	return envHTTP
}

// WithHTTPClient sends HTTP requests with hc instead of a client of the
// package's own (which has no overall timeout: exec and streams last as
// long as the process).
func WithHTTPClient(hc *http.Client) Option {
	return func(s *settings) error {
		if hc == nil {
			return errors.New("moat client: WithHTTPClient(nil)")
		}
		s.httpClient = hc
		return nil
	}
}

// WithStdio starts binary (a moat executable, looked up in PATH when it
// has no slash; "" means [DefaultBinary]) as a child speaking JSON-RPC
// over its stdin and stdout. args, when given, replace the default
// arguments "serve --stdio".
func WithStdio(binary string, args ...string) Option {
	return func(s *settings) error {
		s.mode, s.bin, s.args = ModeStdio, binary, args
		return nil
	}
}

// WithStderr sends the stdio child's standard error to w instead of this
// process's standard error; io.Discard drops it. The child writes there
// only when it cannot start, or its log when MOAT_LOG_STDERR=1 is set
// (otherwise the log goes to serve.log in its data directory).
func WithStderr(w io.Writer) Option {
	return func(s *settings) error {
		s.stderr = w
		return nil
	}
}

// New returns a client configured by opts or, when no option chooses a
// transport, by the MOAT_* environment variables (see the package
// documentation). In stdio mode it starts the child daemon.
func New(opts ...Option) (*Client, error) {
	var s settings
	for _, o := range opts {
		if err := o(&s); err != nil {
			return nil, err
		}
	}
	if s.mode == "" {
		if err := fromEnv(&s); err != nil {
			return nil, err
		}
	}
	var t transport
	var err error
	switch s.mode {
	case ModeHTTP:
		t, err = newHTTP(s.url, s.token, s.httpClient)
	case ModeStdio:
		if s.stderr == nil {
			s.stderr = os.Stderr
		}
		t, err = startStdio(s.bin, s.args, s.stderr)
	}
	if err != nil {
		return nil, err
	}
	return &Client{t: t}, nil
}

// fromEnv reads MOAT_MODE and the variables of its mode.
func fromEnv(s *settings) error {
	mode := strings.TrimSpace(os.Getenv("MOAT_MODE"))
	if mode == "" {
		mode = ModeStdio
		if os.Getenv("MOAT_URL") != "" {
			mode = ModeHTTP
		}
	}
	switch mode {
	case ModeHTTP:
		return envHTTP(s)
	case ModeStdio:
		s.mode, s.bin, s.args = ModeStdio, os.Getenv("MOAT_BIN"), nil
		if d := os.Getenv("MOAT_DATA"); d != "" {
			s.args = []string{"serve", "--stdio", "--data", d}
		}
		return nil
	}
	return fmt.Errorf("moat client: MOAT_MODE=%q: want %q or %q", mode, ModeHTTP, ModeStdio)
}

// envHTTP reads MOAT_URL and the token.
func envHTTP(s *settings) error {
	u := os.Getenv("MOAT_URL")
	if u == "" {
		u = DefaultURL
	}
	tok := os.Getenv("MOAT_TOKEN")
	if tok == "" {
		file := os.Getenv("MOAT_TOKEN_FILE")
		if file == "" && os.Getenv("MOAT_DATA") != "" {
			file = filepath.Join(os.Getenv("MOAT_DATA"), "token")
		}
		if file == "" {
			file = DefaultTokenFile
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("moat client: no API token: MOAT_TOKEN is empty and the token file cannot be read (%w)", err)
		}
		if tok = strings.TrimSpace(string(b)); tok == "" {
			return fmt.Errorf("moat client: no API token: MOAT_TOKEN is empty and the token file %s is empty", file)
		}
	}
	s.mode, s.url, s.token = ModeHTTP, u, tok
	return nil
}

// Close releases the client. In stdio mode it closes the child's standard
// input, which makes the daemon delete its sandboxes and exit, and waits
// for it (killing it if it has not exited after a few seconds). Calls made
// after Close fail with [ErrClosed]. Close is safe to call more than once.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		c.closeErr = c.t.close()
	})
	return c.closeErr
}

// op returns the operation named name; a missing one is a bug of this
// package.
func op(name string) api.Op {
	o, ok := api.Lookup(name)
	if !ok {
		panic("moat client: no operation " + name + " in api.Ops")
	}
	return o
}

func (c *Client) call(ctx context.Context, name string, req, resp any) error {
	if c.closed.Load() {
		return ErrClosed
	}
	return c.t.call(ctx, op(name), req, resp)
}

// CreateSandbox creates a sandbox and returns once it is ready.
func (c *Client) CreateSandbox(ctx context.Context, req api.CreateSandbox) (*Sandbox, error) {
	var info api.Sandbox
	if err := c.call(ctx, api.OpSandboxCreate, req, &info); err != nil {
		return nil, err
	}
	s := c.Sandbox(info.ID)
	s.snap.Store(&info)
	return s, nil
}

// Sandbox returns a handle on an existing sandbox; it makes no call.
func (c *Client) Sandbox(id string) *Sandbox {
	return &Sandbox{c: c, id: id}
}

// ListSandboxes lists the caller's sandboxes.
func (c *Client) ListSandboxes(ctx context.Context, req api.ListSandboxes) ([]api.Sandbox, error) {
	var l api.SandboxList
	if err := c.call(ctx, api.OpSandboxList, req, &l); err != nil {
		return nil, err
	}
	return l.Sandboxes, nil
}

// Audit queries the caller's audit events (req.Sandbox keeps one
// sandbox's); page on with AfterSeq = the last event's Seq while
// [api.AuditPage.More] is set.
func (c *Client) Audit(ctx context.Context, req api.AuditQuery) (*api.AuditPage, error) {
	var p api.AuditPage
	if err := c.call(ctx, api.OpAuditQuery, req, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Code returns the [api.Error] code of err ("" when err is not, and does
// not wrap, an *api.Error).
func Code(err error) string {
	var e *api.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// IsNotFound reports whether err says that the sandbox, process, route or
// file does not exist (code not_found, or file_error with errno ENOENT).
func IsNotFound(err error) bool {
	var e *api.Error
	if !errors.As(err, &e) {
		return false
	}
	return e.Code == api.CodeNotFound || e.Code == api.CodeFile && e.Errno == "ENOENT"
}

// IsBusy reports whether err says that another exec is running in the
// sandbox (retry later, or set [api.Exec.Concurrent]).
func IsBusy(err error) bool { return Code(err) == api.CodeBusy }

// IsUnauthenticated reports whether the daemon refused the token.
func IsUnauthenticated(err error) bool { return Code(err) == api.CodeUnauthenticated }

// IsGone reports whether err says that the sandbox or process has ended
// (code gone or sandbox_not_running).
func IsGone(err error) bool {
	c := Code(err)
	return c == api.CodeGone || c == api.CodeNotRunning
}
