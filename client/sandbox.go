package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
)

// Sandbox is a handle on one sandbox of the daemon. It is safe for
// concurrent use.
type Sandbox struct {
	c    *Client
	id   string
	snap atomic.Pointer[api.Sandbox]
}

// ID returns the sandbox's id.
func (s *Sandbox) ID() string { return s.id }

// Snapshot returns the description the daemon last gave of the sandbox to
// this handle (from CreateSandbox, Info or Delete), or nil if it gave none
// yet. It makes no call.
func (s *Sandbox) Snapshot() *api.Sandbox { return s.snap.Load() }

// Info describes the sandbox.
func (s *Sandbox) Info(ctx context.Context) (*api.Sandbox, error) {
	return s.describe(ctx, api.OpSandboxGet)
}

// Delete kills every process of the sandbox and removes it.
func (s *Sandbox) Delete(ctx context.Context) error {
	_, err := s.describe(ctx, api.OpSandboxDelete)
	return err
}

// describe calls the operation name on the sandbox and keeps the
// description it answers as the snapshot.
func (s *Sandbox) describe(ctx context.Context, name string) (*api.Sandbox, error) {
	var info api.Sandbox
	if err := s.c.call(ctx, name, api.SandboxRef{Sandbox: s.id}, &info); err != nil {
		return nil, err
	}
	s.snap.Store(&info)
	return &info, nil
}

