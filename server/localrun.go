//go:build linux

package server

// The local run door: `moat run` on the daemon's host hands its request
// to a running daemon over a unix socket instead of building the sandbox
// itself. The socket is the daemon's (mode 0600 in its 0700 data
// directory); a connection is served only when the peer's credentials
// (SO_PEERCRED) are the daemon's own user, root, which could read the
// daemon's token file and so is a caller the HTTP door accepts too. The
// caller's stdio (and its terminal, for an ask rule) arrive with the
// request as SCM_RIGHTS descriptors; the handler, the CLI's own moat run
// (cmd/moat/localrun_serve.go), runs the request with them exactly as the
// caller would have, through package admit.
//
// Wire format, both ways: frames of a 4-byte big-endian length and that
// many bytes of JSON. The caller sends one LocalRunRequest (its first
// bytes carry the descriptors), then LocalRunSignal frames for the
// signals it gets. The daemon answers one LocalRunReply: Refused (nothing
// ran; the caller runs the command itself) or Accepted, then, once the
// command has ended, one with the exit code.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// LocalRunSocket is the name of the local run socket in the daemon's
// data directory.
const LocalRunSocket = "run.sock"

// MaxLocalRunRequest bounds a request frame: a command line of up to
// 1 MiB (sandbox's bound), JSON-escaped, and its flags.
const MaxLocalRunRequest = 8 << 20

// maxLocalRunFDs is what a request may carry: stdin, stdout, stderr and
// the caller's terminal.
const maxLocalRunFDs = 4

// ErrLocalRunRefused is returned by a LocalRunHandler that will not serve
// a request's shape (a flag it cannot honour, another config): nothing
// ran, and the caller runs the command itself.
var ErrLocalRunRefused = errors.New("local run refused")

// LocalRunRequest is what a caller sends.
type LocalRunRequest struct {
	// Args are moat run's arguments as the caller got them (its flags,
	// then the command line).
	Args []string `json:"args"`
	// Cwd is the caller's working directory: relative paths in Args are
	// relative to it.
	Cwd string `json:"cwd"`
	// Home is the caller's $HOME ("" when it has none).
	Home string `json:"home,omitempty"`
	// Config is the caller's $MOAT_CONFIG.
	Config string `json:"config,omitempty"`
	// TTY says the fourth descriptor is the caller's terminal.
	TTY bool `json:"tty,omitempty"`
}

// LocalRunSignal is a signal the caller got, for the command.
type LocalRunSignal struct {
	Signal int `json:"signal"`
}

// LocalRunReply is the daemon's answer.
type LocalRunReply struct {
	// Refused says why the daemon did not run the request; nothing ran.
	Refused string `json:"refused,omitempty"`
	// Accepted says the daemon runs the request; an exit code follows.
	Accepted bool `json:"accepted,omitempty"`
	// Exit is moat run's exit code (in the reply after Accepted).
	Exit int `json:"exit"`
}

// LocalRun is one accepted request with the caller's descriptors. The
// handler owns nothing of it: ServeLocalRun closes the files afterwards.
type LocalRun struct {
	LocalRunRequest
	// Stdin, Stdout and Stderr are the caller's; Terminal is its
	// terminal, or nil.
	Stdin, Stdout, Stderr, Terminal *os.File
	// Signals delivers the signals the caller forwards; it is closed when
	// the caller hangs up.
	Signals <-chan syscall.Signal
	// accept tells the caller the request is taken.
	accept func() error
}

// Accept tells the caller that the request is taken: from here on it
// will not run the command itself. A handler calls it once it has
// decided not to refuse, before anything runs.
func (r *LocalRun) Accept() error { return r.accept() }

// LocalRunHandler runs one request and returns moat run's exit code. It
// returns an error wrapping ErrLocalRunRefused, before calling Accept,
// when it will not serve the request. ctx ends when the caller hangs up
// or the daemon stops.
type LocalRunHandler func(ctx context.Context, r *LocalRun) (int, error)

// ListenLocalRun listens on the unix socket at path, mode 0600, replacing
// a stale socket there (a file of another kind is an error).
func ListenLocalRun(path string) (*net.UnixListener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("local run socket %s: exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("local run socket: %w", err)
		}
	}
	// The umask makes the socket private from its creation on.
	old := unix.Umask(0o177)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("local run socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("local run socket: %w", err)
	}
	return ln, nil
}

// ServeLocalRun serves ln until ctx ends, at most max requests at once
// (more are refused), and removes the socket when it returns.
func ServeLocalRun(ctx context.Context, ln *net.UnixListener, max int, h LocalRunHandler, log *slog.Logger) error {
	ln.SetUnlinkOnClose(true)
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer ln.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, max)
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("local run socket: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			select {
			case slots <- struct{}{}:
				defer func() { <-slots }()
				serveLocalConn(ctx, c, h, log)
			default:
				_ = writeFrame(c, LocalRunReply{Refused: "the daemon runs as many local runs as it may"})
			}
		}()
	}
}

