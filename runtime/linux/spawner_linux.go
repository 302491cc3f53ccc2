package linux

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/guest"
)

// The spawner is a small process, started once, that forks the runtime's
// helper processes (sandbox inits, user namespace holders) on the
// runtime's behalf.
//
// Why: a child that enters a new user namespace cannot be started with
// vfork, because its parent must write its uid map before it execs; so Go
// does a full fork, which copies the page tables of the whole parent and
// write-protects its memory, and the exec then tears that copy down. For a
// daemon whose memory grows with the sandboxes it holds (150 MiB at 1,000)
// that made every create ~15 ms slower. The spawner's memory stays that of
// a fresh Go process, so its forks stay cheap whatever the daemon holds.
//
// Protocol: one SOCK_SEQPACKET socket pair. The runtime sends a
// spawnRequest with the child's descriptors; the spawner answers each, in
// order, with a spawnMessage carrying the child's pid and a pidfd (or the
// error), and later sends a spawnMessage with Exited set when it reaps
// the child. The spawner is the children's parent: their parent-death
// signal fires when it dies, and it dies with the runtime's process.

// SpawnerArg is argv[1] of a moat binary re-executed as the spawner.
const SpawnerArg = "__moat_spawner"

// spawnerFD is the descriptor number of the spawner's socket.
const spawnerFD = 3

// IsSpawner reports whether this process was started as the spawner.
func IsSpawner() bool { return len(os.Args) > 1 && os.Args[1] == SpawnerArg }

// spawnRequest is one child to start: the fields of syscall.SysProcAttr
// the runtime uses, and argv; the descriptors come with the packet.
type spawnRequest struct {
	Argv        []string               `json:"argv"`
	Cloneflags  uintptr                `json:"cloneflags"`
	UIDMappings []syscall.SysProcIDMap `json:"uid_mappings,omitempty"`
	GIDMappings []syscall.SysProcIDMap `json:"gid_mappings,omitempty"`
	Setgroups   bool                   `json:"setgroups,omitempty"`
	Credential  *syscall.Credential    `json:"credential,omitempty"`
}

// spawnMessage is the spawner's answer to a request (Pid and a pidfd, or
// Err and Errno), or the news that a child was reaped (Exited, Status).
type spawnMessage struct {
	Pid    int    `json:"pid"`
	Err    string `json:"err,omitempty"`
	Errno  int    `json:"errno,omitempty"`
	Exited bool   `json:"exited,omitempty"`
	Status uint32 `json:"status,omitempty"`
}

func requestFor(argv []string, sys *syscall.SysProcAttr) spawnRequest {
	return spawnRequest{
		Argv: argv, Cloneflags: sys.Cloneflags, UIDMappings: sys.UidMappings, GIDMappings: sys.GidMappings,
		Setgroups: sys.GidMappingsEnableSetgroups, Credential: sys.Credential,
	}
}

func (q *spawnRequest) sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Cloneflags: q.Cloneflags, UidMappings: q.UIDMappings, GidMappings: q.GIDMappings,
		GidMappingsEnableSetgroups: q.Setgroups, Credential: q.Credential,
		// Every child dies with the spawner.
		Pdeathsig: syscall.SIGKILL,
	}
}

