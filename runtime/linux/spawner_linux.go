package linux

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/guest"
	"github.com/moat-sandbox/moat/sandbox"
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
// signal fires when it dies.
//
// Reclaim: the runtime also hands the spawner a lease of its own on each
// sandbox's uid slot (a "hold": an open file description holding a read
// lock on the slot, beside the runtime's; the slot stays taken while
// either process holds its lock: see slotLeases), with the id of the
// budget the sandbox runs in, if any, and takes it back ("release") once
// it has removed the sandbox's cgroups itself. When the runtime's process dies
// (the socket reads end of file, or the parent-death signal, SIGTERM,
// arrives) the spawner does what the runtime can no longer do: it kills
// its children (each init's pid namespace dies with it), waits for them,
// removes the cgroups of the slots it holds (deepest first; moat/SLOT, or
// moat/budget-ID/SLOT), drops the leases, removes those budgets when
// their owner is gone and nothing is left in them (reclaimBudget), removes
// the layers no sandbox uses any more, and exits; all within
// reclaimLimit. It touches only the cgroups of slots whose lease it holds,
// and budgets whose lease it could take, so never those of another moat:
// no other process can lease those slots meanwhile.

// Ops of a spawnRequest that are not starts (and get no answer).
const (
	opHold    = "hold"
	opRelease = "release"
)

// reclaimLimit bounds the spawner's reclaim after the runtime died; past
// it the spawner exits anyway (its children die with it; cgroups left are
// reclaimed by the next moat).
const reclaimLimit = 5 * time.Second

// SpawnerArg is argv[1] of a moat binary re-executed as the spawner.
const SpawnerArg = "__moat_spawner"

// spawnerFD is the descriptor number of the spawner's socket.
const spawnerFD = 3

// IsSpawner reports whether this process was started as the spawner.
func IsSpawner() bool { return len(os.Args) > 1 && os.Args[1] == SpawnerArg }

// spawnRequest is one child to start: the fields of syscall.SysProcAttr
// the runtime uses, and argv; the descriptors come with the packet.
type spawnRequest struct {
	// Op is "" (start a child), opHold or opRelease.
	Op string `json:"op,omitempty"`
	// Slot and StateDir are a hold's or a release's uid slot and the
	// runtime's state directory; a hold's descriptor is the lease.
	Slot     int    `json:"slot,omitempty"`
	StateDir string `json:"state_dir,omitempty"`
	// Budget is the id of the budget a hold's sandbox runs in ("" for
	// none): its cgroups are under the budget's.
	Budget string `json:"budget,omitempty"`

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
// runtime closes it, then exits. It never returns. It starts inits from
// the executable its argv[2] names (the runtime's initExe: the lean init),
// its other helpers from its own.
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
	s := &spawnerServer{conn: sock, kids: map[int]bool{}, holds: map[int]heldSlot{}, initExe: selfExe}
	if len(os.Args) > 2 {
		s.initExe = os.Args[2]
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGCHLD)
	go func() {
		for range sigs {
			s.reap()
		}
	}()
	// SIGTERM is the parent-death signal: the runtime died. (No signal
	// is ignored here: an ignored signal would stay ignored in the
	// children.)
	term := make(chan os.Signal, 1)
	signal.Notify(term, unix.SIGTERM)
	go func() {
		<-term
		s.reclaim()
	}()
	if err := s.serve(); err != nil {
		fmt.Fprintln(os.Stderr, "moat spawner:", err)
	}
	s.reclaim()
}

// spawnerServer is the spawner's side. mu is held around each fork and
// its answer and around each reaping, so that an exit is never reported
// before the answer that made its pid known, and a child whose start
// failed (reaped by ForkExec itself) is never reaped here.
type spawnerServer struct {
	conn *guest.Conn
	// initExe is the executable of the inits it starts.
	initExe string
	mu      sync.Mutex

	// Under mu:
	kids     map[int]bool     // started, not yet reaped
	holds    map[int]heldSlot // uid slot → the spawner's lease on it
	stateDir string
	lost     bool // the runtime no longer reads
}

// heldSlot is a sandbox's uid slot lease the spawner holds.
type heldSlot struct {
	fd     int    // the lease
	budget string // the budget the sandbox runs in, "" for none
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
		switch q.Op {
		case opHold:
			s.hold(&q, fds)
			continue
		case opRelease:
			closeFDs(fds)
			s.release(q.Slot)
			continue
		}
		err = s.spawn(&q, fds)
		closeFDs(fds)
		if err != nil {
			return err
		}
	}
}

