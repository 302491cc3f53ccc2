package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/display"
	"github.com/moat-sandbox/moat/fstree"
	"github.com/moat-sandbox/moat/output"
	"github.com/moat-sandbox/moat/sandbox"
)

// moat sandbox cp.
//
// A sandbox writes the host directories bound into it (its workspace, its
// --rw binds), and from the host those are ordinary directories, where the
// sandbox can leave symlinks. So on the host side of a copy moat follows
// no symlink at all, in either direction:
//
//   - The host path is opened with openat2(RESOLVE_NO_SYMLINKS) from the
//     working directory (a relative path) or from / (an absolute one): a
//     symlink in any component is refused, the last one included, and a
//     magic link (/proc/self/cwd, /dev/stdout) as well. The client cannot
//     tell from the daemon which host directories a sandbox can write, so
//     the rule holds for every component, not only for those below a
//     workspace.
//   - What is written then goes through that directory's descriptor: the
//     new entry is created with O_NOFOLLOW (O_EXCL inside a tree), its
//     directories are opened with openat2(RESOLVE_BENEATH|
//     RESOLVE_NO_SYMLINKS), and a symlink of the archive is written as a
//     link and never followed by a later entry.
//   - What is read is lstat-ed (fstatat(AT_SYMLINK_NOFOLLOW)) relative to
//     its parent's descriptor, opened with O_NOFOLLOW|O_NONBLOCK and
//     checked again with fstat, so an entry swapped for a symlink or a
//     FIFO between the walk and the open is skipped, never followed or
//     waited on. FIFOs, sockets and devices are never opened.

const cpLong = `Copy a file or a directory between the host and a sandbox. One side is
SANDBOX:PATH (PATH absolute, or relative to /workspace), the other a host
path, or - for this command's stdin (a file's content) or stdout.

As with cp -r: when the destination is an existing directory the source is
copied into it under its own name, otherwise it is copied to the
destination's name. Directories travel as tar archives; symlinks are
copied as symlinks, FIFOs, sockets and devices are skipped.

On the host, moat follows no symlink: a sandbox can plant them in a
workspace bound from the host. A host path with a symlink in any component
(a relative path starts at the current directory) is refused: name the
real path instead. A source that is itself a symlink is copied as a
symlink (with a trailing /, it is refused). A destination that is a
symlink is refused, never written through; an existing file there is
overwritten in place. Inside a copied directory, an entry replaces what
is there (a symlink included, which is removed, not followed), and no
link of the archive is followed by a later entry.

With --json, print a summary object when the copy is done: direction
("in" to the sandbox, "out" to the host), sandbox, path (in the sandbox),
host (the host path, absolute, or -), archive (whether it went as a tar
archive: directories, symlinks, and every copy out to a host path) and
bytes (the file's size, or the archive's). --json cannot go with - as
the destination, whose content is stdout.

Examples:
  moat sandbox cp ./src sb-123:/workspace/
  moat sandbox cp sb-123:/workspace/out/report.json .
  moat sandbox cp - sb-123:/workspace/input.txt < input.txt`

// cpSummary is what cp --json prints.
type cpSummary struct {
	Direction string `json:"direction"` // in (to the sandbox) or out
	Sandbox   string `json:"sandbox"`
	Path      string `json:"path"` // in the sandbox
	Host      string `json:"host"` // absolute, or - (stdin, stdout)
	Archive   bool   `json:"archive"`
	Bytes     int64  `json:"bytes"`
}

