package linux

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/guest"
	"github.com/moat-sandbox/moat/sandbox"
)

// maxFilePath bounds a path handed to the agent (PATH_MAX).
const maxFilePath = 4096

// Files returns the sandbox's file operations. Each one is performed by
// the agent inside the sandbox, as the sandbox user and under its Landlock
// domain and seccomp filter; the host only validates arguments, moves
// bytes through a pipe (or a framed stream, WithFramedStreams) and maps
// the answer. It never opens a path of the sandbox itself.
func (s *linuxSandbox) Files() sandbox.Files { return &sandboxFiles{s: s} }

// sandboxFiles implements sandbox.Files over the agent's protocol.
type sandboxFiles struct{ s *linuxSandbox }

var _ sandbox.Files = (*sandboxFiles)(nil)

func fileErr(op, path, code, msg string) *sandbox.FileError {
	return &sandbox.FileError{Op: opName(op), Path: path, Code: code, Message: msg}
}

// opName is the name errors give a guest file operation: the archive
// operations by what the caller asked for (file.upload, file.download),
// never the protocol's tar_in and tar_out.
func opName(op string) string {
	switch op {
	case guest.FileTarIn:
		return "upload"
	case guest.FileTarOut:
		return "download"
	}
	return op
}

// checkArgs validates a path (and a size limit, when max is not nil) before
// anything is sent.
func checkArgs(op, path string, max *int64) error {
	switch {
	case path == "":
		return fileErr(op, path, "EINVAL", "empty path")
	case strings.IndexByte(path, 0) >= 0:
		return fileErr(op, path, "EINVAL", "path contains a NUL byte")
	case len(path) > maxFilePath:
		return fileErr(op, path[:64]+"…", "ENAMETOOLONG", fmt.Sprintf("path longer than %d bytes", maxFilePath))
	case max != nil && *max <= 0:
		return fileErr(op, path, "EINVAL", "the size limit must be positive")
	}
	return nil
}

// plusOne is max+1 without overflow: reading one byte past a limit tells
// a stream over it from one that fits.
func plusOne(max int64) int64 {
	if max == math.MaxInt64 {
		return max
	}
	return max + 1
}

// fileCall is one file operation in flight.
type fileCall struct {
	s    *linuxSandbox
	op   *guest.FileOp
	path string // as the caller gave it, for errors
	id   uint64
	ch   chan *msgWithFDs
}

// begin registers a waiter for op.
func (f *sandboxFiles) begin(ctx context.Context, op *guest.FileOp, path string) (*fileCall, error) {
	c := &fileCall{s: f.s, op: op, path: path}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if f.s.closing.Load() {
		return nil, c.closedErr(nil)
	}
	// A capture (snapshot) waits for file operations in flight, and
	// they for it: the init runs them outside the frozen cgroup.
	f.s.capture.RLock()
	id, ch, err := f.s.register()
	if err != nil {
		f.s.capture.RUnlock()
		return nil, c.closedErr(err)
	}
	c.id, c.ch = id, ch
	return c, nil
}

func (c *fileCall) end() {
	c.s.unregister(c.id)
	c.s.capture.RUnlock()
}

// closedErr: the sandbox is shut down or its init is gone.
func (c *fileCall) closedErr(cause error) error {
	if cause == nil || errors.Is(cause, sandbox.ErrClosed) {
		return fmt.Errorf("%s %s: %w", opName(c.op.Op), c.path, sandbox.ErrClosed)
	}
	return fmt.Errorf("%s %s: %w (%v)", opName(c.op.Op), c.path, sandbox.ErrClosed, cause)
}

// send hands the request to the agent with the child's end of a pipe,
// if any (none for a framed stream); the host's copy of that end is
// closed either way.
func (c *fileCall) send(child *os.File) error {
	m := &guest.Message{Type: guest.MsgFile, ID: c.id, File: c.op}
	var err error
	if child != nil {
		err = c.s.conn.Send(m, int(child.Fd()))
		child.Close()
	} else {
		err = c.s.conn.Send(m)
	}
	if err != nil {
		return c.closedErr(err)
	}
	return nil
}

