package sandboxinit

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Landlock restricts threads, not processes: landlock_restrict_self puts
// the calling thread in a new domain, and a thread (or process) cloned
// from it inherits the domain. The init therefore builds its ruleset once
// (ruleset) and enforces it on exactly the threads that act for the
// sandbox, each on itself (restrictThread), instead of broadcasting the
// call to every thread of the Go runtime (go-landlock's psx way, which
// stops every thread twice, ~0.5 ms a start):
//
//   - the init's main thread, locked to the goroutine that builds the
//     root and then serves the agent (Main): it resolves every path of a
//     process request (cwd, the executable) and forks every sandbox
//     process, which inherit its domain;
//   - the agent's file worker threads (guest.Agent.SetThreadHardening),
//     locked to their goroutines for good, before they take the sandbox
//     user's identity and serve their first file operation.
//
// The init's other threads run only the agent's plumbing (reaping, the
// control socket, relaying pipes) and the Go runtime; no sandbox code,
// no path a sandbox names. seccomp's filter, installed with TSYNC, covers
// every thread regardless.

// Access rights (uapi linux/landlock.h), grouped as the rules use them.
const (
	llRead = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR
	// llWrite is every right a writable place grants beyond reading
	// (REFER and IOCTL_DEV are granted separately).
	llWrite = unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_REMOVE_DIR |
		unix.LANDLOCK_ACCESS_FS_REMOVE_FILE | unix.LANDLOCK_ACCESS_FS_MAKE_CHAR |
		unix.LANDLOCK_ACCESS_FS_MAKE_DIR | unix.LANDLOCK_ACCESS_FS_MAKE_REG |
		unix.LANDLOCK_ACCESS_FS_MAKE_SOCK | unix.LANDLOCK_ACCESS_FS_MAKE_FIFO |
		unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK | unix.LANDLOCK_ACCESS_FS_MAKE_SYM |
		unix.LANDLOCK_ACCESS_FS_TRUNCATE
	llReadWrite = llRead | llWrite
	// llFile are the rights that apply to a file that is not a
	// directory; the kernel refuses a rule granting others on one.
	llFile = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE |
		unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
)

// maxLandlockABI is the newest Landlock ABI whose rights the init
// handles; a newer kernel is used at this level.
const maxLandlockABI = 7

// errNoLandlock reports a setup without a usable Landlock ABI.
var errNoLandlock = errors.New("landlock is not available")

// landlockHandled returns the filesystem rights and the IPC scopes that a
// ruleset of Landlock ABI abi handles: every one that ABI knows (network
// rights none: network isolation is the network namespace's job).
func landlockHandled(abi int) (fs, scoped uint64, err error) {
	if abi < 1 {
		return 0, 0, fmt.Errorf("landlock ABI %d: %w", abi, errNoLandlock)
	}
	abi = min(abi, maxLandlockABI)
	fs = llReadWrite &^ unix.LANDLOCK_ACCESS_FS_TRUNCATE
	if abi >= 2 {
		fs |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 3 {
		fs |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	if abi >= 5 {
		fs |= unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	}
	if abi >= 6 {
		scoped = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL
	}
	return fs, scoped, nil
}

// ruleset is a Landlock ruleset being filled, then enforced.
type ruleset struct {
	fd      int
	handled uint64
}

// newRuleset creates an empty ruleset handling everything Landlock ABI
// abi can restrict (landlockHandled). The caller closes it.
func newRuleset(abi int) (*ruleset, error) {
	fs, scoped, err := landlockHandled(abi)
	if err != nil {
		return nil, err
	}
	attr := unix.LandlockRulesetAttr{Handled_access_fs: fs, Scoped: scoped}
	// Up to Scoped: an older kernel accepts the longer attribute as long
	// as the fields it does not know are zero (Scoped is, before ABI 6).
	size := unsafe.Offsetof(attr.Scoped) + unsafe.Sizeof(attr.Scoped)
	fd, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if e != 0 {
		return nil, fmt.Errorf("landlock_create_ruleset: %w", e)
	}
	return &ruleset{fd: int(fd), handled: fs}, nil
}

// close releases the ruleset; threads it was enforced on keep it.
func (r *ruleset) close() { unix.Close(r.fd) }

// allow grants access (narrowed to the rights the ruleset handles)
// beneath each of paths. A path that does not exist fails, unless
// ignoreMissing.
func (r *ruleset) allow(access uint64, ignoreMissing bool, paths ...string) error {
	access &= r.handled
	if access == 0 {
		return nil
	}
	for _, p := range paths {
		if err := r.allowOne(access, p); err != nil {
			if ignoreMissing && errors.Is(err, unix.ENOENT) {
				continue
			}
			return fmt.Errorf("landlock rule for %s: %w", p, err)
		}
	}
	return nil
}

func (r *ruleset) allowOne(access uint64, p string) error {
	fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	attr := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(fd)}
	_, _, e := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(r.fd), unix.LANDLOCK_RULE_PATH_BENEATH,
		uintptr(unsafe.Pointer(&attr)), 0, 0, 0)
	if e != 0 {
		return fmt.Errorf("landlock_add_rule: %w", e)
	}
	return nil
}

// restrictThread enforces the ruleset whose descriptor is fd on the
// calling thread (and whatever it clones afterwards), setting the
// thread's no_new_privs first, which Landlock requires of a thread
// without CAP_SYS_ADMIN.
//
// Preconditions: the caller has locked its goroutine to its OS thread for
// good (the thread must never run another goroutine unrestricted… nor
// restricted: it ends with its goroutine); the thread is not restricted by
// this ruleset already (each call stacks one more domain).
func restrictThread(fd int) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(fd), 0, 0); e != 0 {
		return fmt.Errorf("landlock_restrict_self: %w", e)
	}
	return nil
}
