package guest

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// File operations run inside the sandbox, on one OS thread of the agent
// that has a sandbox process's credentials: the sandbox user's effective
// uid and gid, no supplementary groups, no capabilities, the init's seccomp
// filter (synced to every thread) and its Landlock ruleset, which the
// thread enforces on itself first (Agent.SetThreadHardening). The kernel
// therefore judges every access as it would for a process of the sandbox.
//
// Paths are never trusted: each one is resolved beneath the sandbox root
// with openat2(RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS), and operations on
// a last component (stat, remove, rename, mkdir, the rename that ends a
// write) use the *at() call on the parent's descriptor without following
// that component. Tar extraction additionally refuses any symlink on an
// entry's path (RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS from the extraction
// directory).
//
// The worker thread belongs to the init, and the kernel lets a thread see
// its own process's /proc entries even when the process is not dumpable
// (/proc/1/fd, /proc/1/maps, the readlink of /proc/1/exe). A sandbox
// process cannot, so every descriptor resolved on procfs is checked, and
// anything under the init's own /proc/<pid> is refused with EACCES.
//
// The umask is shared by every thread of the init (and inherited by the
// processes it starts), so the worker does not change it: every file and
// directory it creates gets its mode explicitly (fchmod), as if created
// with umask 022 (WriteFile's mode is taken exactly).

// fileJob is one queued operation.
type fileJob struct {
	id  uint64
	op  *FileOp
	fds []int
	// in or out is the operation's stream with FileOp.Streams, opened
	// when the request arrived (before the host's frames can); err says
	// why it could not be.
	in  *StreamReader
	out *StreamWriter
	err error
	fn  func() // tests: run on the worker thread instead of op
}

// closeStreams ends the job's stream, whichever way it goes: the host
// reads to its end (or stops sending) before the reply.
func (j *fileJob) closeStreams() {
	closeAll(j.fds)
	if j.in != nil {
		j.in.Close()
	}
	if j.out != nil {
		j.out.Close()
	}
}

// fileWorker runs the file operations of one agent, in order, on its own
// thread.
type fileWorker struct {
	a    *Agent
	mu   sync.Mutex
	jobs []fileJob
	wake chan struct{}

	err  error // set when the thread could not take the sandbox user's identity
	root int   // O_PATH descriptor of the sandbox's "/"
	tgid string
}

var (
	fileWorkersMu sync.Mutex
	fileWorkers   = map[*Agent]*fileWorker{}
)

// file queues one file operation; the reply is sent when it is done. It
// never blocks the agent's message loop. An operation with Streams has
// its stream opened here, before the loop reads the host's next frame.
func (a *Agent) file(id uint64, op *FileOp, fds []int) {
	j := fileJob{id: id, op: op, fds: fds}
	if op != nil && op.Streams {
		switch streams, toHost := FileStreams(op.Op); {
		case !streams:
		case toHost:
			j.out, j.err = a.conn.Streams().Writer(id, StreamFile)
		default:
			j.in, j.err = a.conn.Streams().Reader(id, StreamFile)
		}
	}
	a.fileWorker().enqueue(j)
}

// fileWorker returns the agent's worker, starting it on first use.
func (a *Agent) fileWorker() *fileWorker {
	fileWorkersMu.Lock()
	defer fileWorkersMu.Unlock()
	w := fileWorkers[a]
	if w == nil {
		w = &fileWorker{a: a, wake: make(chan struct{}, 1), root: -1}
		fileWorkers[a] = w
		go w.run()
	}
	return w
}

func (w *fileWorker) enqueue(j fileJob) {
	w.mu.Lock()
	w.jobs = append(w.jobs, j)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *fileWorker) next() fileJob {
	for {
		w.mu.Lock()
		if len(w.jobs) > 0 {
			j := w.jobs[0]
			w.jobs[0] = fileJob{}
			w.jobs = w.jobs[1:]
			w.mu.Unlock()
			return j
		}
		w.mu.Unlock()
		<-w.wake
	}
}

// run is the worker's goroutine. It locks itself to its OS thread for good:
// the credentials dropped below belong to this thread only, and should the
// goroutine ever end, the Go runtime ends the thread with it instead of
// reusing it.
func (w *fileWorker) run() {
	runtime.LockOSThread()
	w.err = w.init()
	for {
		j := w.next()
		if j.fn != nil {
			j.fn()
			continue
		}
		var res *FileResult
		err := w.err
		if err == nil {
			err = j.err
		}
		if err == nil {
			res, err = w.do(&j)
		}
		// The streams end before the reply: the host reads to EOF.
		j.closeStreams()
		w.reply(j.id, j.op, res, err)
	}
}

