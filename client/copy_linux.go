package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/fstree"
)

// maxCopyDepth bounds the directory levels of a tree copied to or from
// the host.
const maxCopyDepth = 4096

// hostOptions are the options of fstree's side of a copy: the bounds of
// opt (none when zero), and its Skipped told of host paths below root.
func hostOptions(opt *CopyOptions, root string) fstree.HostOptions {
	lim := fstree.Limits{MaxBytes: opt.MaxBytes, MaxEntries: opt.MaxEntries, MaxDepth: maxCopyDepth}
	if lim.MaxBytes <= 0 {
		lim.MaxBytes = math.MaxInt64
	}
	if lim.MaxEntries <= 0 {
		lim.MaxEntries = math.MaxInt
	}
	h := fstree.HostOptions{Limits: lim}
	if opt.Skipped != nil {
		h.Skipped = func(rel, why string) { opt.Skipped(filepath.Join(root, filepath.FromSlash(rel)), why) }
	}
	return h
}

// hostError is err, the failure to use the host path p, as a
// *HostPathError.
func hostError(p string, err error) error {
	var se *fstree.SymlinkError
	if errors.As(err, &se) {
		return &HostPathError{Path: p, Link: se.Link, Err: ErrHostSymlink}
	}
	return &HostPathError{Path: p, Err: err}
}

// openHost opens the host path p with flags (O_PATH|O_DIRECTORY, say)
// following no symlink, in any component or at its end; a relative p
// starts at the working directory.
func openHost(p string, flags int) (int, error) {
	fd, err := fstree.OpenPath(unix.AT_FDCWD, p, flags)
	if err != nil {
		return -1, hostError(p, err)
	}
	return fd, nil
}

// hostEntry is what a host path names: its parent directory's
// descriptor and its name there (name "" when fd is the entry itself, a
// directory).
type hostEntry struct {
	fd   int
	name string
}

// openHostParent opens the parent of the host path p and returns it with
// p's last component, which it does not resolve. A path whose last
// component is ".", ".." or "/" has none: it names a directory, opened
// itself.
func openHostParent(p string) (hostEntry, error) {
	clean := filepath.Clean(p)
	base := filepath.Base(clean)
	if base == "." || base == ".." || base == "/" {
		fd, err := openHost(clean, unix.O_PATH|unix.O_DIRECTORY)
		return hostEntry{fd: fd}, err
	}
	fd, err := fstree.OpenPath(unix.AT_FDCWD, filepath.Dir(clean), unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return hostEntry{fd: -1}, hostError(p, err)
	}
	return hostEntry{fd: fd, name: base}, nil
}