// hold keeps fds[0], the spawner's own lease on slot q.Slot (a read
// lock the runtime took for it).
func (s *spawnerServer) hold(q *spawnRequest, fds []int) {
	if len(fds) != 1 || q.Slot < 0 || q.Slot >= uidSlots || (q.Budget != "" && sandbox.CheckBudgetID(q.Budget) != nil) {
		closeFDs(fds)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.holds[q.Slot]; ok {
		unix.Close(old.fd)
	}
	s.holds[q.Slot] = heldSlot{fd: fds[0], budget: q.Budget}
	if q.StateDir != "" {
		s.stateDir = q.StateDir
	}
}

// release drops the lease on slot: the runtime has removed its cgroups.
func (s *spawnerServer) release(slot int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.holds[slot]; ok {
		unix.Close(h.fd)
		delete(s.holds, slot)
	}
}

// reclaim ends the spawner once the runtime is gone: see the package
// comment above. It never returns; concurrent callers wait for the first.
func (s *spawnerServer) reclaim() {
	start := time.Now()
	time.AfterFunc(reclaimLimit, func() {
		fmt.Fprintln(os.Stderr, "moat spawner: reclaim cut short after", reclaimLimit)
		os.Exit(1)
	})
	s.mu.Lock() // for good: no more starts or reaping by reap
	var layout *cgroupLayout
	if len(s.holds) > 0 {
		layout = findCgroups()
	}
	// A frozen process does not die of SIGKILL until thawed.
	for slot, h := range s.holds {
		thawV1(layout.slotPaths(h.budget, slot))
	}
	// The children are unreaped (reaping needs mu), so their pids are
	// theirs. An init's death ends every process of its pid namespace
	// before the init can be reaped.
	for pid := range s.kids {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	for len(s.kids) > 0 {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			break
		}
		delete(s.kids, pid)
	}
	deadline := start.Add(reclaimLimit - 500*time.Millisecond)
	var budgets []string
	for slot, h := range s.holds {
		for c, mnt := range layout.allMounts() {
			if err := removeSlotCgroup(mnt, h.budget, slot, deadline); err != nil {
				fmt.Fprintf(os.Stderr, "moat spawner: remove %s cgroup of slot %d: %v\n", c, slot, err)
			}
		}
		unix.Close(h.fd)
		if h.budget != "" && !slices.Contains(budgets, h.budget) {
			budgets = append(budgets, h.budget)
		}
	}
	if s.stateDir != "" {
		// The budgets go too if their owner, the runtime, is gone.
		if slots, err := openSlotLeases(s.stateDir); err == nil {
			for _, id := range budgets {
				reclaimBudget(layout, s.stateDir, id, slots)
			}
			slots.Close()
		}
		collectLayers(s.stateDir)
	}
	os.Exit(0)
}

// removeSlotCgroup removes the cgroup of slot under mnt (a hierarchy's
// mount point), moat/SLOT or, in budget, moat/budget-ID/SLOT, its child
// cgroups (the calls') first, through directory descriptors on the host's
// cgroup filesystem. Processes found in it (none once the slot's init is
// reaped, unless the cgroup holds some that never were its) are killed; a
// cgroup still busy is retried until deadline.
//
// Preconditions: budget is "" or a valid budget id (sandbox.CheckBudgetID).
func removeSlotCgroup(mnt, budget string, slot int, deadline time.Time) error {
	parent := filepath.Join(mnt, cgroupParent)
	if budget != "" {
		parent = filepath.Join(parent, budgetPrefix+budget)
	}
	pfd, err := unix.Open(parent, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	return removeCgroupAt(pfd, strconv.Itoa(slot), deadline, 0)
}

func removeCgroupAt(dirfd int, name string, deadline time.Time, level int) error {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0); err == nil && level < 4 {
		f := os.NewFile(uintptr(dup), name)
		ents, _ := f.ReadDir(-1)
		f.Close()
		for _, e := range ents {
			if e.IsDir() {
				if err := removeCgroupAt(fd, e.Name(), deadline, level+1); err != nil {
					return err
				}
			}
		}
	} else if err == nil {
		unix.Close(dup)
	}
	for {
		err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return err
		}
		killProcsAt(fd)
		time.Sleep(time.Millisecond) // an exiting task leaves the cgroup shortly
	}
}

// killProcsAt SIGKILLs the processes listed in the cgroup open as fd.
func killProcsAt(fd int) {
	pfd, err := unix.Openat(fd, "cgroup.procs", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(pfd), "cgroup.procs")
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, 1<<20))
	for _, w := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(w); err == nil && pid > 0 {
			_ = unix.Kill(pid, unix.SIGKILL)
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
	exe := selfExe
	if q.Argv[1] == InitArg {
		exe = s.initExe
	}
	pid, err := syscall.ForkExec(exe, q.Argv, &syscall.ProcAttr{Env: []string{}, Files: files, Sys: q.sysProcAttr()})
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
	s.kids[pid] = true
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
		delete(s.kids, pid)
		if s.lost {
			continue
		}
		if err := s.conn.SendValue("exit", &spawnMessage{Pid: pid, Exited: true, Status: uint32(ws)}); err != nil {
			// The runtime is gone: serve reads the end and reclaims.
			s.lost = true
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
// (the spawner's parent-death signal is tied to it); it starts inits from
// initExe.
func startSpawner(initPath, initExe string) (*spawnerClient, error) {
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
		c, err := startChild(initPath, []string{"moat", SpawnerArg, initExe}, []*os.File{devNull, devNull, os.Stderr, peer},
			// SIGTERM, not SIGKILL: the spawner reclaims what the
			// runtime's sandboxes hold before it exits.
			&syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM})
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

// hold hands the spawner lease, its own lock on slot (see
// slotLeases.shareSlot), with the id of the budget its sandbox runs in
// ("" for none; see the package comment above); the spawner keeps it
// until release. The caller keeps lease and closes it.
func (sc *spawnerClient) hold(slot int, lease *os.File, budget, stateDir string) error {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.dead != nil {
		return sc.dead
	}
	q := spawnRequest{Op: opHold, Slot: slot, StateDir: stateDir, Budget: budget}
	if err := sc.conn.SendValue("hold", &q, int(lease.Fd())); err != nil {
		return fmt.Errorf("spawner: %w", err)
	}
	runtime.KeepAlive(lease)
	return nil
}

// release takes slot back from the spawner: the runtime removed its
// cgroups itself.
func (sc *spawnerClient) release(slot int) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.dead == nil {
		_ = sc.conn.SendValue("release", &spawnRequest{Op: opRelease, Slot: slot})
	}
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
				c.pidfd.Close() // before exited: a child seen gone holds nothing
				close(c.exited)
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
		c.pidfd.Close()
		close(c.exited)
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