// Spawner runs the spawner process: it serves requests on fd 3 until the
// runtime closes it, then exits. It never returns.
//
// Preconditions: started by a Runtime's spawner client, with the socket on
// fd 3 and a parent-death signal.
func Spawner() {
	// Requests are served on this thread, which never exits: the
	// children's parent-death signal is tied to the thread that forked
	// them.
	runtime.LockOSThread()
	if err := unix.CloseRange(spawnerFD+1, ^uint(0), 0); err != nil {
		fmt.Fprintln(os.Stderr, "moat spawner: close inherited descriptors:", err)
		os.Exit(1)
	}
	sock, err := guest.FileConn(spawnerFD)
	if err != nil {
		fmt.Fprintln(os.Stderr, "moat spawner:", err)
		os.Exit(1)
	}
	s := &spawnerServer{conn: sock}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGCHLD)
	go func() {
		for range sigs {
			s.reap()
		}
	}()
	if err := s.serve(); err != nil {
		fmt.Fprintln(os.Stderr, "moat spawner:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// spawnerServer is the spawner's side. mu is held around each fork and
// its answer and around each reaping, so that an exit is never reported
// before the answer that made its pid known, and a child whose start
// failed (reaped by ForkExec itself) is never reaped here.
type spawnerServer struct {
	conn *guest.Conn
	mu   sync.Mutex
}

func (s *spawnerServer) serve() error {
	for {
		var q spawnRequest
		fds, err := s.conn.RecvValue(&q)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		err = s.spawn(&q, fds)
		closeFDs(fds)
		if err != nil {
			return err
		}
	}
}

// spawn starts one child and answers; an error is the socket's.
func (s *spawnerServer) spawn(q *spawnRequest, fds []int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	files := make([]uintptr, len(fds))
	for i, fd := range fds {
		files[i] = uintptr(fd)
	}
	// Only the runtime's own helpers: this binary started any other way
	// would be a program of its own (a test binary would run its tests).
	if len(q.Argv) != 2 || (q.Argv[1] != InitArg && q.Argv[1] != UsernsHoldArg) {
		return s.conn.SendValue("spawn", &spawnMessage{Err: fmt.Sprintf("not a helper of the runtime: %q", q.Argv), Errno: int(unix.EINVAL)})
	}
	pid, err := syscall.ForkExec("/proc/self/exe", q.Argv, &syscall.ProcAttr{Env: []string{}, Files: files, Sys: q.sysProcAttr()})
	if err != nil {
		return s.conn.SendValue("spawn", failure("", err))
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		// The child is ours and alive (not reaped: mu is held), so this
		// cannot happen short of running out of descriptors; end it.
		_ = unix.Kill(pid, unix.SIGKILL)
		return s.conn.SendValue("spawn", failure("pidfd_open: ", err))
	}
	defer unix.Close(pidfd)
	return s.conn.SendValue("spawn", &spawnMessage{Pid: pid}, pidfd)
}

// failure is the answer to a start that failed with err.
func failure(prefix string, err error) *spawnMessage {
	m := &spawnMessage{Err: prefix + err.Error()}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		m.Errno = int(errno)
	}
	return m
}

// reap collects every exited child and reports it.
func (s *spawnerServer) reap() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		if err := s.conn.SendValue("exit", &spawnMessage{Pid: pid, Exited: true, Status: uint32(ws)}); err != nil {
			// The runtime is gone; the children die with this process.
			os.Exit(0)
		}
	}
}

// spawnerClient is the runtime's side of one spawner process.
type spawnerClient struct {
	conn *guest.Conn
	proc *child // the spawner itself, a child of this process

	mu      sync.Mutex // held while sending a request and queueing its answer
	answers []chan spawnAnswer
	kids    map[int]*child // started, not yet reaped
	dead    error          // set once the spawner is gone
}

type spawnAnswer struct {
	c   *child
	err error
}

// errSpawnerGone is the error of a start whose spawner exited.
var errSpawnerGone = errors.New("the runtime's spawner process exited")

// startSpawner starts a spawner from initPath on a thread that never exits
// (the spawner's parent-death signal is tied to it).
func startSpawner(initPath string) (*spawnerClient, error) {
	host, peer, err := guest.SocketPair()
	if err != nil {
		return nil, err
	}
	type started struct {
		c   *child
		err error
	}
	done := make(chan started, 1)
	go func() {
		runtime.LockOSThread()
		devNull, err := os.Open(os.DevNull)
		if err != nil {
			done <- started{err: err}
			return
		}
		c, err := startChild(initPath, []string{"moat", SpawnerArg}, []*os.File{devNull, devNull, os.Stderr, peer},
			&syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL})
		devNull.Close()
		done <- started{c, err}
		if err == nil {
			select {} // keep this thread, locked, for the process's life
		}
	}()
	st := <-done
	peer.Close()
	if st.err != nil {
		host.Close()
		return nil, fmt.Errorf("start the spawner: %w", st.err)
	}
	sc := &spawnerClient{conn: guest.NewConn(host), proc: st.c, kids: map[int]*child{}}
	go sc.read()
	return sc, nil
}

