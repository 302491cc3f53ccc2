package guest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// Agent serves a built sandbox as its pid 1: it starts processes on the
// host's request, reaps every process of the sandbox (orphans included)
// and reports exits.
type Agent struct {
	conn  *Conn
	setup *Setup

	// homeFD is the sandbox pids cgroup's "tasks" file, or -1.
	homeFD int
	// hardenThread, if set, restricts a file worker's thread as the
	// init's own (SetThreadHardening).
	hardenThread func() error

	mu     sync.Mutex // guards procs, ids, relays; held across fork+register+started
	procs  map[int]uint64
	ids    map[uint64]int
	relays map[uint64]*procRelay // processes started with Exec.Streams
	// forked wakes the reaper, idle while the agent has no child, after
	// a fork (buffered: a wake-up is never lost).
	forked chan struct{}
	done   chan struct{}
	once   sync.Once
}

// NewAgent returns an agent for a sandbox built from s.
func NewAgent(conn *Conn, s *Setup) *Agent {
	return &Agent{conn: conn, setup: s, procs: map[int]uint64{}, ids: map[uint64]int{}, relays: map[uint64]*procRelay{},
		forked: make(chan struct{}, 1), done: make(chan struct{}), homeFD: -1}
}

// SetCallCgroupHome gives the agent the "tasks" file of the sandbox's own
// pids cgroup (see Setup.CallCgroups); the agent owns fd afterwards.
func (a *Agent) SetCallCgroupHome(fd int) { a.homeFD = fd }

// SetThreadHardening gives the agent what its file worker threads run on
// themselves before their first operation: the init's per-thread
// protections that a new thread does not inherit from the one it runs on
// (the Landlock domain, restricted thread by thread). A worker whose
// hardening fails refuses every operation. Call it before Serve.
func (a *Agent) SetThreadHardening(f func() error) { a.hardenThread = f }

// Serve handles host messages until the host closes the connection, or,
// for a one-shot sandbox, until its process has exited. When Serve
// returns, the caller exits and the kernel kills every remaining process
// of the sandbox's pid namespace.
//
// Processes are forked from the goroutine that calls Serve: a caller that
// has locked it to its OS thread decides which thread's credentials and
// capability sets they inherit.
func (a *Agent) Serve() error {
	go a.reapLoop()
	go func() {
		<-a.done
		a.conn.Close() // ends readLoop's Recv
	}()
	err := a.readLoop()
	select {
	case <-a.done:
		return nil
	default:
		return err
	}
}

func (a *Agent) readLoop() error {
	for {
		m, fds, err := a.conn.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		switch m.Type {
		case MsgExec:
			a.start(m.ID, m.Exec, fds)
		case MsgSignal:
			closeAll(fds)
			a.signal(m.ID, m.Signal)
		case MsgFile:
			a.file(m.ID, m.File, fds)
		case MsgResize:
			closeAll(fds)
			a.resize(m.ID, m.Resize)
		default:
			closeAll(fds)
		}
	}
}

