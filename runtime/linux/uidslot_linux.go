package linux

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// Every sandbox gets its own range of host uids and gids: inside ids
// 0..65535 map to uidBase + slot*65536 + id. The ranges lie far above the
// ids of host users and of /etc/subuid allocations.
const (
	uidBase   = 1 << 30
	uidsPer   = 1 << 16
	uidSlots  = 8192 // ids up to 1<<30 + 8192<<16 = 3<<29, below 1<<31
	slotsFile = "uidslots.lock"
)

// Uid slot leases. A lease is an OFD lock on byte slot of
// stateDir/uidslots.lock: the kernel drops it with the last descriptor of
// its open file description, so a crashed moat leaks nothing, and a slot
// is free when nobody holds a lock on its byte (taking a write lock, as
// leases, sweeps and reclaims do, then succeeds).
//
// A runtime takes all its leases through one open file description
// (slotLeases), opened with its first lease and closed with its last:
// however many sandboxes it holds, that is one descriptor. Locks of one
// description never conflict with each other, so the slots it holds are
// also counted in memory, and never leased twice.
//
// With a spawner (daemon mode) each lease is held twice, so that it lasts
// until the sandbox's init and cgroups are gone whichever process dies
// first: the runtime turns its write lock into a read lock and hands the
// spawner a read lock of its own on the same byte, on a description of
// its own (shareSlot); the slot stays taken while either lock is held.
// Nobody else takes read locks, so no other moat can lease it meanwhile.

// slotLeases is one runtime's uid slot leases.
type slotLeases struct {
	stateDir string

	mu   sync.Mutex
	f    *os.File     // the lock file; open while held is not empty
	held map[int]bool // the slots this runtime holds
}

// uidSlot is a leased range of host ids.
type uidSlot struct {
	leases *slotLeases
	slot   int
	// holder is the spawner that holds a copy of the lease, if any; it
	// is told to drop it on release.
	holder *spawnerClient
	done   bool
}

// hostBase is the host uid that uid 0 of the sandbox maps to.
func (s *uidSlot) hostBase() uint32 { return uint32(uidBase + s.slot*uidsPer) }

// release drops the lease: the spawner's copy, if any, then the runtime's
// own lock. Call once the slot's cgroups are gone. Safe on nil and more
// than once.
func (s *uidSlot) release() {
	if s == nil || s.done {
		return
	}
	s.done = true
	if s.holder != nil {
		s.holder.release(s.slot)
		s.holder = nil
	}
	s.leases.drop(s.slot)
}

var errNoSlot = errors.New("all uid ranges are in use")

// lease takes a free slot, starting at a random one.
func (l *slotLeases) lease() (*uidSlot, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		if err := os.MkdirAll(l.stateDir, 0o700); err != nil {
			return nil, fmt.Errorf("state dir: %w", err)
		}
		f, err := openSlotLeases(l.stateDir)
		if err != nil {
			return nil, fmt.Errorf("uid slots: %w", err)
		}
		l.f, l.held = f, map[int]bool{}
	}
	start := rand.IntN(uidSlots)
	for i := range uidSlots {
		slot := (start + i) % uidSlots
		if l.held[slot] {
			continue
		}
		ok, err := tryLock(l.f, slot)
		if err != nil {
			l.closeIfIdle()
			return nil, fmt.Errorf("uid slots: lock: %w", err)
		}
		if ok {
			l.held[slot] = true
			return &uidSlot{leases: l, slot: slot}, nil
		}
	}
	l.closeIfIdle()
	return nil, errNoSlot
}

// openSlotLeases opens the uid slots' lock file on an open file
// description of its own, whose locks conflict with every other's (this
// process's leases too).
func openSlotLeases(stateDir string) (*os.File, error) {
	return os.OpenFile(filepath.Join(stateDir, slotsFile), os.O_RDWR|os.O_CREATE, 0o600)
}

// drop gives slot back: its lock goes (with the descriptor, when it was
// the last slot held).
func (l *slotLeases) drop(slot int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.held[slot] {
		return
	}
	delete(l.held, slot)
	if len(l.held) > 0 {
		_ = unlock(l.f, slot) // cannot fail on an open description
		return
	}
	l.closeIfIdle()
}

// closeIfIdle closes the lock file when no slot is held.
//
// Preconditions: l.mu held.
func (l *slotLeases) closeIfIdle() {
	if len(l.held) == 0 && l.f != nil {
		l.f.Close() // drops every lock of the description
		l.f = nil
	}
}

// shareSlot returns a new open file description of the lock file holding
// a read lock on s's byte, for the spawner to keep (see above), after
// turning the runtime's own lock on it into a read lock. The caller
// closes the returned file once it has handed it over.
func (l *slotLeases) shareSlot(s *uidSlot) (*os.File, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.held[s.slot] {
		return nil, fmt.Errorf("uid slot %d is not leased", s.slot)
	}
	if err := setLock(l.f, s.slot, unix.F_RDLCK); err != nil {
		return nil, fmt.Errorf("uid slot %d: share: %w", s.slot, err)
	}
	// Through /proc/self/fd: the same file, even if the path has been
	// replaced since.
	f, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", l.f.Fd()), os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("uid slot %d: share: %w", s.slot, err)
	}
	if err := setLock(f, s.slot, unix.F_RDLCK); err != nil {
		f.Close()
		return nil, fmt.Errorf("uid slot %d: share: %w", s.slot, err)
	}
	return f, nil
}

// unlock drops this descriptor's lock on byte slot.
func unlock(f *os.File, slot int) error {
	return setLock(f, slot, unix.F_UNLCK)
}

// setLock sets this description's lock on byte slot to typ (F_RDLCK,
// F_WRLCK or F_UNLCK) without waiting; a lock it has is converted.
func setLock(f *os.File, slot int, typ int16) error {
	lk := unix.Flock_t{Type: typ, Whence: 0, Start: int64(slot), Len: 1}
	return unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
}

// tryLock takes the OFD write lock on byte slot of f without waiting.
func tryLock(f *os.File, slot int) (bool, error) {
	err := setLock(f, slot, unix.F_WRLCK)
	if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
		return false, nil
	}
	return err == nil, err
}