// start asks the spawner to start argv with files as its descriptors
// 0, 1, …
func (sc *spawnerClient) start(argv []string, files []*os.File, sys *syscall.SysProcAttr) (*child, error) {
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	q := requestFor(argv, sys)
	ch := make(chan spawnAnswer, 1)
	sc.mu.Lock()
	if sc.dead != nil {
		sc.mu.Unlock()
		return nil, sc.dead
	}
	if err := sc.conn.SendValue("spawn", &q, fds...); err != nil {
		sc.mu.Unlock()
		return nil, fmt.Errorf("spawner: %w", err)
	}
	sc.answers = append(sc.answers, ch)
	sc.mu.Unlock()
	for _, f := range files {
		runtime.KeepAlive(f)
	}
	a := <-ch
	return a.c, a.err
}

// read dispatches the spawner's messages until it exits: answers to the
// oldest waiting start, exits to their child.
func (sc *spawnerClient) read() {
	for {
		var m spawnMessage
		fds, err := sc.conn.RecvValue(&m)
		if err != nil {
			sc.fail(err)
			return
		}
		sc.mu.Lock()
		switch {
		case m.Exited:
			if c := sc.kids[m.Pid]; c != nil {
				delete(sc.kids, m.Pid)
				c.status = unix.WaitStatus(m.Status)
				close(c.exited)
				c.pidfd.Close()
			}
		case len(sc.answers) == 0:
			// An answer nobody asked for: the protocol is broken.
			closeFDs(fds)
			sc.mu.Unlock()
			sc.fail(errors.New("spawner answered an unknown request"))
			return
		default:
			ch := sc.answers[0]
			sc.answers = sc.answers[1:]
			switch {
			case m.Err != "":
				closeFDs(fds)
				err := errors.New(m.Err)
				if m.Errno != 0 {
					err = fmt.Errorf("%s: %w", m.Err, syscall.Errno(m.Errno))
				}
				ch <- spawnAnswer{err: err}
			case len(fds) != 1 || m.Pid <= 0:
				closeFDs(fds)
				ch <- spawnAnswer{err: fmt.Errorf("spawner: answer with pid %d and %d descriptors", m.Pid, len(fds))}
			default:
				c := &child{pid: m.Pid, exited: make(chan struct{}), pidfd: os.NewFile(uintptr(fds[0]), "pidfd")}
				sc.kids[m.Pid] = c
				ch <- spawnAnswer{c: c}
			}
		}
		sc.mu.Unlock()
	}
}

// fail marks the spawner gone: waiting starts fail, and its children,
// which its death kills, count as exited.
func (sc *spawnerClient) fail(err error) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.dead = fmt.Errorf("%w (%v)", errSpawnerGone, err)
	for _, ch := range sc.answers {
		ch <- spawnAnswer{err: sc.dead}
	}
	sc.answers = nil
	for pid, c := range sc.kids {
		delete(sc.kids, pid)
		close(c.exited)
		c.pidfd.Close()
	}
	sc.conn.Close()
	sc.proc.kill()
}

// close ends the spawner (it reads the end of its socket and exits) and
// waits until it has been reaped.
func (sc *spawnerClient) close() {
	sc.conn.Close()
	<-sc.proc.exited
}

// alive reports whether the spawner still serves.
func (sc *spawnerClient) alive() bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.dead == nil
}