// start runs one process. Failures are reported to the host as MsgError
// with the exit code they map to.
func (a *Agent) start(id uint64, e *Exec, fds []int) {
	defer closeAll(fds)
	fail := func(stage string, code int, err error) {
		_ = a.conn.Send(&Message{Type: MsgError, ID: id, Error: &ErrInfo{Stage: stage, Message: err.Error(), Code: code}})
		if a.setup.OneShot {
			a.once.Do(func() { close(a.done) })
		}
	}
	if e == nil || len(e.Args) == 0 {
		fail("exec", 125, errors.New("no command"))
		return
	}
	callFD := -1
	if e.CallCgroup {
		if len(fds) == 0 || a.homeFD < 0 {
			fail("exec", 125, errors.New("call cgroup descriptor missing"))
			return
		}
		callFD = fds[len(fds)-1]
	}
	want := 3 // stdin, stdout, stderr
	if e.TTY || e.Streams {
		want = 0 // the agent makes a pty, or the pipes it relays
	}
	if e.CallCgroup {
		want++
	}
	if len(fds) != want {
		fail("exec", 125, fmt.Errorf("%d descriptors, want %d", len(fds), want))
		return
	}
	cwdFD, err := openCwd(e.Cwd)
	if err != nil {
		fail("cwd", 125, err)
		return
	}
	defer unix.Close(cwdFD)
	path, code, err := lookPath(e.Args[0], e.Cwd, envPath(e.Env))
	if err != nil {
		fail("exec", code, err)
		return
	}
	files := []uintptr{uintptr(0), 0, 0}
	secretFDs, err := secretFiles(e.Secrets, a.setup.UID, a.setup.GID)
	defer closeAll(secretFDs)
	if err != nil {
		fail("secrets", 125, err)
		return
	}
	var (
		master *os.File
		rel    *procRelay
	)
	switch {
	case e.TTY:
		m, s, err := pty.Open()
		if err != nil {
			fail("pty", 125, err)
			return
		}
		master = m
		defer s.Close()
		if e.Rows > 0 && e.Cols > 0 {
			_ = pty.Setsize(m, &pty.Winsize{Rows: e.Rows, Cols: e.Cols})
		}
		files = []uintptr{s.Fd(), s.Fd(), s.Fd()}
		if e.Streams {
			if rel, err = newPTYRelay(a.conn.Streams(), id, m, e.Stdin); err != nil {
				fail("pty", 125, err)
				return
			}
			master = nil // the relay's
		}
	case e.Streams:
		if rel, err = newPipeRelay(a.conn.Streams(), id, e.Stdin); err != nil {
			fail("stdio", 125, err)
			return
		}
		files = rel.childFDs()
	default:
		for i := range files {
			files[i] = uintptr(fds[i])
		}
	}
	for _, fd := range secretFDs {
		files = append(files, uintptr(fd))
	}
	attr := &syscall.ProcAttr{
		Env:   e.Env,
		Files: files,
		Sys: &syscall.SysProcAttr{
			Setsid:     true,
			Setctty:    e.TTY,
			Ctty:       0,
			Credential: &syscall.Credential{Uid: uint32(a.setup.UID), Gid: uint32(a.setup.GID), Groups: []uint32{}},
			Pdeathsig:  syscall.SIGKILL,
		},
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	// The child inherits the working directory from this thread: enter
	// the descriptor opened beneath the root, fork, and return to "/".
	// Forks happen only here, on the goroutine that runs Serve.
	if err := unix.Fchdir(cwdFD); err != nil {
		fail("cwd", 125, err)
		return
	}
	pid, err := a.forkIn(callFD, path, e.Args, attr)
	if err == nil {
		select {
		case a.forked <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
	if cerr := unix.Chdir("/"); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		if master != nil {
			master.Close()
		}
		if rel != nil {
			rel.abort()
		}
		fail("exec", execCode(err), &os.PathError{Op: "exec", Path: e.Args[0], Err: err})
		return
	}
	a.procs[pid] = id
	a.ids[id] = pid
	started := &Message{Type: MsgStarted, ID: id}
	if rel != nil {
		a.relays[id] = rel
		rel.start()
		_ = a.conn.Send(started)
		return
	}
	if master != nil {
		_ = a.conn.Send(started, int(master.Fd()))
		master.Close()
		return
	}
	_ = a.conn.Send(started)
}

// forkIn starts a process, in the call's cgroup when callFD is a "tasks"
// file: this thread (the one every process is forked from) moves itself
// there, forks, and moves back home. Moving one thread through "tasks"
// takes no global lock. If it cannot move back, the agent exits: a
// forking thread left in a call's cgroup would be killed with that call.
//
// Preconditions: on the locked thread that forks, a.mu held.
func (a *Agent) forkIn(callFD int, path string, args []string, attr *syscall.ProcAttr) (int, error) {
	if callFD < 0 {
		return syscall.ForkExec(path, args, attr)
	}
	if _, err := unix.Write(callFD, []byte("0")); err != nil {
		return 0, fmt.Errorf("join the call's cgroup: %w", err)
	}
	pid, err := syscall.ForkExec(path, args, attr)
	if _, herr := unix.Write(a.homeFD, []byte("0")); herr != nil {
		fmt.Fprintln(os.Stderr, "moat init: cannot leave a call's cgroup:", herr)
		os.Exit(1)
	}
	return pid, err
}

// openCwd opens a process's working directory beneath the sandbox root,
// refusing magic links (/proc/self/fd/N, /proc/<pid>/cwd …): whatever
// descriptors exist, a working directory can only be a real directory of
// the sandbox's own tree.
func openCwd(cwd string) (int, error) {
	root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, cwd, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return -1, errors.New("working directory " + cwd + ": " + err.Error())
	}
	return fd, nil
}

// secretFiles turns each secret into a sealed, read-only memfd owned by
// the sandbox user: the value lives only in memory, cannot be changed, and
// goes away with the last process holding it.
func secretFiles(secrets []SecretFile, uid, gid int) ([]int, error) {
	var fds []int
	for _, s := range secrets {
		fd, err := unix.MemfdCreate("moat-secret-"+s.Name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
		if err != nil {
			return fds, err
		}
		fds = append(fds, fd)
		for b := s.Value; len(b) > 0; {
			n, err := unix.Write(fd, b)
			if err != nil {
				return fds, err
			}
			b = b[n:]
		}
		if _, err := unix.Seek(fd, 0, 0); err != nil {
			return fds, err
		}
		seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
			return fds, err
		}
		if err := unix.Fchown(fd, uid, gid); err != nil {
			return fds, err
		}
		if err := unix.Fchmod(fd, 0o400); err != nil {
			return fds, err
		}
	}
	return fds, nil
}

// resize sets the terminal size of process id, started with TTY and
// Streams.
func (a *Agent) resize(id uint64, ws *WinSize) {
	a.mu.Lock()
	rel := a.relays[id]
	a.mu.Unlock()
	if rel != nil {
		_ = rel.resize(ws)
	}
}

// signal delivers sig to the process group of process id (its session).
func (a *Agent) signal(id uint64, sig int) {
	a.mu.Lock()
	pid, ok := a.ids[id]
	a.mu.Unlock()
	if !ok || sig <= 0 || sig > 64 {
		return
	}
	_ = unix.Kill(-pid, unix.Signal(sig))
	_ = unix.Kill(pid, unix.Signal(sig))
}

// reapLoop collects every exited child; exits of processes the host
// started are reported, orphans re-parented to pid 1 are just collected.
// It waits in a blocking wait4, which the kernel wakes as soon as a child
// has exited (a SIGCHLD handler would first pass the signal through the
// runtime's signal goroutine, two more wake-ups on the path of every
// exit). With no child left (ECHILD) it sleeps until the next fork: an
// orphan is re-parented to pid 1 before the exit of its parent, a child,
// can be collected, so no process of the sandbox is missed. It returns
// once the agent is done.
func (a *Agent) reapLoop() {
	for {
		var ws unix.WaitStatus
		var ru unix.Rusage
		pid, err := unix.Wait4(-1, &ws, 0, &ru)
		if err == unix.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			select {
			case <-a.forked:
				continue
			case <-a.done:
				return
			}
		}
		a.mu.Lock()
		id, ok := a.procs[pid]
		rel := a.relays[id]
		if ok {
			delete(a.procs, pid)
			delete(a.ids, id)
			delete(a.relays, id)
		}
		a.mu.Unlock()
		if !ok {
			continue
		}
		if rel != nil {
			rel.exited()
		}
		ex := &Exit{
			UserUsec: ru.Utime.Sec*1e6 + ru.Utime.Usec,
			SysUsec:  ru.Stime.Sec*1e6 + ru.Stime.Usec,
			MaxRSS:   ru.Maxrss * 1024,
		}
		if ws.Signaled() {
			ex.Signal = int(ws.Signal())
		} else {
			ex.Code = ws.ExitStatus()
		}
		_ = a.conn.Send(&Message{Type: MsgExit, ID: id, Exit: ex})
		if a.setup.OneShot {
			// The sandbox ends with the agent: relayed output is
			// drained first.
			go func() {
				if rel != nil {
					<-rel.done
				}
				a.once.Do(func() { close(a.done) })
			}()
		}
	}
}

// execCode maps an execve failure to 127 (not found) or 126 (not
// executable).
func execCode(err error) int {
	if errors.Is(err, syscall.ENOENT) {
		return 127
	}
	return 126
}

func envPath(env []string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], "PATH="); ok {
			return v
		}
	}
	return ""
}

// lookPath resolves a command name against PATH inside the sandbox, the
// way a shell does: a name with a slash is taken as it is (relative to
// cwd), otherwise the first executable regular file in PATH wins.
func lookPath(name, cwd, path string) (string, int, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		fi, err := os.Stat(p)
		if err != nil {
			return "", execCode(err), err
		}
		if fi.IsDir() {
			return "", 126, &os.PathError{Op: "exec", Path: name, Err: syscall.EISDIR}
		}
		return p, 0, nil
	}
	var denied error
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(cwd, dir)
		}
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err != nil || fi.IsDir() {
			continue
		}
		if fi.Mode()&0o111 == 0 {
			if denied == nil {
				denied = &os.PathError{Op: "exec", Path: p, Err: syscall.EACCES}
			}
			continue
		}
		return p, 0, nil
	}
	if denied != nil {
		return "", 126, denied
	}
	return "", 127, errors.New(name + ": command not found")
}