// init hardens this thread as the init's own (Agent.SetThreadHardening),
// gives it the sandbox user's identity and opens the root.
func (w *fileWorker) init() error {
	s := w.a.setup
	if s == nil || s.UID <= 0 || s.GID <= 0 {
		return &fileError{"EPERM", "file operations need a non-root sandbox user"}
	}
	if w.a.hardenThread != nil {
		if err := w.a.hardenThread(); err != nil {
			return &fileError{"EPERM", "file worker: " + err.Error()}
		}
	}
	if err := dropThreadCreds(s.UID, s.GID); err != nil {
		return &fileError{"EPERM", "file worker: " + err.Error()}
	}
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("file worker: open /: %w", err)
	}
	w.root = fd
	w.tgid = strconv.Itoa(unix.Getpid())
	return nil
}

// guardUID is the real and saved uid of the worker thread (see
// dropThreadCreds); no process of a sandbox runs as it.
const guardUID = 65534

// dropThreadCreds sets the calling thread's groups, gid and uid with raw
// per-thread syscalls (syscall.Setuid would change every thread of the
// init). Leaving uid 0 for non-zero uids clears the thread's permitted
// and effective capabilities; that is checked, not assumed.
//
// The effective (and so filesystem) uid is the sandbox user's: every
// access is judged as the sandbox user's. The real and saved uids are
// guardUID instead: kill(2) lets a process signal any task whose real or
// saved uid is its own, and a signal sent to this thread's id is delivered
// to the whole init, which Go ends on SIGTERM, SIGINT, SIGQUIT… A sandbox
// process must not be able to end its pid 1 that way (Landlock's signal
// scoping, ABI 6, would stop it too, but not on older kernels).
func dropThreadCreds(uid, gid int) error {
	guard := guardUID
	if uid == guard {
		guard--
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
		return fmt.Errorf("setresgid: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(guard), uintptr(uid), uintptr(guard)); e != 0 {
		return fmt.Errorf("setresuid: %w", e)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	for _, d := range data {
		if d.Effective != 0 || d.Permitted != 0 {
			return errors.New("capabilities remain after changing uid")
		}
	}
	if got := unix.Geteuid(); got != uid {
		return fmt.Errorf("effective uid is %d, not %d", got, uid)
	}
	return nil
}

// reply sends the outcome of one operation.
func (w *fileWorker) reply(id uint64, op *FileOp, res *FileResult, err error) {
	stage := "file"
	if op != nil {
		stage = op.Op
	}
	m := &Message{Type: MsgFileDone, ID: id, Result: res}
	if err != nil {
		m = &Message{Type: MsgFileDone, ID: id, Error: fileErrInfo(stage, err)}
	}
	if e := w.a.conn.Send(m); errors.Is(e, ErrTooLarge) {
		_ = w.a.conn.Send(&Message{Type: MsgFileDone, ID: id, Error: &ErrInfo{
			Stage: stage, Errno: codeTooBig, Message: "the result does not fit in one protocol message"}})
	}
}

// fileErrInfo describes a failed operation with its errno name.
func fileErrInfo(stage string, err error) *ErrInfo {
	info := &ErrInfo{Stage: stage, Message: err.Error(), Errno: "EIO"}
	var fe *fileError
	var en unix.Errno
	switch {
	case errors.As(err, &fe):
		info.Errno = fe.code
	case errors.Is(err, ErrStreamReset):
		info.Errno = "EPIPE" // the host stopped reading, as a closed pipe
	case errors.As(err, &en):
		if name := unix.ErrnoName(en); name != "" {
			info.Errno = name
		}
	}
	return info
}

// do runs one operation. The caller closes its streams afterwards.
func (w *fileWorker) do(j *fileJob) (*FileResult, error) {
	op := j.op
	if op == nil {
		return nil, errInvalid("no operation")
	}
	p, err := sandboxPath(op.Path)
	if err != nil {
		return nil, err
	}
	var (
		in  io.Reader
		out io.Writer
	)
	if streams, toHost := FileStreams(op.Op); streams {
		if op.Max <= 0 {
			return nil, errInvalid("the size limit must be positive")
		}
		switch {
		case op.Streams && toHost && j.out != nil:
			out = j.out
		case op.Streams && !toHost && j.in != nil:
			in = j.in
		case op.Streams:
			return nil, errInvalid("%s: no stream", op.Op)
		case len(j.fds) != 1:
			return nil, errInvalid("%s needs one stream descriptor, got %d", op.Op, len(j.fds))
		default:
			// The host's end of the pipe is its own open file; this
			// end is blocking on the worker's thread.
			if err := unix.SetNonblock(j.fds[0], false); err != nil {
				return nil, err
			}
			in, out = fdReader(j.fds[0]), fdWriter(j.fds[0])
		}
	}
	switch op.Op {
	case FileRead:
		return w.read(p, op.Max, out)
	case FileWrite:
		return w.write(p, op.Mode, op.Max, in)
	case FileList:
		return w.list(p)
	case FileStat:
		return w.stat(p)
	case FileMkdir:
		return nil, w.mkdir(p, op.Mode, op.Recursive)
	case FileRemove:
		return nil, w.remove(p, op.Recursive)
	case FileMove:
		to, err := sandboxPath(op.To)
		if err != nil {
			return nil, err
		}
		return nil, w.move(p, to)
	case FileTarIn:
		return w.tarIn(p, op.Max, in)
	case FileTarOut:
		return w.tarOut(p, op.Max, out)
	}
	return nil, errInvalid("unknown file operation %q", op.Op)
}

// open resolves a clean absolute path beneath the sandbox root, following
// symlinks inside the root but no magic link, and checks the result.
func (w *fileWorker) open(p string, flags int) (int, error) {
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	var fd int
	var err error
	// openat2 answers EAGAIN when a rename or mount raced with a
	// RESOLVE_IN_ROOT lookup; the lookup is then simply retried.
	for range 16 {
		if fd, err = unix.Openat2(w.root, p, how); err != unix.EAGAIN && err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return -1, err
	}
	if err := w.checkProc(fd); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// openParent resolves the parent directory of p and returns it with p's
// last component ("" for the root).
func (w *fileWorker) openParent(p string) (int, string, error) {
	dir, name := splitPath(p)
	fd, err := w.open(dir, unix.O_PATH|unix.O_DIRECTORY)
	return fd, name, err
}

// checkProc refuses a descriptor inside the init's own /proc/<pid> (or a
// thread's /proc/<tid>), which the kernel would let this thread use but
// not a sandbox process. A procfs descriptor whose place cannot be told
// is refused too.
func (w *fileWorker) checkProc(fd int) error {
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return err
	}
	if sfs.Type != unix.PROC_SUPER_MAGIC {
		return nil
	}
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlink("/proc/thread-self/fd/"+strconv.Itoa(fd), buf)
	if err != nil {
		return unix.EACCES
	}
	p := string(buf[:n])
	if p == "/proc" {
		return nil
	}
	rest, ok := strings.CutPrefix(p, "/proc/")
	if !ok {
		return unix.EACCES
	}
	first, _, _ := strings.Cut(rest, "/")
	if first == "" || strings.Trim(first, "0123456789") != "" {
		return nil // not a pid directory: /proc/cpuinfo, /proc/sys/...
	}
	var st unix.Stat_t
	if first == w.tgid || unix.Fstatat(w.root, "proc/"+w.tgid+"/task/"+first, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
		return unix.EACCES
	}
	return nil
}

// read copies a regular file of at most max bytes to out.
func (w *fileWorker) read(p string, max int64, out io.Writer) (*FileResult, error) {
	// O_NONBLOCK: opening a FIFO must not block the worker.
	fd, err := w.open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		return nil, unix.EISDIR
	default:
		return nil, errInvalid("not a regular file")
	}
	if st.Size > max {
		return nil, errTooBig("%d bytes, over the limit of %d", st.Size, max)
	}
	n, err := copyMax(out, fdReader(fd), max)
	if err != nil {
		return nil, err
	}
	return &FileResult{Bytes: n}, nil
}

// copyMax copies src to dst until EOF; more than max bytes is ETOOBIG.
func copyMax(dst io.Writer, src io.Reader, max int64) (int64, error) {
	buf := make([]byte, 128<<10)
	var n int64
	for {
		m, err := src.Read(buf)
		if m > 0 {
			if n+int64(m) > max {
				return n, errTooBig("over the limit of %d bytes", max)
			}
			if _, err := dst.Write(buf[:m]); err != nil {
				return n, err
			}
			n += int64(m)
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

func readFD(fd int, b []byte) (int, error) {
	for {
		n, err := unix.Read(fd, b)
		if err == unix.EINTR {
			continue
		}
		if n < 0 {
			n = 0
		}
		return n, err
	}
}

func writeFull(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// fdReader and fdWriter are blocking streams over a raw descriptor.
type fdReader int

func (r fdReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, err := readFD(int(r), p)
	if err != nil {
		return n, err
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

type fdWriter int

func (w fdWriter) Write(p []byte) (int, error) {
	if err := writeFull(int(w), p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// write replaces p atomically with at most max bytes read from in: a
// temporary file in the same directory is filled, synced, given its mode
// and renamed over p. Whatever fails, the temporary file is removed.
func (w *fileWorker) write(p string, mode uint32, max int64, in io.Reader) (*FileResult, error) {
	dir, name, err := w.openParent(p)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dir)
	if name == "" {
		return nil, unix.EISDIR
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return nil, unix.EISDIR
	}
	perm := mode & 0o777
	if mode == 0 {
		perm = 0o644
	}
	fd, tmp, err := createTemp(dir)
	if err != nil {
		return nil, err
	}
	committed := false
	defer func() {
		if fd >= 0 {
			unix.Close(fd)
		}
		if !committed {
			_ = unix.Unlinkat(dir, tmp, 0)
		}
	}()
	n, err := copyMax(fdWriter(fd), in, max)
	if err != nil {
		return nil, err
	}
	if err := unix.Fsync(fd); err != nil {
		return nil, err
	}
	if err := unix.Fchmod(fd, perm); err != nil {
		return nil, err
	}
	err = unix.Close(fd)
	fd = -1
	if err != nil {
		return nil, err
	}
	if err := unix.Renameat(dir, tmp, dir, name); err != nil {
		return nil, err
	}
	committed = true
	return &FileResult{Bytes: n}, nil
}

// createTemp creates a new, empty, private file in dir under a name no one
// else uses.
func createTemp(dir int) (int, string, error) {
	for {
		name := fmt.Sprintf(".moat-%016x.tmp", rand.Uint64())
		fd, err := unix.Openat(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err == unix.EEXIST || err == unix.EINTR {
			continue
		}
		return fd, name, err
	}
}

// list describes the entries of a directory, sorted by name.
func (w *fileWorker) list(p string) (*FileResult, error) {
	fd, err := w.open(p, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	names, err := dirNames(fd, maxDirEntries)
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	entries := make([]FileEntry, 0, len(names))
	for _, n := range names {
		e, err := statAt(fd, n)
		if errors.Is(err, unix.ENOENT) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		entries = append(entries, *e)
	}
	return &FileResult{Entries: entries}, nil
}

// maxDirEntries mirrors sandbox.MaxDirEntries (guest does not import sandbox).
const maxDirEntries = 100_000

// dirNames reads the names of a directory (without "." and ".."); more
// than max is ETOOBIG.
func dirNames(fd int, max int) ([]string, error) {
	var names []string
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
		if len(names) > max {
			return nil, errTooBig("more than %d entries", max)
		}
	}
}

// statAt describes name in dir without following a symlink.
func statAt(dir int, name string) (*FileEntry, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, err
	}
	e := entryOf(name, &st)
	if e.Type == "symlink" {
		t, err := readlinkAt(dir, name)
		if err != nil {
			return nil, err
		}
		e.Target = t
	}
	return e, nil
}

func entryOf(name string, st *unix.Stat_t) *FileEntry {
	e := &FileEntry{Name: name, Size: st.Size, Mode: st.Mode & 0o7777, MtimeNs: st.Mtim.Nano()}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		e.Type = "file"
	case unix.S_IFDIR:
		e.Type = "dir"
	case unix.S_IFLNK:
		e.Type = "symlink"
	default:
		e.Type = "other"
	}
	return e
}

func readlinkAt(dir int, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dir, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// stat describes p without following a final symlink.
func (w *fileWorker) stat(p string) (*FileResult, error) {
	dir, name, err := w.openParent(p)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dir)
	if name == "" {
		var st unix.Stat_t
		if err := unix.Fstat(w.root, &st); err != nil {
			return nil, err
		}
		return &FileResult{Info: entryOf("/", &st)}, nil
	}
	e, err := statAt(dir, name)
	if err != nil {
		return nil, err
	}
	return &FileResult{Info: e}, nil
}

// mkdir creates p, or with parents every missing directory up to p (an
// existing directory is then fine, as with mkdir -p).
func (w *fileWorker) mkdir(p string, mode uint32, parents bool) error {
	perm := createMode(mode, 0o755)
	if !parents {
		dir, name, err := w.openParent(p)
		if err != nil {
			return err
		}
		defer unix.Close(dir)
		if name == "" {
			return unix.EEXIST
		}
		return mkdirAt(dir, name, perm)
	}
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	if p == "/" {
		parts = nil
	}
	for i := range parts {
		cur := "/" + strings.Join(parts[:i+1], "/")
		last := i == len(parts)-1
		fd, err := w.open(cur, unix.O_PATH|unix.O_DIRECTORY)
		if err == nil {
			unix.Close(fd)
			continue
		}
		if err == unix.ENOTDIR && last {
			return unix.EEXIST
		}
		if err != unix.ENOENT {
			return err
		}
		dir, name, err := w.openParent(cur)
		if err != nil {
			return err
		}
		m := uint32(0o755)
		if last {
			m = perm
		}
		err = mkdirAt(dir, name, m)
		unix.Close(dir)
		if err == unix.EEXIST {
			// Made meanwhile, or a dangling symlink: look again.
			fd, err2 := w.open(cur, unix.O_PATH|unix.O_DIRECTORY)
			if err2 != nil {
				return err
			}
			unix.Close(fd)
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// mkdirAt creates dir/name with exactly perm, whatever the process umask.
func mkdirAt(dir int, name string, perm uint32) error {
	if err := unix.Mkdirat(dir, name, 0o700); err != nil {
		return err
	}
	return unix.Fchmodat(dir, name, perm, unix.AT_SYMLINK_NOFOLLOW)
}

// remove deletes p: a file, a symlink (never what it points to), an empty
// directory, or with recursive a whole tree.
func (w *fileWorker) remove(p string, recursive bool) error {
	dir, name, err := w.openParent(p)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	if name == "" {
		return unix.EBUSY
	}
	if recursive {
		var st unix.Stat_t
		if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			if err := w.removeTree(dir, name, name, 0); err != nil {
				return err
			}
			return unix.Unlinkat(dir, name, unix.AT_REMOVEDIR)
		}
	}
	err = unix.Unlinkat(dir, name, 0)
	if err == unix.EISDIR {
		err = unix.Unlinkat(dir, name, unix.AT_REMOVEDIR)
	}
	return err
}

// removeTree empties the directory parent/name, descending only into real
// directories (opened with O_NOFOLLOW, so a symlink is removed, never
// followed). It goes on past failures and returns the first one.
func (w *fileWorker) removeTree(parent int, name, rel string, depth int) error {
	if depth >= maxTreeDepth {
		return fmt.Errorf("%s: deeper than %d levels: %w", rel, maxTreeDepth, unix.ELOOP)
	}
	fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	defer unix.Close(fd)
	if err := w.checkProc(fd); err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	// One pass over the directory, in batches: entries are removed as
	// they are read, so memory stays bounded however large it is.
	buf := make([]byte, 32<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			keep(fmt.Errorf("%s: %w", rel, err))
			break
		}
		if n <= 0 {
			break
		}
		_, _, names := unix.ParseDirent(buf[:n], -1, nil)
		for _, e := range names {
			sub := rel + "/" + e
			var st unix.Stat_t
			if err := unix.Fstatat(fd, e, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if err != unix.ENOENT {
					keep(fmt.Errorf("%s: %w", sub, err))
				}
				continue
			}
			flags := 0
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				if err := w.removeTree(fd, e, sub, depth+1); err != nil {
					keep(err)
					continue
				}
				flags = unix.AT_REMOVEDIR
			}
			if err := unix.Unlinkat(fd, e, flags); err != nil && err != unix.ENOENT {
				keep(fmt.Errorf("%s: %w", sub, err))
			}
		}
	}
	return first
}

// move renames from to to, each resolved beneath the root; neither last
// component is followed.
func (w *fileWorker) move(from, to string) error {
	fdir, fname, err := w.openParent(from)
	if err != nil {
		return err
	}
	defer unix.Close(fdir)
	tdir, tname, err := w.openParent(to)
	if err != nil {
		return err
	}
	defer unix.Close(tdir)
	if fname == "" || tname == "" {
		return unix.EBUSY
	}
	return unix.Renameat(fdir, fname, tdir, tname)
}