// Exec runs a process to completion and returns its result (output
// captured up to req.OutputLimit). req.Sandbox is set to this sandbox and
// req.Stream is ignored (see [Sandbox.ExecStream]). A process that ran
// and failed is not an error: see the result's ExitCode and ExitReason.
// Cancelling ctx abandons the call (see [Sandbox.ExecStream]).
func (s *Sandbox) Exec(ctx context.Context, req api.Exec) (*sandbox.Result, error) {
	req.Sandbox, req.Stream = s.id, false
	var res sandbox.Result
	if err := s.c.call(ctx, api.OpExec, req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// ExecStream runs a process to completion and yields its output as it
// comes: stdout and stderr events, then a last event of type exit (with
// the Result) or error. The error of each pair is nil except with the
// last event of a failed call: then it is the failure (an *api.Error when
// the daemon reported it) and the event is of type error; its Error is
// the daemon's, or for a failure of the connection or of ctx one of code
// unavailable (timeout for a deadline).
//
// Breaking out of the loop, like cancelling ctx, abandons the call: over
// HTTP this closes the connection and the daemon ends the process; over
// stdio the daemon cannot hear of it and lets the process run to its end
// (a following exec may then be refused as busy).
func (s *Sandbox) ExecStream(ctx context.Context, req api.Exec) iter.Seq2[api.Event, error] {
	req.Sandbox, req.Stream = s.id, true
	return func(yield func(api.Event, error) bool) {
		var res sandbox.Result
		terminal, ok := streamEvents(ctx, s.c, api.OpExec, req, &res, yield)
		if ok && !terminal {
			// The exit came only as the call's answer.
			yield(api.Event{Type: api.EventExit, Result: &res}, nil)
		}
	}
}

// errStop ends a stream whose consumer stopped iterating.
var errStop = errors.New("moat client: iteration stopped")

// streamEvents runs a stream op and yields its events; a failure that
// came without an error event is yielded as one. terminal says whether an
// exit or error event was yielded; ok whether the call succeeded and the
// consumer still iterates.
func streamEvents(ctx context.Context, c *Client, name string, req, resp any, yield func(api.Event, error) bool) (terminal, ok bool) {
	if c.closed.Load() {
		yield(errorEvent(ErrClosed), ErrClosed)
		return true, false
	}
	stopped := false
	err := c.t.stream(ctx, op(name), req, func(ev api.Event) error {
		var everr error
		switch ev.Type {
		case api.EventExit:
			terminal = true
		case api.EventError:
			terminal = true
			everr = eventError(&ev)
		}
		if !yield(ev, everr) {
			stopped = true
			return errStop
		}
		return nil
	}, resp)
	if stopped {
		return terminal, false
	}
	if err != nil {
		if !terminal {
			yield(errorEvent(err), err)
		}
		return true, false
	}
	return terminal, true
}

// eventError is the failure an error event reports; an event that names
// none is given an internal error.
func eventError(ev *api.Event) error {
	if ev.Error == nil {
		ev.Error = &api.Error{Code: api.CodeInternal, Message: "the stream failed without saying why"}
	}
	return ev.Error
}

// errorEvent is the error event of a failed call. A failure the daemon
// did not report (network, stdio child, context) has code unavailable,
// or timeout for a context deadline.
func errorEvent(err error) api.Event {
	var e *api.Error
	if !errors.As(err, &e) {
		code := api.CodeUnavailable
		if errors.Is(err, context.DeadlineExceeded) {
			code = api.CodeTimeout
		}
		e = &api.Error{Code: code, Message: err.Error()}
	}
	return api.Event{Type: api.EventError, Error: e}
}

// Start runs a process in the background; read its output with
// [Process.Output] and its end with [Process.Wait]. req.Sandbox is set to
// this sandbox.
func (s *Sandbox) Start(ctx context.Context, req api.Exec) (*Process, error) {
	req.Sandbox, req.Stream = s.id, false
	var p api.Process
	if err := s.c.call(ctx, api.OpStart, req, &p); err != nil {
		return nil, err
	}
	proc := s.Process(p.ID)
	proc.snap.Store(&p)
	return proc, nil
}

// Processes lists the sandbox's processes.
func (s *Sandbox) Processes(ctx context.Context) ([]api.Process, error) {
	var l api.ProcessList
	if err := s.c.call(ctx, api.OpProcessList, api.SandboxRef{Sandbox: s.id}, &l); err != nil {
		return nil, err
	}
	return l.Processes, nil
}

// Process returns a handle on a process of the sandbox; it makes no call.
func (s *Sandbox) Process(id uint64) *Process {
	return &Process{c: s.c, sandbox: s.id, id: id}
}

// ReadFile returns the content of a file of the sandbox (paths are
// absolute or relative to /workspace). A file over the daemon's read cap
// is refused (too_large or file_error ETOOBIG); see [Sandbox.Download].
func (s *Sandbox) ReadFile(ctx context.Context, path string) ([]byte, error) {
	var buf bytes.Buffer
	if err := s.rawRead(ctx, api.OpFileRead, path, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteFile replaces a file of the sandbox atomically with data. mode's
// permission bits apply to a new file; 0 means the daemon's default
// (0644).
func (s *Sandbox) WriteFile(ctx context.Context, path string, data []byte, mode os.FileMode) error {
	req := &api.WriteFile{Sandbox: s.id, Path: path}
	if mode != 0 {
		req.Mode = fmt.Sprintf("%04o", uint32(mode.Perm()))
	}
	return s.rawWrite(ctx, api.OpFileWrite, req, bytes.NewReader(data))
}

// ListDir lists a directory, sorted by name.
func (s *Sandbox) ListDir(ctx context.Context, path string) ([]sandbox.FileInfo, error) {
	var l api.DirList
	if err := s.c.call(ctx, api.OpFileList, api.FilePath{Sandbox: s.id, Path: path}, &l); err != nil {
		return nil, err
	}
	return l.Entries, nil
}

// Stat describes a file without following a final symlink.
func (s *Sandbox) Stat(ctx context.Context, path string) (*sandbox.FileInfo, error) {
	var fi sandbox.FileInfo
	if err := s.c.call(ctx, api.OpFileStat, api.FilePath{Sandbox: s.id, Path: path}, &fi); err != nil {
		return nil, err
	}
	return &fi, nil
}

// Mkdir creates a directory, and its missing parents if parents is set.
func (s *Sandbox) Mkdir(ctx context.Context, path string, parents bool) error {
	return s.c.call(ctx, api.OpFileMkdir, api.Mkdir{Sandbox: s.id, Path: path, Parents: parents}, nil)
}

// Remove deletes a file or an empty directory, or a whole tree if
// recursive is set.
func (s *Sandbox) Remove(ctx context.Context, path string, recursive bool) error {
	return s.c.call(ctx, api.OpFileRemove, api.Remove{Sandbox: s.id, Path: path, Recursive: recursive}, nil)
}

// Move moves or renames a file or directory.
func (s *Sandbox) Move(ctx context.Context, from, to string) error {
	return s.c.call(ctx, api.OpFileMove, api.Move{Sandbox: s.id, From: from, To: to}, nil)
}

// Upload extracts the tar stream read from archive under the directory
// dir of the sandbox. Over HTTP the stream is sent as it is read; over
// stdio it is read whole first.
func (s *Sandbox) Upload(ctx context.Context, dir string, archive io.Reader) error {
	return s.rawWrite(ctx, api.OpFileUpload, &api.WriteFile{Sandbox: s.id, Path: dir}, archive)
}

// Download writes path (a file or a tree) as a tar stream to w. Its
// entries are named after path's last element ("src/", "src/a.txt" for
// path /workspace/src).
func (s *Sandbox) Download(ctx context.Context, path string, w io.Writer) error {
	return s.rawRead(ctx, api.OpFileDownload, path, w)
}

func (s *Sandbox) rawRead(ctx context.Context, name, path string, w io.Writer) error {
	if s.c.closed.Load() {
		return ErrClosed
	}
	return s.c.t.readRaw(ctx, op(name), api.FilePath{Sandbox: s.id, Path: path}, w)
}

func (s *Sandbox) rawWrite(ctx context.Context, name string, req *api.WriteFile, body io.Reader) error {
	if s.c.closed.Load() {
		return ErrClosed
	}
	var w api.Written
	return s.c.t.writeRaw(ctx, op(name), req, body, &w)
}

// Process is a handle on a process started in a sandbox. It is safe for
// concurrent use.
type Process struct {
	c       *Client
	sandbox string
	id      uint64
	snap    atomic.Pointer[api.Process]
}

// ID returns the process's id within its sandbox.
func (p *Process) ID() uint64 { return p.id }

// SandboxID returns the id of the process's sandbox.
func (p *Process) SandboxID() string { return p.sandbox }

// Snapshot returns the description the daemon last gave of the process
// to this handle (from Start, Get or Wait), or nil. It makes no call.
func (p *Process) Snapshot() *api.Process { return p.snap.Load() }

// Get describes the process (with its result once it has ended).
func (p *Process) Get(ctx context.Context) (*api.Process, error) {
	var info api.Process
	if err := p.c.call(ctx, api.OpProcessGet, api.ProcessRef{Sandbox: p.sandbox, Process: p.id}, &info); err != nil {
		return nil, err
	}
	p.snap.Store(&info)
	return &info, nil
}

// Output yields the process's output events after sequence number after
// (0: from the start of what the daemon retains). An event of type lost
// means output before it was dropped from the daemon's buffer. Without
// follow the stream ends with the output retained now; with follow it
// ends with the exit event. A failure ends it with an error event paired
// with the error (as in [Sandbox.ExecStream]). To resume, pass the Seq of
// the last event seen.
func (p *Process) Output(ctx context.Context, after uint64, follow bool) iter.Seq2[api.Event, error] {
	req := api.ReadOutput{Sandbox: p.sandbox, Process: p.id, After: after, Follow: follow}
	return func(yield func(api.Event, error) bool) {
		var info api.Process
		terminal, ok := streamEvents(ctx, p.c, api.OpOutput, req, &info, yield)
		if ok && follow && !terminal && info.State == api.ProcExited {
			// The daemon answered with the ended process but sent no
			// exit event.
			p.snap.Store(&info)
			yield(api.Event{Type: api.EventExit, Process: p.id, Result: info.Result}, nil)
		}
	}
}

// Events is [Process.Output] with follow, over channels: events receives
// the output events up to and including the exit event, then is closed;
// errs then receives the failure, if any (the error event is not sent on
// events), and is closed. Cancel ctx to stop early.
func (p *Process) Events(ctx context.Context, after uint64) (<-chan api.Event, <-chan error) {
	events := make(chan api.Event, 16)
	errs := make(chan error, 1)
	go func() {
		defer close(errs)
		defer close(events)
		for ev, err := range p.Output(ctx, after, true) {
			if err != nil {
				errs <- err
				return
			}
			select {
			case events <- ev:
			case <-ctx.Done():
				errs <- ctx.Err()
				return
			}
		}
	}()
	return events, errs
}

// WriteStdin writes data to the process's standard input.
func (p *Process) WriteStdin(ctx context.Context, data []byte) error {
	req := api.Stdin{Sandbox: p.sandbox, Process: p.id}
	if utf8.Valid(data) {
		req.Data = string(data)
	} else {
		req.DataBase64 = data
	}
	return p.c.call(ctx, api.OpStdin, req, nil)
}

// CloseStdin closes the process's standard input (it reads EOF).
func (p *Process) CloseStdin(ctx context.Context) error {
	return p.c.call(ctx, api.OpStdin, api.Stdin{Sandbox: p.sandbox, Process: p.id, EOF: true}, nil)
}

// Signal sends a signal to the process's group: a name ("TERM",
// "SIGKILL") or a number ("15").
func (p *Process) Signal(ctx context.Context, name string) error {
	return p.c.call(ctx, api.OpSignal, api.Signal{Sandbox: p.sandbox, Process: p.id, Signal: name}, nil)
}

// waitSlice bounds one process.wait call, so that no proxy between the
// client and the daemon ends an idle request.
const waitSlice = 25 * time.Second

// waitPause spaces the calls of Wait when the daemon answers a
// process.wait long before its timeout with the process still running.
var waitPause = 500 * time.Millisecond

// Wait waits until the process has ended and returns it with its result,
// calling process.wait repeatedly until then or until ctx ends.
func (p *Process) Wait(ctx context.Context) (*api.Process, error) {
	for {
		slice := waitSlice
		if dl, ok := ctx.Deadline(); ok {
			if left := time.Until(dl); left < slice {
				slice = left
			}
		}
		if slice <= 0 {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		started := time.Now()
		var info api.Process
		req := api.ProcessRef{Sandbox: p.sandbox, Process: p.id, TimeoutMs: max(slice.Milliseconds(), 1)}
		if err := p.c.call(ctx, api.OpWait, req, &info); err != nil {
			return nil, err
		}
		p.snap.Store(&info)
		if info.State == api.ProcExited {
			return &info, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// A daemon that answers at once with the process still running
		// must not be polled in a tight loop.
		if time.Since(started) < slice/10 {
			t := time.NewTimer(min(slice/10, waitPause))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		}
	}
}

// SetNetwork sets the running sandbox's network (sandbox.network): n's
// mode (empty keeps the current one), allow_domains and deny_domains
// replace the sandbox's. The answer is the network the sandbox now has:
// the effective allowlist, and in Dropped the entries the policy's
// ceiling refuses. Mode open can be neither entered nor left (conflict);
// an IP or CIDR entry outside the managed policy's allow_cidr_entries is
// policy_denied. The egress proxy decides the next connection with it.
func (s *Sandbox) SetNetwork(ctx context.Context, n api.Network) (*api.Network, error) {
	req := api.SetNetwork{Sandbox: s.id, Mode: n.Mode, AllowDomains: n.AllowDomains, DenyDomains: n.DenyDomains}
	var out api.Network
	if err := s.c.call(ctx, api.OpSandboxNetwork, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