func sbCopy(sio sandboxIO) *command {
	var asJSON bool
	return &command{
		name:  "cp",
		usage: "[--json] SRC DST   (one of them SANDBOX:PATH)",
		short: "Copy a file or directory between the host and a sandbox",
		long:  cpLong,
		setup: func(fl *pflag.FlagSet) {
			fl.BoolVar(&asJSON, "json", false, "print a summary of the copy as JSON")
		},
		run: func(ctx context.Context, args []string) error {
			if len(args) != 2 {
				return usageError("cp takes a source and a destination")
			}
			srcID, srcPath, srcRemote := splitRemote(args[0])
			dstID, dstPath, dstRemote := splitRemote(args[1])
			if srcRemote == dstRemote {
				return usageError("cp: exactly one of SRC and DST must be SANDBOX:PATH")
			}
			if asJSON && args[1] == "-" {
				return usageError("cp: --json cannot go with - as the destination (the file's content is stdout)")
			}
			if err := cpSupported(); err != nil {
				return err
			}
			sum := &cpSummary{Direction: "in", Sandbox: dstID}
			err := withClient(func(c *client.Client) error {
				ctx, stop := interruptible(ctx)
				defer stop()
				if dstRemote {
					return copyIn(ctx, sio, c.Sandbox(dstID), args[0], dstPath, sum)
				}
				sum.Direction, sum.Sandbox = "out", srcID
				return copyOut(ctx, sio, c.Sandbox(srcID), srcPath, args[1], sum)
			})
			if err != nil || !asJSON {
				return err
			}
			return printJSONTo(sio.stdout, sum)
		},
	}
}

// splitRemote reads SANDBOX:PATH; a host path with a colon can be written
// ./a:b.
func splitRemote(s string) (id, p string, ok bool) {
	id, p, ok = strings.Cut(s, ":")
	if !ok || id == "" || strings.Contains(id, "/") {
		return "", "", false
	}
	if p == "" {
		p = sandbox.WorkspaceDir
	}
	return id, p, true
}

// maxHostDepth bounds the directory levels of a tree copied to or from
// the host, and maxEntryName the length of an archive entry's name.
const (
	maxHostDepth = 4096
	maxEntryName = 4096
)

// errHostSymlink marks a host path refused because a symlink is on it.
var errHostSymlink = errors.New("symlink")

// hostPathError is a host path that cannot be used: Path is the whole
// path as given, Link the component that is a symlink (with errHostSymlink).
type hostPathError struct {
	Path, Link string
	Err        error
}

func (e *hostPathError) Error() string {
	if errors.Is(e.Err, errHostSymlink) {
		if e.Link == filepath.Clean(e.Path) {
			return fmt.Sprintf("%s is a symlink: moat sandbox cp does not follow symlinks on the host (a sandbox can plant them)", e.Path)
		}
		return fmt.Sprintf("%s: %s is a symlink: moat sandbox cp does not follow symlinks on the host (a sandbox can plant them); name the real path", e.Path, e.Link)
	}
	return fmt.Sprintf("%s: %v", e.Path, e.Err)
}

func (e *hostPathError) Unwrap() error { return e.Err }

// openHost opens the host path p with flags (O_PATH|O_DIRECTORY or
// O_RDONLY|O_DIRECTORY) following no symlink, in any component or at the
// end. A relative p starts at the directory dirfd (unix.AT_FDCWD for the
// command). p is cleaned lexically first; its leading ".." components
// are walked with plain openat (".." is never a symlink).
func openHost(dirfd int, p string, flags int) (int, error) {
	clean := filepath.Clean(p)
	rel, start := clean, dirfd
	owned := -1 // start, when opened here
	defer func() {
		if owned >= 0 {
			unix.Close(owned)
		}
	}()
	step := func(at int, name string) error {
		fd, err := unix.Openat(at, name, oPath|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return &hostPathError{Path: p, Err: err}
		}
		if owned >= 0 {
			unix.Close(owned)
		}
		owned, start = fd, fd
		return nil
	}
	if filepath.IsAbs(clean) {
		if err := step(unix.AT_FDCWD, "/"); err != nil {
			return -1, err
		}
		rel = strings.TrimLeft(clean, "/")
	}
	for rel == ".." || strings.HasPrefix(rel, "../") {
		if err := step(start, ".."); err != nil {
			return -1, err
		}
		rel = strings.TrimPrefix(rel[2:], "/")
	}
	if rel == "" {
		rel = "."
	}
	fd, err := fstree.OpenBeneath(start, rel, flags)
	if err == nil {
		return fd, nil
	}
	e := &hostPathError{Path: p, Err: err}
	if err == unix.ELOOP || err == unix.ENOTDIR || err == unix.EXDEV {
		if link, ok := symlinkOnPath(start, rel); ok {
			e.Err, e.Link = errHostSymlink, strings.TrimSuffix(clean, rel)+link
		}
	}
	return -1, e
}