// serveLocalConn serves one connection.
func serveLocalConn(ctx context.Context, c *net.UnixConn, h LocalRunHandler, log *slog.Logger) {
	if err := checkPeer(c); err != nil {
		log.Warn("local run: refused a caller", "err", err)
		_ = writeFrame(c, LocalRunReply{Refused: err.Error()})
		return
	}
	r, rest, err := readRequest(c)
	if err != nil {
		log.Warn("local run: bad request", "err", err)
		_ = writeFrame(c, LocalRunReply{Refused: err.Error()})
		return
	}
	defer r.close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sigs := make(chan syscall.Signal, 8)
	r.Signals = sigs
	var accepted sync.Once
	var acceptErr error
	r.accept = func() error {
		accepted.Do(func() { acceptErr = writeFrame(c, LocalRunReply{Accepted: true}) })
		return acceptErr
	}
	// The caller's further frames are signals; its hanging up ends the
	// run, as the end of a moat run process would.
	go func() {
		defer cancel()
		defer close(sigs)
		for {
			var s LocalRunSignal
			if err := readFrame(rest, &s, 64); err != nil {
				return
			}
			switch syscall.Signal(s.Signal) {
			case syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT:
				select {
				case sigs <- syscall.Signal(s.Signal):
				default:
				}
			}
		}
	}()
	code, err := h(ctx, r)
	if errors.Is(err, ErrLocalRunRefused) {
		_ = writeFrame(c, LocalRunReply{Refused: err.Error()})
		return
	}
	if err != nil {
		log.Error("local run", "err", err)
		code = 125
	}
	if err := r.accept(); err != nil {
		return
	}
	_ = writeFrame(c, LocalRunReply{Exit: code})
}

// checkPeer accepts only a peer running as the daemon's own user.
func checkPeer(c *net.UnixConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return fmt.Errorf("peer credentials: %w", err)
	}
	if cerr != nil {
		return fmt.Errorf("peer credentials: %w", cerr)
	}
	if int(cred.Uid) != os.Geteuid() {
		return fmt.Errorf("uid %d may not use the local run socket", cred.Uid)
	}
	return nil
}

// readRequest reads the request frame and its descriptors; rd reads the
// caller's further frames.
func readRequest(c *net.UnixConn) (r *LocalRun, rd io.Reader, err error) {
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(maxLocalRunFDs*4))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the request: %w", err)
	}
	files, err := takeFiles(oob[:oobn])
	defer func() {
		if err != nil {
			for _, f := range files {
				f.Close()
			}
		}
	}()
	if err != nil {
		return nil, nil, err
	}
	if flags&unix.MSG_CTRUNC != 0 {
		return nil, nil, errors.New("too many descriptors")
	}
	r = &LocalRun{}
	rd = io.MultiReader(bytes.NewReader(buf[:n]), c)
	if err = readFrame(rd, &r.LocalRunRequest, MaxLocalRunRequest); err != nil {
		return nil, nil, fmt.Errorf("reading the request: %w", err)
	}
	want := 3
	if r.TTY {
		want = 4
	}
	if len(files) != want {
		err = fmt.Errorf("want %d descriptors, got %d", want, len(files))
		return nil, nil, err
	}
	r.Stdin, r.Stdout, r.Stderr = files[0], files[1], files[2]
	if r.TTY {
		r.Terminal = files[3]
	}
	return r, rd, nil
}

// takeFiles returns the descriptors of SCM_RIGHTS messages in oob (the
// kernel set close-on-exec on them: MSG_CMSG_CLOEXEC).
func takeFiles(oob []byte) ([]*os.File, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("descriptors: %w", err)
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			unix.CloseOnExec(fd)
			files = append(files, os.NewFile(uintptr(fd), "local-run"))
		}
	}
	return files, nil
}

// close closes the caller's descriptors.
func (r *LocalRun) close() {
	for _, f := range []*os.File{r.Stdin, r.Stdout, r.Stderr, r.Terminal} {
		if f != nil {
			f.Close()
		}
	}
}

// WriteLocalRunFrame writes v as one frame.
func WriteLocalRunFrame(w io.Writer, v any) error { return writeFrame(w, v) }

// ReadLocalRunFrame reads one frame of at most max bytes into v.
func ReadLocalRunFrame(r io.Reader, v any, max int) error { return readFrame(r, v, max) }

// EncodeLocalRunFrame returns v as one frame's bytes.
func EncodeLocalRunFrame(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 4, 4+len(b))
	binary.BigEndian.PutUint32(out, uint32(len(b)))
	return append(out, b...), nil
}

func writeFrame(w io.Writer, v any) error {
	b, err := EncodeLocalRunFrame(v)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

func readFrame(r io.Reader, v any, max int) error {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > uint32(max) {
		return fmt.Errorf("frame of %d bytes, more than %d", n, max)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