// await waits for the agent's answer. When copied is not nil it also waits
// for the host's side of the stream to end; a copy that fails calls abort
// (which closes the host's end, so that the agent stops too) and its error
// is returned as copyErr. Cancelling ctx calls abort and returns ctx.Err().
func (c *fileCall) await(ctx context.Context, copied <-chan error, abort func()) (res *guest.FileResult, copyErr, err error) {
	var answered bool
	for !answered || copied != nil {
		select {
		case e := <-copied:
			copied = nil
			if e != nil {
				copyErr = e
				if abort != nil {
					abort()
				}
			}
		case mf, ok := <-c.ch:
			if !ok {
				if abort != nil {
					abort()
				}
				return nil, copyErr, c.closedErr(c.s.agentGone())
			}
			closeFDs(mf.fds)
			if mf.m.Type != guest.MsgFileDone {
				continue
			}
			answered = true
			if mf.m.Error != nil {
				err = c.agentErr(mf.m.Error)
			} else if res = mf.m.Result; res == nil {
				res = &guest.FileResult{}
			}
		case <-ctx.Done():
			if abort != nil {
				abort()
			}
			return nil, copyErr, ctx.Err()
		}
	}
	return res, copyErr, err
}

// agentErr maps the agent's report to a FileError.
func (c *fileCall) agentErr(e *guest.ErrInfo) error {
	code := e.Errno
	if code == "" {
		code = "EIO"
	}
	return fileErr(c.op.Op, c.path, code, e.Message)
}

// simple runs an operation that streams nothing.
func (f *sandboxFiles) simple(ctx context.Context, op *guest.FileOp, path string) (*guest.FileResult, error) {
	c, err := f.begin(ctx, op, path)
	if err != nil {
		return nil, err
	}
	defer c.end()
	if err := c.send(nil); err != nil {
		return nil, err
	}
	res, _, err := c.await(ctx, nil, nil)
	return res, err
}

// ReadFile returns the content of a regular file of at most max bytes.
func (f *sandboxFiles) ReadFile(ctx context.Context, path string, max int64) ([]byte, error) {
	const op = guest.FileRead
	if err := checkArgs(op, path, &max); err != nil {
		return nil, err
	}
	c, err := f.begin(ctx, &guest.FileOp{Op: op, Path: path, Max: max}, path)
	if err != nil {
		return nil, err
	}
	defer c.end()
	src, child, err := c.fromAgent()
	if err != nil {
		return nil, err
	}
	defer src.Close()
	if err := c.send(child); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	copied := make(chan error, 1)
	go func() {
		_, err := buf.ReadFrom(io.LimitReader(src, plusOne(max)))
		if err == nil && int64(buf.Len()) > max {
			err = fileErr(op, path, "ETOOBIG", fmt.Sprintf("over the limit of %d bytes", max))
		}
		copied <- err
	}()
	_, copyErr, err := c.await(ctx, copied, func() { src.Close() })
	var tooBig *sandbox.FileError
	switch {
	case errors.As(copyErr, &tooBig):
		return nil, copyErr
	case err != nil:
		return nil, err
	case copyErr != nil:
		return nil, fmt.Errorf("%s %s: %w", op, path, copyErr)
	}
	return buf.Bytes(), nil
}