// symlinkOnPath finds the first component of rel (beneath dirfd) that is
// a symlink, if any.
func symlinkOnPath(dirfd int, rel string) (string, bool) {
	cur, err := unix.Openat(dirfd, ".", oPath|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", false
	}
	defer func() { unix.Close(cur) }()
	comps := strings.Split(rel, "/")
	for i, c := range comps {
		var st unix.Stat_t
		if unix.Fstatat(cur, c, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			return "", false
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			return strings.Join(comps[:i+1], "/"), true
		case unix.S_IFDIR:
		default:
			return "", false
		}
		next, err := fstree.OpenBeneath(cur, c, oPath|unix.O_DIRECTORY)
		if err != nil {
			return "", false
		}
		unix.Close(cur)
		cur = next
	}
	return "", false
}

// hostEntry is what a host path names: its parent directory's
// descriptor and its name there (name "" when fd is the entry itself, a
// directory).
type hostEntry struct {
	fd   int
	name string
}

func (h hostEntry) close() { unix.Close(h.fd) }

// openHostParent opens the parent of the host path p (cleaned) and
// returns it with p's last component, which it does not resolve. A path
// whose last component is ".", ".." or "/" has none: it names a directory,
// opened itself.
func openHostParent(p string) (hostEntry, error) {
	clean := filepath.Clean(p)
	base := filepath.Base(clean)
	if base == "." || base == ".." || base == "/" {
		fd, err := openHost(unix.AT_FDCWD, clean, oPath|unix.O_DIRECTORY)
		return hostEntry{fd: fd}, err
	}
	fd, err := openHost(unix.AT_FDCWD, filepath.Dir(clean), oPath|unix.O_DIRECTORY)
	if err != nil {
		var e *hostPathError
		if errors.As(err, &e) {
			e.Path = p
		}
		return hostEntry{fd: -1}, err
	}
	return hostEntry{fd: fd, name: base}, nil
}

// copyIn copies the host path src (or stdin) to dst in the sandbox and
// says what it did in sum.
func copyIn(ctx context.Context, sio sandboxIO, sb *client.Sandbox, src, dst string, sum *cpSummary) error {
	if src == "-" {
		b, err := io.ReadAll(sio.stdin)
		if err != nil {
			return fmt.Errorf("reading standard input: %w", err)
		}
		sum.Host, sum.Path, sum.Bytes = "-", dst, int64(len(b))
		return sb.WriteFile(ctx, dst, b, 0)
	}
	// A trailing / names a directory: it is opened as one, refusing a
	// symlink there like anywhere else.
	var h hostEntry
	var err error
	if strings.HasSuffix(src, "/") {
		h.fd, err = openHost(unix.AT_FDCWD, src, oPath|unix.O_DIRECTORY)
	} else {
		h, err = openHostParent(src)
	}
	if err != nil {
		return err
	}
	defer h.close()
	var st unix.Stat_t
	if h.name == "" {
		err = unix.Fstat(h.fd, &st)
	} else {
		err = unix.Fstatat(h.fd, h.name, &st, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err != nil {
		return &hostPathError{Path: src, Err: err}
	}
	intoDir := strings.HasSuffix(dst, "/")
	if fi, err := sb.Stat(ctx, dst); err == nil {
		intoDir = fi.Type == "dir"
	} else if !client.IsNotFound(err) {
		return err
	}
	abs, err := filepath.Abs(src)
	if err != nil {
		return err
	}
	sum.Host = abs
	name := filepath.Base(abs)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		if intoDir {
			dst = path.Join(dst, name)
		}
		b, mode, err := readHostFile(h.fd, h.name)
		if err != nil {
			return &hostPathError{Path: src, Err: err}
		}
		sum.Path, sum.Bytes = dst, int64(len(b))
		return sb.WriteFile(ctx, dst, b, mode)
	case unix.S_IFDIR, unix.S_IFLNK:
		dir := dst
		if !intoDir {
			dir, name = path.Dir(dst), path.Base(dst)
		}
		if name == "/" || name == "." || name == ".." {
			return usageError("cp: cannot copy a directory to %q", dst)
		}
		sum.Path, sum.Archive = path.Join(dir, name), true
		cw := &output.CountingWriter{}
		err := pipe(func(w io.Writer) error {
			cw.W = w
			return writeTar(cw, h.fd, h.name, name, src, sio.stderr)
		}, func(r io.Reader) error {
			return sb.Upload(ctx, dir, r)
		})
		sum.Bytes = cw.N
		return err
	}
	return fmt.Errorf("%s is neither a regular file, a directory nor a symlink (FIFOs, sockets and devices are not copied)", src)
}

// openRegular opens name in dir for reading: no symlink is followed, a
// FIFO does not block the open, and anything but a regular file (should
// the entry have been swapped since it was looked at) is refused.
func openRegular(dir int, name string) (*os.File, *unix.Stat_t, error) {
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, nil, errors.New("not a regular file (it was replaced while being copied)")
	}
	return os.NewFile(uintptr(fd), name), &st, nil
}

