package guest

import (
	"archive/tar"
	"bufio"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// tarIn extracts the tar stream read from in beneath the directory p.
//
// Every entry is placed relative to the extraction directory's descriptor
// with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS: a name cannot leave the
// directory, and no entry is ever written through a symlink, whether an
// earlier entry of the archive made it or it was there before. Names that
// are absolute or hold "..", device nodes, FIFOs and hard links that leave
// the directory end the extraction with EBADTAR; setuid, setgid and sticky
// bits are dropped. Entries before a refused one stay extracted.
func (w *fileWorker) tarIn(p string, max int64, in io.Reader) (*FileResult, error) {
	ext, err := w.open(p, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(ext)
	src := &eofWatch{r: in}
	tr := tar.NewReader(src)
	x := &extractor{ext: ext, max: max}
	for count := 0; ; count++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			if src.eof {
				return nil, errBadTar("the archive is truncated (it has no end-of-archive marker)")
			}
			break
		}
		if errors.Is(err, tar.ErrInsecurePath) && hdr != nil {
			err = nil // judged below, with the rest of the name rules
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, errBadTar("the archive is truncated")
		}
		if err != nil {
			return nil, errBadTar("reading the archive: %v", err)
		}
		if count >= maxTarEntries {
			return nil, errTooBig("the archive has more than %d entries", maxTarEntries)
		}
		if err := x.entry(hdr, tr); err != nil {
			return nil, err
		}
	}
	if err := x.finish(); err != nil {
		return nil, err
	}
	// Writers pad archives past their end marker: read a little of that
	// rather than make the host write into a closed pipe.
	_, _ = io.Copy(io.Discard, io.LimitReader(in, 1<<20))
	return &FileResult{Bytes: x.total}, nil
}

// extractor places the entries of one archive.
type extractor struct {
	ext   int
	max   int64
	total int64
	dirs  []dirPerm
}

// dirPerm is a directory's final mode, applied once the archive is
// extracted (until then the directory stays writable for its entries).
type dirPerm struct {
	rel  string
	perm uint32
}

func (x *extractor) entry(hdr *tar.Header, r io.Reader) error {
	rel, err := cleanTarName(hdr.Name)
	if err != nil {
		return errBadTar("entry %q refused: %v", hdr.Name, err)
	}
	switch hdr.Typeflag {
	case tar.TypeXGlobalHeader:
		return nil
	case tar.TypeChar, tar.TypeBlock:
		return errBadTar("entry %q refused: device nodes are not extracted", hdr.Name)
	case tar.TypeFifo:
		return errBadTar("entry %q refused: FIFOs are not extracted", hdr.Name)
	case tar.TypeReg, tar.TypeCont, tar.TypeGNUSparse, tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
	default:
		return errBadTar("entry %q refused: unsupported type %q", hdr.Name, hdr.Typeflag)
	}
	if rel == "" {
		if hdr.Typeflag == tar.TypeDir {
			return nil // "./": the extraction directory itself
		}
		return errBadTar("entry %q refused: only a directory may name the extraction directory", hdr.Name)
	}
	var linkRel string
	switch hdr.Typeflag {
	case tar.TypeLink:
		linkRel, err = cleanTarName(hdr.Linkname)
		if err == nil && (linkRel == "" || linkRel == rel) {
			err = errors.New("not a file of the archive")
		}
		if err != nil {
			return errBadTar("entry %q refused: hard link to %q: %v", hdr.Name, hdr.Linkname, err)
		}
	case tar.TypeSymlink:
		if hdr.Linkname == "" || strings.IndexByte(hdr.Linkname, 0) >= 0 {
			return errBadTar("entry %q refused: invalid symlink target", hdr.Name)
		}
	}
	dir, name, err := x.parent(rel, hdr.Name, true)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	switch hdr.Typeflag {
	case tar.TypeDir:
		err = x.dir(dir, name, rel, hdr)
	case tar.TypeSymlink:
		err = x.symlink(dir, name, hdr)
	case tar.TypeLink:
		err = x.link(dir, name, linkRel, hdr)
	default:
		return x.file(dir, name, hdr, r)
	}
	if err != nil {
		var fe *fileError
		if errors.As(err, &fe) {
			return err
		}
		return fmt.Errorf("entry %q: %w", hdr.Name, err)
	}
	return nil
}

// openBeneath opens rel beneath dir, refusing any symlink on the way.
func openBeneath(dir int, rel string, flags int) (int, error) {
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	for {
		fd, err := unix.Openat2(dir, rel, how)
		if err != unix.EAGAIN && err != unix.EINTR {
			return fd, err
		}
	}
}