// WriteFile replaces path atomically with at most max bytes from r.
//
// The content is first read whole into a host memfd: only a stream that
// ended normally within max reaches the agent, so a reader that fails or
// a context cancelled half-way can never commit a truncated file (the
// agent takes the end of its pipe as the end of the content).
func (f *sandboxFiles) WriteFile(ctx context.Context, path string, r io.Reader, mode fs.FileMode, max int64) (int64, error) {
	const op = guest.FileWrite
	if err := checkArgs(op, path, &max); err != nil {
		return 0, err
	}
	if r == nil {
		r = bytes.NewReader(nil)
	}
	if f.s.closing.Load() {
		return 0, fmt.Errorf("%s %s: %w", op, path, sandbox.ErrClosed)
	}
	spool, size, err := spoolInput(ctx, r, max)
	if err != nil {
		var fe *sandbox.FileError
		if errors.As(err, &fe) {
			fe.Op, fe.Path = op, path
			return 0, fe
		}
		return 0, fmt.Errorf("%s %s: %w", opName(op), path, err)
	}
	c, err := f.begin(ctx, &guest.FileOp{Op: op, Path: path, Mode: uint32(mode.Perm()), Max: max}, path)
	if err != nil {
		spool.Close()
		return 0, err
	}
	defer c.end()
	dst, child, err := c.toAgent()
	if err != nil {
		spool.Close()
		return 0, err
	}
	if err := c.send(child); err != nil {
		dst.Close()
		spool.Close()
		return 0, err
	}
	// The copy is never cut short: once started, the agent receives the
	// whole content, or an error from its end.
	go func() {
		_, _ = io.Copy(dst, spool)
		dst.Close()
		spool.Close()
	}()
	res, _, err := c.await(ctx, nil, nil)
	if c.op.Streams {
		// The agent has ended the stream before answering; a copy
		// still waiting for credit stops.
		dst.Close()
	}
	if err != nil {
		return 0, err
	}
	if res.Bytes != size {
		return res.Bytes, fileErr(op, path, "EIO", fmt.Sprintf("wrote %d bytes of %d", res.Bytes, size))
	}
	return res.Bytes, nil
}

// spoolInput reads r (at most max bytes) into a memfd and returns it
// rewound, with its size. Cancelling ctx stops the wait, not a read of r
// already in progress.
func spoolInput(ctx context.Context, r io.Reader, max int64) (*os.File, int64, error) {
	fd, err := unix.MemfdCreate("moat-write", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, 0, fmt.Errorf("spool: %w", err)
	}
	spool := os.NewFile(uintptr(fd), "moat-write")
	type result struct {
		n   int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := io.Copy(spool, io.LimitReader(r, plusOne(max)))
		done <- result{n, err}
	}()
	var res result
	select {
	case res = <-done:
	case <-ctx.Done():
		spool.Close()
		return nil, 0, ctx.Err()
	}
	switch {
	case res.err != nil:
		spool.Close()
		return nil, 0, fmt.Errorf("reading the content: %w", res.err)
	case res.n > max:
		spool.Close()
		return nil, 0, fileErr("", "", "ETOOBIG", fmt.Sprintf("more than the limit of %d bytes", max))
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		spool.Close()
		return nil, 0, fmt.Errorf("spool: %w", err)
	}
	return spool, res.n, nil
}

// ReadDir lists a directory, sorted by name.
func (f *sandboxFiles) ReadDir(ctx context.Context, path string) ([]sandbox.FileInfo, error) {
	if err := checkArgs(guest.FileList, path, nil); err != nil {
		return nil, err
	}
	res, err := f.simple(ctx, &guest.FileOp{Op: guest.FileList, Path: path}, path)
	if err != nil {
		return nil, err
	}
	out := make([]sandbox.FileInfo, len(res.Entries))
	for i := range res.Entries {
		out[i] = fileInfo(&res.Entries[i])
	}
	return out, nil
}

// Stat describes path without following a final symlink.
func (f *sandboxFiles) Stat(ctx context.Context, path string) (*sandbox.FileInfo, error) {
	if err := checkArgs(guest.FileStat, path, nil); err != nil {
		return nil, err
	}
	res, err := f.simple(ctx, &guest.FileOp{Op: guest.FileStat, Path: path}, path)
	if err != nil {
		return nil, err
	}
	if res.Info == nil {
		return nil, fileErr(guest.FileStat, path, "EIO", "the agent returned no description")
	}
	fi := fileInfo(res.Info)
	return &fi, nil
}

func fileInfo(e *guest.FileEntry) sandbox.FileInfo {
	return sandbox.FileInfo{Name: e.Name, Type: e.Type, Size: e.Size, Mode: e.Mode,
		ModTime: time.Unix(0, e.MtimeNs), Target: e.Target}
}