// readHostFile reads the regular file name in dir, and its permissions.
func readHostFile(dir int, name string) ([]byte, os.FileMode, error) {
	f, st, err := openRegular(dir, name)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	return b, os.FileMode(st.Mode & 0o777), err
}

// archiver writes a host tree as a tar stream.
type archiver struct {
	tw   *tar.Writer
	warn io.Writer
}

// writeTar writes the host entry name in the directory dir (the
// directory itself when name is "") as a tar stream whose entries are
// named under entry; host is its path, for messages. A symlink is stored
// as one, FIFOs, sockets and devices below the top are skipped with a
// warning, and nothing is ever followed.
func writeTar(w io.Writer, dir int, name, entry, host string, warn io.Writer) error {
	a := &archiver{tw: tar.NewWriter(w), warn: warn}
	if name == "" {
		fd, err := unix.Openat(dir, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return &hostPathError{Path: host, Err: err}
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return &hostPathError{Path: host, Err: err}
		}
		if err := a.dir(fd, &st, entry, host, 0); err != nil {
			return err
		}
	} else if err := a.add(dir, name, entry, host, 0); err != nil {
		return err
	}
	return a.tw.Close()
}

// header is the tar header of a host entry, without owners.
func header(st *unix.Stat_t, entry string) *tar.Header {
	return &tar.Header{Name: entry, Mode: int64(st.Mode & 0o777), ModTime: time.Unix(st.Mtim.Sec, 0)}
}

// add writes the entry name of the directory dir, and what is below it.
// At depth 0 (the source itself) anything amiss is an error; below, an
// entry that vanished or changed type meanwhile is skipped with a
// warning.
func (a *archiver) add(dir int, name, entry, host string, depth int) error {
	skip := func(err error) error {
		if depth == 0 {
			return &hostPathError{Path: host, Err: err}
		}
		fmt.Fprintf(a.warn, "moat: skipping %s: %s\n", display.String(host), display.String(err.Error()))
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return skip(err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		f, st, err := openRegular(dir, name)
		if err != nil {
			return skip(err)
		}
		defer f.Close()
		h := header(st, entry)
		h.Typeflag, h.Size = tar.TypeReg, st.Size
		if err := a.tw.WriteHeader(h); err != nil {
			return err
		}
		n, err := io.CopyN(a.tw, f, st.Size)
		if err == io.EOF {
			// The file shrank while being read: pad, as tar does.
			_, err = io.CopyN(a.tw, zeros{}, st.Size-n)
		}
		if err != nil {
			return fmt.Errorf("%q: %w", host, err)
		}
		return nil
	case unix.S_IFLNK:
		target, err := readlinkAt(dir, name)
		if err != nil {
			return skip(err)
		}
		h := header(&st, entry)
		h.Typeflag, h.Linkname = tar.TypeSymlink, target
		return a.tw.WriteHeader(h)
	case unix.S_IFDIR:
		fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return skip(err)
		}
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return skip(err)
		}
		return a.dir(fd, &st, entry, host, depth)
	}
	return skip(errors.New("not a file, directory or symlink (FIFOs, sockets and devices are not copied)"))
}