// parent opens the directory of rel beneath the extraction directory,
// creating missing directories when create is set, and returns it with
// rel's last component.
func (x *extractor) parent(rel, entry string, create bool) (int, string, error) {
	dir, name := ".", rel
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		dir, name = rel[:i], rel[i+1:]
	}
	fd, err := openBeneath(x.ext, dir, unix.O_PATH|unix.O_DIRECTORY)
	if err == unix.ENOENT && create {
		fd, err = x.mkdirs(dir)
	}
	switch {
	case err == nil:
		return fd, name, nil
	case err == unix.ELOOP:
		return -1, "", errBadTar("entry %q refused: a symlink is on its path (entries are never written through symlinks)", entry)
	case err == unix.EXDEV:
		return -1, "", errBadTar("entry %q refused: its path leaves the extraction directory", entry)
	}
	return -1, "", fmt.Errorf("entry %q: %w", entry, err)
}

// mkdirs creates the missing directories of rel, one component at a time.
func (x *extractor) mkdirs(rel string) (int, error) {
	cur, err := openBeneath(x.ext, ".", unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return -1, err
	}
	for _, c := range strings.Split(rel, "/") {
		fd, err := openBeneath(cur, c, unix.O_PATH|unix.O_DIRECTORY)
		if err == unix.ENOENT {
			if err = mkdirAt(cur, c, 0o755); err == nil || err == unix.EEXIST {
				fd, err = openBeneath(cur, c, unix.O_PATH|unix.O_DIRECTORY)
			}
		}
		unix.Close(cur)
		if err != nil {
			return -1, err
		}
		cur = fd
	}
	return cur, nil
}

// clearEntry removes what is at dir/name (not a directory) so that an
// entry replaces it: a symlink there is removed, never followed.
func clearEntry(dir int, name string) error {
	err := unix.Unlinkat(dir, name, 0)
	if err == unix.ENOENT {
		return nil
	}
	return err
}

func (x *extractor) file(dir int, name string, hdr *tar.Header, r io.Reader) error {
	if hdr.Size < 0 {
		return errBadTar("entry %q refused: negative size", hdr.Name)
	}
	if hdr.Size > x.max-x.total {
		return errTooBig("entry %q refused: the archive unpacks to more than %d bytes", hdr.Name, x.max)
	}
	if err := clearEntry(dir, name); err != nil {
		return fmt.Errorf("entry %q: %w", hdr.Name, err)
	}
	// O_EXCL: the name was just cleared; if anything (a symlink above
	// all) took its place meanwhile, creation fails instead of following.
	fd, err := unix.Openat(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("entry %q: %w", hdr.Name, err)
	}
	n, err := io.Copy(fdWriter(fd), r)
	if err == nil && n != hdr.Size {
		err = io.ErrUnexpectedEOF
	}
	if err == nil {
		err = unix.Fchmod(fd, tarPerm(hdr.Mode))
	}
	if err == nil {
		setMtime(fd, "", unix.AT_EMPTY_PATH, hdr.ModTime)
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		_ = unix.Unlinkat(dir, name, 0)
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return errBadTar("entry %q: the archive is truncated", hdr.Name)
		}
		return fmt.Errorf("entry %q: %w", hdr.Name, err)
	}
	x.total += n
	return nil
}

func (x *extractor) dir(dir int, name, rel string, hdr *tar.Header) error {
	err := unix.Mkdirat(dir, name, 0o700)
	if err == unix.EEXIST {
		var st unix.Stat_t
		if err = unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if err := unix.Unlinkat(dir, name, 0); err != nil {
				return err
			}
			err = unix.Mkdirat(dir, name, 0o700)
		}
	}
	if err != nil {
		return err
	}
	x.dirs = append(x.dirs, dirPerm{rel: rel, perm: tarPerm(hdr.Mode)})
	return nil
}

func (x *extractor) symlink(dir int, name string, hdr *tar.Header) error {
	if err := clearEntry(dir, name); err != nil {
		return err
	}
	if err := unix.Symlinkat(hdr.Linkname, dir, name); err != nil {
		return err
	}
	setMtime(dir, name, unix.AT_SYMLINK_NOFOLLOW, hdr.ModTime)
	return nil
}

func (x *extractor) link(dir int, name, target string, hdr *tar.Header) error {
	sdir, sname, err := x.parent(target, hdr.Name, false)
	if err != nil {
		return err
	}
	defer unix.Close(sdir)
	if err := clearEntry(dir, name); err != nil {
		return err
	}
	// Flags 0: a symlink as the target is linked itself, not followed.
	return unix.Linkat(sdir, sname, dir, name, 0)
}

