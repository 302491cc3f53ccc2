//go:build linux

package linux

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/moat-sandbox/moat/sandbox"
)

func TestMergeEnv(t *testing.T) {
	got, err := mergeEnv([]string{"A=1", "B=2"}, []string{"B=3", "C=4", "A=", "C=5"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"A=", "B=3", "C=5"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v want %v", got, want)
	}
	for _, bad := range []string{"NOEQ", "=v", "A=b\x00c"} {
		if _, err := mergeEnv(nil, []string{bad}); !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Errorf("%q: err %v", bad, err)
		}
	}
}

func TestValidHostname(t *testing.T) {
	for _, ok := range []string{"sandbox", "a-b.c", "x1"} {
		if err := sandbox.CheckHostname(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"-x", ".x", "a b", "a/b", "a\nb", string(make([]byte, 65))} {
		if err := sandbox.CheckHostname(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestValidateTarget(t *testing.T) {
	for _, ok := range []string{"/opt/x", "/home/sandbox/.cfg", "/workspace/sub", "/data"} {
		if err := validateTarget(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "rel", "/", "/proc", "/proc/sys", "/dev/x", "/etc", "/etc/passwd", "/a/../b", "/a/", "/a//b"} {
		if err := validateTarget(bad); !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Errorf("%q: err %v", bad, err)
		}
	}
}

// TestLeaseUIDSlot: a runtime's leases are distinct slots nobody else can
// take, all on one descriptor; each slot is free again once released, the
// descriptor closed with the last.
func TestLeaseUIDSlot(t *testing.T) {
	dir := t.TempDir()
	leases := &slotLeases{stateDir: dir}
	a, err := leases.lease()
	if err != nil {
		t.Fatal(err)
	}
	b, err := leases.lease()
	if err != nil {
		t.Fatal(err)
	}
	if a.slot == b.slot {
		t.Fatalf("two live leases share slot %d", a.slot)
	}
	if a.hostBase() < uidBase || a.hostBase()%uidsPer != 0 {
		t.Fatalf("base %d", a.hostBase())
	}
	// While leased, nobody else can take the slot; once released, it is
	// free again.
	f, err := os.OpenFile(filepath.Join(dir, slotsFile), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if ok, err := tryLock(f, a.slot); ok || err != nil {
		t.Fatalf("leased slot locked twice: %v %v", ok, err)
	}
	a.release()
	a.release() // a no-op
	if ok, err := tryLock(f, a.slot); !ok || err != nil {
		t.Fatalf("released slot not free: %v %v", ok, err)
	}
	if err := unlock(f, a.slot); err != nil {
		t.Fatal(err)
	}
	if ok, err := tryLock(f, b.slot); ok || err != nil {
		t.Fatalf("the other lease went with the first: %v %v", ok, err)
	}
	if leases.f == nil {
		t.Fatal("lock file closed while a slot is held")
	}
	b.release()
	if ok, err := tryLock(f, b.slot); !ok || err != nil {
		t.Fatalf("released slot not free: %v %v", ok, err)
	}
	if leases.f != nil {
		t.Error("lock file still open with no slot held")
	}
}

// TestSharedUIDSlot: a slot shared with a spawner (shareSlot) stays taken
// while either holder keeps its lock, whichever lets go first, and is
// never leased twice by its runtime meanwhile.
func TestSharedUIDSlot(t *testing.T) {
	dir := t.TempDir()
	leases := &slotLeases{stateDir: dir}
	taken := func(slot int) bool { return slotTaken(t, dir, slot) }
	for _, runtimeFirst := range []bool{true, false} {
		s, err := leases.lease()
		if err != nil {
			t.Fatal(err)
		}
		held, err := leases.shareSlot(s)
		if err != nil {
			t.Fatal(err)
		}
		// The runtime's own next leases avoid it.
		var more []*uidSlot
		for range 64 {
			m, err := leases.lease()
			if err != nil {
				t.Fatal(err)
			}
			if m.slot == s.slot {
				t.Fatalf("slot %d leased twice by its runtime", s.slot)
			}
			more = append(more, m)
		}
		if runtimeFirst {
			s.release() // the runtime is done; the spawner still holds it
			if !taken(s.slot) {
				t.Fatal("slot free while the spawner holds it")
			}
			held.Close()
		} else {
			held.Close() // the spawner died; the runtime still holds it
			if !taken(s.slot) {
				t.Fatal("slot free while the runtime holds it")
			}
			s.release()
		}
		if taken(s.slot) {
			t.Errorf("slot still taken once both let go (runtime first: %v)", runtimeFirst)
		}
		for _, m := range more {
			m.release()
		}
	}
	if _, err := leases.shareSlot(&uidSlot{leases: leases, slot: 7}); err == nil {
		t.Error("a slot not leased was shared")
	}
}