// dir writes the directory fd (which it closes) and its entries, sorted
// by name.
func (a *archiver) dir(fd int, st *unix.Stat_t, entry, host string, depth int) error {
	f := os.NewFile(uintptr(fd), host)
	defer f.Close()
	if depth >= maxHostDepth {
		return fmt.Errorf("%q: deeper than %d levels", host, maxHostDepth)
	}
	h := header(st, entry+"/")
	h.Typeflag = tar.TypeDir
	if err := a.tw.WriteHeader(h); err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("%q: %w", host, err)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := a.add(fd, n, entry+"/"+n, filepath.Join(host, n), depth+1); err != nil {
			return err
		}
	}
	return nil
}

// readlinkAt reads the symlink name in dir.
func readlinkAt(dir int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dir, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
		if size >= 1<<16 {
			return "", unix.ENAMETOOLONG
		}
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// copyOut copies src of the sandbox to the host path dst (or stdout) and
// says what it did in sum.
func copyOut(ctx context.Context, sio sandboxIO, sb *client.Sandbox, src, dst string, sum *cpSummary) error {
	sum.Path = src
	if dst == "-" {
		b, err := sb.ReadFile(ctx, src)
		if err != nil {
			return err
		}
		sum.Host, sum.Bytes = "-", int64(len(b))
		_, err = sio.stdout.Write(b)
		return err
	}
	dir, name, into, err := hostTarget(dst, path.Base(src))
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	host := dst
	if into {
		host = filepath.Join(dst, name)
	}
	if sum.Host, err = filepath.Abs(host); err != nil {
		return err
	}
	sum.Archive = true
	cw := &output.CountingWriter{}
	err = pipe(func(w io.Writer) error {
		cw.W = w
		return sb.Download(ctx, src, cw)
	}, func(r io.Reader) error {
		return extractTar(r, dir, name, sio.stderr)
	})
	sum.Bytes = cw.N
	return err
}

// hostTarget finds where a copy to the host path dst goes: into dst
// under srcBase when dst is an existing directory, else as dst. It
// returns the descriptor of the directory that gets the new entry, and
// the entry's name there, and into set when that is dst itself (the
// entry goes into it). No symlink is followed: one in dst, the last
// component included, is an error.
func hostTarget(dst, srcBase string) (dir int, name string, into bool, err error) {
	fd, err := openHost(unix.AT_FDCWD, dst, oPath|unix.O_DIRECTORY)
	switch {
	case err == nil:
		if srcBase != "/" && srcBase != "." && srcBase != ".." {
			return fd, srcBase, true, nil
		}
		unix.Close(fd) // the sandbox's / (or .): copied as dst itself
	case errors.Is(err, errHostSymlink):
		return -1, "", false, err
	case errors.Is(err, unix.ENOTDIR) && strings.HasSuffix(dst, "/"):
		return -1, "", false, err
	case !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTDIR):
		return -1, "", false, err
	}
	clean := filepath.Clean(dst)
	base := filepath.Base(clean)
	if base == "." || base == ".." || base == "/" {
		return -1, "", false, usageError("cp: cannot copy to %q", dst)
	}
	h, err := openHostParent(clean)
	if err != nil {
		return -1, "", false, err
	}
	return h.fd, h.name, false, nil
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

// extractTar extracts an archive of one file or tree (every entry under
// one top name, whatever that name is) as the entry name of the host
// directory dir. The top is created with O_NOFOLLOW: a symlink there is
// an error, never written through; an existing regular file is
// overwritten in place, an existing directory merged into. Entries below
// it are placed through the top's descriptor, their directories opened
// with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS) and the entries
// themselves created with O_CREAT|O_EXCL|O_NOFOLLOW after what was there
// is removed (a directory is kept or refused), so neither a name nor a
// symlink of the archive, nor one already on the host, leads outside.
func extractTar(r io.Reader, dir int, name string, warn io.Writer) error {
	x := &extractor{dir: dir, name: name, warn: warn, root: -1}
	defer x.close()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if errors.Is(err, tar.ErrInsecurePath) && h != nil {
			err = nil // judged by entry, with the other name rules
		}
		if err != nil {
			return err
		}
		if err := x.entry(h, tr); err != nil {
			return fmt.Errorf("archive entry %q: %w", h.Name, err)
		}
	}
	if !x.placed {
		return errors.New("the daemon sent an empty archive")
	}
	return nil
}

