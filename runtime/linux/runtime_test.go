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

func TestLeaseUIDSlot(t *testing.T) {
	dir := t.TempDir()
	a, err := leaseUIDSlot(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := leaseUIDSlot(dir)
	if err != nil {
		t.Fatal(err)
	}
	if a.slot == b.slot {
		t.Fatalf("two live leases share slot %d", a.slot)
	}
	if a.hostBase() < uidBase || a.hostBase()%uidsPer != 0 {
		t.Fatalf("base %d", a.hostBase())
	}
	// While leased, nobody else can take the slot; once released (the
	// OFD lock dies with the descriptor), it is free again.
	f, err := os.OpenFile(filepath.Join(dir, slotsFile), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if ok, err := tryLock(f, a.slot); ok || err != nil {
		t.Fatalf("leased slot locked twice: %v %v", ok, err)
	}
	a.release()
	b.release()
	if ok, err := tryLock(f, a.slot); !ok || err != nil {
		t.Fatalf("released slot not free: %v %v", ok, err)
	}
}
