package sandboxinit

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRestrictThread: a ruleset enforced with restrictThread restricts
// the calling thread only: there, writing beneath a directory the rules
// leave read-only is refused (EACCES) while a directory granted write is
// not; another thread of the process (control) writes anywhere.
func TestRestrictThread(t *testing.T) {
	abi, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 || abi < 1 {
		t.Skip("Landlock is not available")
	}
	ro, rw := t.TempDir(), t.TempDir()
	type outcome struct{ ro, rw error }
	done := make(chan outcome, 1)
	go func() {
		// Locked and never unlocked: the restricted thread ends with
		// this goroutine, no other goroutine ever runs on it.
		runtime.LockOSThread()
		rs, err := newRuleset(int(abi))
		if err == nil {
			err = rs.allow(llRead, false, "/")
		}
		if err == nil {
			err = rs.allow(llReadWrite, false, rw)
		}
		if err == nil {
			err = restrictThread(rs.fd)
			rs.close()
		}
		if err != nil {
			done <- outcome{err, err}
			return
		}
		done <- outcome{
			ro: os.WriteFile(filepath.Join(ro, "f"), nil, 0o644),
			rw: os.WriteFile(filepath.Join(rw, "f"), nil, 0o644),
		}
	}()
	got := <-done
	if !errors.Is(got.ro, unix.EACCES) {
		t.Errorf("restricted thread writing in a read-only place: %v, want EACCES", got.ro)
	}
	if got.rw != nil {
		t.Errorf("restricted thread writing in a writable place: %v", got.rw)
	}
	if err := os.WriteFile(filepath.Join(ro, "g"), nil, 0o644); err != nil {
		t.Errorf("control: another thread writing in the read-only place: %v", err)
	}
}

// TestLandlockHandled: each ABI handles what it knows, and less than 1
// is refused.
func TestLandlockHandled(t *testing.T) {
	if _, _, err := landlockHandled(0); !errors.Is(err, errNoLandlock) {
		t.Errorf("ABI 0: %v", err)
	}
	fs1, sc1, _ := landlockHandled(1)
	fs7, sc7, _ := landlockHandled(7)
	fs9, sc9, _ := landlockHandled(9)
	if fs1&unix.LANDLOCK_ACCESS_FS_REFER != 0 || fs1&unix.LANDLOCK_ACCESS_FS_TRUNCATE != 0 || sc1 != 0 {
		t.Errorf("ABI 1 handles %#x, scopes %#x", fs1, sc1)
	}
	if fs7&unix.LANDLOCK_ACCESS_FS_IOCTL_DEV == 0 || fs7&unix.LANDLOCK_ACCESS_FS_REFER == 0 || sc7 != unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET|unix.LANDLOCK_SCOPE_SIGNAL {
		t.Errorf("ABI 7 handles %#x, scopes %#x", fs7, sc7)
	}
	if fs9 != fs7 || sc9 != sc7 {
		t.Errorf("a newer ABI is used as %d: %#x %#x", maxLandlockABI, fs9, sc9)
	}
}