// extractor is the state of one extractTar.
type extractor struct {
	dir    int    // the directory that gets the top entry
	name   string // the top entry's name there
	warn   io.Writer
	top    string // the first name of every entry
	placed bool   // the top entry was placed
	root   int    // the top directory once placed (a directory), else -1
}

func (x *extractor) close() {
	if x.root >= 0 {
		unix.Close(x.root)
	}
}

func (x *extractor) entry(h *tar.Header, r io.Reader) error {
	if h.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	if len(h.Name) > maxEntryName {
		return fmt.Errorf("name longer than %d bytes", maxEntryName)
	}
	if strings.IndexByte(h.Name, 0) >= 0 {
		return errors.New("NUL byte in the name")
	}
	for k := range h.PAXRecords {
		// A GNU sparse entry of a few bytes can claim terabytes of
		// holes, which would be written out as zeros.
		if strings.HasPrefix(k, "GNU.sparse.") {
			return errors.New("sparse entries are not copied")
		}
	}
	name := strings.TrimPrefix(path.Clean(strings.TrimLeft(h.Name, "/")), "./")
	first, rest, _ := strings.Cut(name, "/")
	if x.top == "" {
		x.top = first
	} else if first != x.top {
		return fmt.Errorf("not under %q", x.top)
	}
	mode := uint32(h.FileInfo().Mode().Perm())
	if rest == "" {
		if x.placed {
			return errors.New("repeats the top entry")
		}
		x.placed = true
		return x.placeTop(h, r, mode)
	}
	if x.root < 0 {
		return errors.New("comes before its directory")
	}
	if !filepath.IsLocal(rest) {
		return errors.New("leaves its directory")
	}
	if h.Typeflag != tar.TypeDir && h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeSymlink {
		fmt.Fprintf(x.warn, "moat: skipping %s: type %q is not copied\n", display.String(h.Name), h.Typeflag)
		return nil
	}
	pdir, base := path.Split(rest)
	pfd, err := x.mkdirs(strings.TrimSuffix(pdir, "/"))
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	switch h.Typeflag {
	case tar.TypeDir:
		return mkdirKeep(pfd, base, mode|0o700)
	case tar.TypeReg:
		if err := clearEntry(pfd, base); err != nil {
			return err
		}
		fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
		if err != nil {
			return err
		}
		return copyTo(fd, base, r)
	default: // tar.TypeSymlink
		if h.Linkname == "" {
			return errors.New("empty symlink target")
		}
		if err := clearEntry(pfd, base); err != nil {
			return err
		}
		return unix.Symlinkat(h.Linkname, pfd, base)
	}
}