// finish gives the archive's directories their modes, deepest first.
func (x *extractor) finish() error {
	for i := len(x.dirs) - 1; i >= 0; i-- {
		d := x.dirs[i]
		dir, name, err := x.parent(d.rel, d.rel, false)
		if err != nil {
			return err
		}
		err = unix.Fchmodat(dir, name, d.perm, unix.AT_SYMLINK_NOFOLLOW)
		unix.Close(dir)
		if err != nil {
			return fmt.Errorf("entry %q: %w", d.rel, err)
		}
	}
	return nil
}

// setMtime sets a modification time, leaving the access time; failures
// are ignored (the content is what matters).
func setMtime(dir int, name string, flags int, t time.Time) {
	if t.IsZero() {
		return
	}
	ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, unix.NsecToTimespec(t.UnixNano())}
	_ = unix.UtimesNanoAt(dir, name, ts, flags)
}

// tarOut writes p as a tar stream to out: a file, a symlink (stored as
// one, never followed) or a directory tree walked through directory
// descriptors. Entries are named from p's last component ("dir/",
// "dir/a"…), so that extracting the stream into a directory recreates p
// there. More than max bytes of file content is ETOOBIG.
func (w *fileWorker) tarOut(p string, max int64, out io.Writer) (*FileResult, error) {
	dir, name, err := w.openParent(p)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dir)
	bw := bufio.NewWriterSize(out, 64<<10)
	a := &archiver{w: w, tw: tar.NewWriter(bw), max: max}
	if name == "" {
		// The root itself: its entries, named relative to it.
		fd, err := w.open("/", unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return nil, err
		}
		err = a.entries(fd, "", 0)
		unix.Close(fd)
		if err != nil {
			return nil, err
		}
	} else {
		var st unix.Stat_t
		if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return nil, err
		}
		if err := a.add(dir, name, name, &st, 0); err != nil {
			return nil, err
		}
	}
	if err := a.tw.Close(); err != nil {
		return nil, err
	}
	if err := bw.Flush(); err != nil {
		return nil, err
	}
	return &FileResult{Bytes: a.total}, nil
}

// archiver writes one tree as a tar stream.
type archiver struct {
	w     *fileWorker
	tw    *tar.Writer
	max   int64
	total int64
}

// add writes dir/name (described by st) as the entry arc.
func (a *archiver) add(dir int, name, arc string, st *unix.Stat_t, depth int) error {
	hdr := &tar.Header{Name: arc, Mode: int64(st.Mode & 0o7777), Uid: int(st.Uid), Gid: int(st.Gid),
		ModTime: time.Unix(st.Mtim.Sec, 0)}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return a.file(dir, name, hdr)
	case unix.S_IFDIR:
		fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("%s: %w", arc, err)
		}
		defer unix.Close(fd)
		if err := a.w.checkProc(fd); err != nil {
			return fmt.Errorf("%s: %w", arc, err)
		}
		hdr.Typeflag, hdr.Name = tar.TypeDir, arc+"/"
		if err := a.tw.WriteHeader(hdr); err != nil {
			return err
		}
		return a.entries(fd, arc, depth+1)
	case unix.S_IFLNK:
		target, err := readlinkAt(dir, name)
		if err != nil {
			return fmt.Errorf("%s: %w", arc, err)
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		return a.tw.WriteHeader(hdr)
	}
	return nil // sockets, FIFOs and devices are not archived
}

// file writes a regular file's header and content.
func (a *archiver) file(dir int, name string, hdr *tar.Header) error {
	// O_NONBLOCK: should a FIFO have taken the file's place, opening it
	// must not block.
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%s: %w", hdr.Name, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%s: %w", hdr.Name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil // replaced meanwhile
	}
	if st.Size > a.max-a.total {
		return errTooBig("%s: the content is over the limit of %d bytes", hdr.Name, a.max)
	}
	hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size
	if err := a.tw.WriteHeader(hdr); err != nil {
		return err
	}
	n, err := io.CopyN(a.tw, fdReader(fd), st.Size)
	if err == io.EOF {
		// The file shrank while being read: pad, as tar does.
		_, err = io.CopyN(a.tw, zeroReader{}, st.Size-n)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", hdr.Name, err)
	}
	a.total += st.Size
	return nil
}

// entries writes the entries of the directory fd, sorted by name.
func (a *archiver) entries(fd int, arc string, depth int) error {
	if depth > maxTreeDepth {
		return fmt.Errorf("%s: deeper than %d levels: %w", arc, maxTreeDepth, unix.ELOOP)
	}
	names, err := dirNames(fd, maxDirEntries)
	if err != nil {
		return fmt.Errorf("%s: %w", arc, err)
	}
	sort.Strings(names)
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if err == unix.ENOENT {
				continue
			}
			return fmt.Errorf("%s: %w", n, err)
		}
		sub := n
		if arc != "" {
			sub = arc + "/" + n
		}
		if err := a.add(fd, n, sub, &st, depth); err != nil {
			return err
		}
	}
	return nil
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