// Mkdir creates a directory, and its parents when parents is set.
func (f *sandboxFiles) Mkdir(ctx context.Context, path string, mode fs.FileMode, parents bool) error {
	if err := checkArgs(guest.FileMkdir, path, nil); err != nil {
		return err
	}
	_, err := f.simple(ctx, &guest.FileOp{Op: guest.FileMkdir, Path: path, Mode: uint32(mode.Perm()), Recursive: parents}, path)
	return err
}

// Remove deletes a file, a symlink, an empty directory or, with
// recursive, a tree (symlinks in it are removed, never followed).
func (f *sandboxFiles) Remove(ctx context.Context, path string, recursive bool) error {
	if err := checkArgs(guest.FileRemove, path, nil); err != nil {
		return err
	}
	_, err := f.simple(ctx, &guest.FileOp{Op: guest.FileRemove, Path: path, Recursive: recursive}, path)
	return err
}

// Rename moves from to to.
func (f *sandboxFiles) Rename(ctx context.Context, from, to string) error {
	if err := checkArgs(guest.FileMove, from, nil); err != nil {
		return err
	}
	if err := checkArgs(guest.FileMove, to, nil); err != nil {
		return err
	}
	_, err := f.simple(ctx, &guest.FileOp{Op: guest.FileMove, Path: from, To: to}, from)
	return err
}

// PutTar extracts a tar stream of at most max unpacked bytes under dir.
// The stream goes straight to the agent; if r fails or ctx is cancelled
// the agent sees a truncated archive and stops (entries already extracted
// stay).
func (f *sandboxFiles) PutTar(ctx context.Context, dir string, r io.Reader, max int64) error {
	const op = guest.FileTarIn
	if err := checkArgs(op, dir, &max); err != nil {
		return err
	}
	if r == nil {
		return fileErr(op, dir, "EINVAL", "no archive")
	}
	c, err := f.begin(ctx, &guest.FileOp{Op: op, Path: dir, Max: max}, dir)
	if err != nil {
		return err
	}
	defer c.end()
	dst, child, err := c.toAgent()
	if err != nil {
		return err
	}
	if err := c.send(child); err != nil {
		dst.Close()
		return err
	}
	readErr := make(chan error, 1)
	go func() {
		readErr <- copyStream(dst, r)
		dst.Close()
	}()
	_, _, err = c.await(ctx, nil, func() { dst.Close() })
	if c.op.Streams {
		dst.Close() // as in WriteFile
	}
	// A failed read of r explains a truncated archive better than the
	// agent can. It was recorded before the pipe closed, so before the
	// agent could answer.
	select {
	case rerr := <-readErr:
		if rerr != nil && err != nil {
			return fmt.Errorf("%s %s: reading the archive: %w", opName(op), dir, rerr)
		}
	default:
	}
	return err
}

// copyStream copies r to w and returns only r's failure: a write error
// means the agent has stopped reading, and its answer says why.
func copyStream(w io.Writer, r io.Reader) error {
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return nil
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// GetTar writes path (a file or a tree) as a tar stream to w, with at most
// max bytes of file content.
func (f *sandboxFiles) GetTar(ctx context.Context, path string, w io.Writer, max int64) error {
	const op = guest.FileTarOut
	if err := checkArgs(op, path, &max); err != nil {
		return err
	}
	if w == nil {
		return fileErr(op, path, "EINVAL", "no writer")
	}
	c, err := f.begin(ctx, &guest.FileOp{Op: op, Path: path, Max: max}, path)
	if err != nil {
		return err
	}
	defer c.end()
	src, child, err := c.fromAgent()
	if err != nil {
		return err
	}
	defer src.Close()
	if err := c.send(child); err != nil {
		return err
	}
	copied := make(chan error, 1)
	go func() {
		_, err := io.Copy(w, src)
		copied <- err
	}()
	_, copyErr, err := c.await(ctx, copied, func() { src.Close() })
	switch {
	case copyErr != nil && (err == nil || ctx.Err() == nil):
		return fmt.Errorf("%s %s: writing the archive: %w", opName(op), path, copyErr)
	case err != nil:
		return err
	}
	return nil
}