// placeTop creates the top entry.
func (x *extractor) placeTop(h *tar.Header, r io.Reader, mode uint32) error {
	switch h.Typeflag {
	case tar.TypeDir:
		if err := mkdirKeep(x.dir, x.name, mode|0o700); err != nil {
			return err
		}
		fd, err := fstree.OpenBeneath(x.dir, x.name, oPath|unix.O_DIRECTORY)
		if err != nil {
			return x.topError(err)
		}
		x.root = fd
		return nil
	case tar.TypeReg:
		// No O_TRUNC: the file is truncated once it is known to be a
		// regular file (O_NONBLOCK: a FIFO there does not block the open).
		fd, err := unix.Openat(x.dir, x.name, unix.O_WRONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, mode)
		if err != nil {
			return x.topError(err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			unix.Close(fd)
			return fmt.Errorf("%q exists and is not a regular file", x.name)
		}
		if err := unix.Ftruncate(fd, 0); err != nil {
			unix.Close(fd)
			return err
		}
		return copyTo(fd, x.name, r)
	case tar.TypeSymlink:
		if h.Linkname == "" {
			return errors.New("empty symlink target")
		}
		if err := unix.Symlinkat(h.Linkname, x.dir, x.name); err != nil {
			return x.topError(err)
		}
		return nil
	}
	return fmt.Errorf("unsupported type %q", h.Typeflag)
}

// topError explains a failure to open the top entry.
func (x *extractor) topError(err error) error {
	var st unix.Stat_t
	if unix.Fstatat(x.dir, x.name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			return fmt.Errorf("the destination %q is a symlink: moat sandbox cp does not write through symlinks on the host (a sandbox can plant them)", x.name)
		case unix.S_IFDIR, unix.S_IFREG:
		default:
			return fmt.Errorf("the destination %q exists and is not a regular file or directory", x.name)
		}
	}
	return err
}

// mkdirs opens the directory rel beneath the top directory, creating the
// missing ones; no symlink is followed on the way.
func (x *extractor) mkdirs(rel string) (int, error) {
	if rel == "" {
		return unix.Openat(x.root, ".", oPath|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}
	if fd, err := fstree.OpenBeneath(x.root, rel, oPath|unix.O_DIRECTORY); err == nil {
		return fd, nil
	} else if err != unix.ENOENT {
		return -1, onPathError(x.root, rel, err)
	}
	cur, err := unix.Openat(x.root, ".", oPath|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	for _, c := range strings.Split(rel, "/") {
		fd, err := fstree.OpenBeneath(cur, c, oPath|unix.O_DIRECTORY)
		if err == unix.ENOENT {
			if err = unix.Mkdirat(cur, c, 0o755); err == nil || err == unix.EEXIST {
				fd, err = fstree.OpenBeneath(cur, c, oPath|unix.O_DIRECTORY)
			}
		}
		if err != nil {
			err = onPathError(cur, c, err)
		}
		unix.Close(cur)
		if err != nil {
			return -1, err
		}
		cur = fd
	}
	return cur, nil
}

// onPathError explains why rel beneath dir could not be opened as a
// directory.
func onPathError(dir int, rel string, err error) error {
	if err == unix.ELOOP || err == unix.ENOTDIR || err == unix.EXDEV {
		if link, ok := symlinkOnPath(dir, rel); ok {
			return fmt.Errorf("%q is a symlink: entries are never written through symlinks", link)
		}
	}
	return fmt.Errorf("open %q: %w", rel, err)
}

// mkdirKeep creates the directory name in dir, or keeps one that is
// there; anything else there is an error.
func mkdirKeep(dir int, name string, mode uint32) error {
	err := unix.Mkdirat(dir, name, mode)
	if err != unix.EEXIST {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return nil
	case unix.S_IFLNK:
		return fmt.Errorf("%q is a symlink: moat sandbox cp does not write through symlinks on the host (a sandbox can plant them)", name)
	}
	return fmt.Errorf("%q exists and is not a directory", name)
}

// clearEntry removes what is at name in dir so that an entry replaces
// it: a symlink is removed, never followed; a directory is kept, which
// makes the creation that follows fail.
func clearEntry(dir int, name string) error {
	var st unix.Stat_t
	err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case err == unix.ENOENT:
		return nil
	case err != nil:
		return err
	case st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return fmt.Errorf("%q exists and is a directory", name)
	}
	if err := unix.Unlinkat(dir, name, 0); err != nil && err != unix.ENOENT {
		return err
	}
	return nil
}

// copyTo copies r to the file fd, which it closes.
func copyTo(fd int, name string, r io.Reader) error {
	f := os.NewFile(uintptr(fd), name)
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