func (s *Sandbox) copyIn(ctx context.Context, src, dst string, opt *CopyOptions) (*CopyResult, error) {
	// A trailing / names a directory: it is opened as one, refusing a
	// symlink there like anywhere else.
	var h hostEntry
	var err error
	if strings.HasSuffix(src, "/") {
		h.fd, err = openHost(src, unix.O_PATH|unix.O_DIRECTORY)
	} else {
		h, err = openHostParent(src)
	}
	if err != nil {
		return nil, err
	}
	defer unix.Close(h.fd)
	var st unix.Stat_t
	if h.name == "" {
		err = unix.Fstat(h.fd, &st)
	} else {
		err = unix.Fstatat(h.fd, h.name, &st, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err != nil {
		return nil, &HostPathError{Path: src, Err: err}
	}
	intoDir := strings.HasSuffix(dst, "/")
	if fi, err := s.Stat(ctx, dst); err == nil {
		intoDir = fi.Type == "dir"
	} else if !IsNotFound(err) {
		return nil, err
	}
	abs, err := filepath.Abs(src)
	if err != nil {
		return nil, err
	}
	res := &CopyResult{Host: abs}
	name := filepath.Base(abs)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		if intoDir {
			dst = path.Join(dst, name)
		}
		b, mode, err := readHostFile(h.fd, h.name)
		if err != nil {
			return nil, &HostPathError{Path: src, Err: err}
		}
		res.Path, res.Bytes = dst, int64(len(b))
		if err := s.WriteFile(ctx, dst, b, mode); err != nil {
			return nil, err
		}
		return res, nil
	case unix.S_IFDIR, unix.S_IFLNK:
		dir := dst
		if !intoDir {
			dir, name = path.Dir(dst), path.Base(dst)
		}
		if name == "/" || name == "." || name == ".." {
			return nil, &copyPathError{fmt.Sprintf("cannot copy a directory to %q", dst)}
		}
		res.Path, res.Archive = path.Join(dir, name), true
		cw := &countingWriter{}
		err := pipe(func(w io.Writer) error {
			cw.w = w
			if _, err := fstree.WriteTar(ctx, cw, h.fd, h.name, name, hostOptions(opt, src)); err != nil {
				return hostError(src, err)
			}
			return nil
		}, func(r io.Reader) error {
			return s.Upload(ctx, dir, r)
		})
		if err != nil {
			return nil, err
		}
		res.Bytes = cw.n
		return res, nil
	}
	return nil, fmt.Errorf("%s is neither a regular file, a directory nor a symlink (FIFOs, sockets and devices are not copied)", src)
}

// readHostFile reads the regular file name in dir, and its permissions.
func readHostFile(dir int, name string) ([]byte, os.FileMode, error) {
	f, st, err := fstree.OpenRegular(dir, name)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	return b, os.FileMode(st.Mode & 0o777), err
}

func (s *Sandbox) copyOut(ctx context.Context, src, dst string, opt *CopyOptions) (*CopyResult, error) {
	dir, name, into, err := hostTarget(dst, path.Base(src))
	if err != nil {
		return nil, err
	}
	defer unix.Close(dir)
	host := dst
	if into {
		host = filepath.Join(dst, name)
	}
	abs, err := filepath.Abs(host)
	if err != nil {
		return nil, err
	}
	res := &CopyResult{Path: src, Host: abs, Archive: true}
	cw := &countingWriter{}
	err = pipe(func(w io.Writer) error {
		cw.w = w
		return s.Download(ctx, src, cw)
	}, func(r io.Reader) error {
		_, err := fstree.ExtractInto(ctx, r, dir, name, hostOptions(opt, host))
		var se *fstree.SymlinkError
		if errors.As(err, &se) {
			return &HostPathError{Path: host, Link: filepath.Clean(host), Err: ErrHostSymlink}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	res.Bytes = cw.n
	return res, nil
}

// hostTarget finds where a copy to the host path dst goes: into dst
// under srcBase when dst is an existing directory, else as dst. It
// returns the descriptor of the directory that gets the new entry, and
// the entry's name there, and into set when that is dst itself (the
// entry goes into it). No symlink is followed: one in dst, the last
// component included, is an error.
func hostTarget(dst, srcBase string) (dir int, name string, into bool, err error) {
	fd, err := openHost(dst, unix.O_PATH|unix.O_DIRECTORY)
	switch {
	case err == nil:
		if srcBase != "/" && srcBase != "." && srcBase != ".." {
			return fd, srcBase, true, nil
		}
		unix.Close(fd) // the sandbox's / (or .): copied as dst itself
	case errors.Is(err, ErrHostSymlink):
		return -1, "", false, err
	case errors.Is(err, unix.ENOTDIR) && strings.HasSuffix(dst, "/"):
		return -1, "", false, err
	case !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTDIR):
		return -1, "", false, err
	}
	clean := filepath.Clean(dst)
	base := filepath.Base(clean)
	if base == "." || base == ".." || base == "/" {
		return -1, "", false, &copyPathError{fmt.Sprintf("cannot copy to %q", dst)}
	}
	h, err := openHostParent(clean)
	if err != nil {
		return -1, "", false, err
	}
	return h.fd, h.name, false, nil
}

// countingWriter counts what it writes to w.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// errPipeStopped ends the writes of a producer whose consumer has ended.
var errPipeStopped = errors.New("the reader stopped")

// pipe runs produce, in a goroutine of its own, writing what consume
// reads. A failure of produce explains a failure best (a failed download
// leaves a truncated archive); a producer that failed only because
// consume stopped reading (ended, or closed the pipe) is not a failure.
func pipe(produce func(io.Writer) error, consume func(io.Reader) error) error {
	pr, pw := io.Pipe()
	produced := make(chan error, 1)
	go func() {
		err := produce(pw)
		pw.CloseWithError(err)
		produced <- err
	}()
	err := consume(pr)
	pr.CloseWithError(errPipeStopped) // a producer still writing stops
	if perr := <-produced; perr != nil && !errors.Is(perr, errPipeStopped) && !errors.Is(perr, io.ErrClosedPipe) {
		return perr
	}
	return err
}
