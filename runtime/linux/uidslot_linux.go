package linux

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Every sandbox gets its own range of host uids and gids: inside ids
// 0..65535 map to uidBase + slot*65536 + id. The ranges lie far above the
// ids of host users and of /etc/subuid allocations.
const (
	uidBase   = 1 << 30
	uidsPer   = 1 << 16
	uidSlots  = 4096
	slotsFile = "uidslots.lock"
)

// uidSlot is a leased range of host ids. The lease is an OFD lock on one
// byte of a lock file: the kernel releases it when the holder dies, so a
// crashed moat leaks nothing.
type uidSlot struct {
	f    *os.File
	slot int
	// holder is the spawner that holds a copy of the lease, if any; it
	// is told to drop it on release.
	holder *spawnerClient
}

// hostBase is the host uid that uid 0 of the sandbox maps to.
func (s *uidSlot) hostBase() uint32 { return uint32(uidBase + s.slot*uidsPer) }

// release drops the lease (the OFD lock goes with the last descriptor of
// it, the spawner's copy included). Call once the slot's cgroups are gone.
func (s *uidSlot) release() {
	if s == nil {
		return
	}
	if s.holder != nil {
		s.holder.release(s.slot)
		s.holder = nil
	}
	if s.f != nil {
		s.f.Close() // drops the OFD lock
		s.f = nil
	}
}

var errNoSlot = errors.New("all uid ranges are in use")

// leaseUIDSlot takes a free slot, starting at a random one.
func leaseUIDSlot(stateDir string) (*uidSlot, error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(stateDir, slotsFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("uid slots: %w", err)
	}
	start := rand.IntN(uidSlots)
	for i := range uidSlots {
		slot := (start + i) % uidSlots
		ok, err := tryLock(f, slot)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("uid slots: lock: %w", err)
		}
		if ok {
			return &uidSlot{f: f, slot: slot}, nil
		}
	}
	f.Close()
	return nil, errNoSlot
}

// unlock drops this descriptor's lock on byte slot.
func unlock(f *os.File, slot int) error {
	lk := unix.Flock_t{Type: unix.F_UNLCK, Whence: 0, Start: int64(slot), Len: 1}
	return unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
}

// tryLock takes the OFD write lock on byte slot of f without waiting.
func tryLock(f *os.File, slot int) (bool, error) {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: int64(slot), Len: 1}
	err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
	if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
		return false, nil
	}
	return err == nil, err
}
