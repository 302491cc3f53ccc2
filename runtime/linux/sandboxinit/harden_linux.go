package sandboxinit

import (
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/guest"
	"github.com/moat-sandbox/moat/runtime/linux/seccomp"
	"github.com/moat-sandbox/moat/sandbox"
)

// lastCap is the highest capability number any kernel defines today; the
// loop below stops at the first number the running kernel rejects.
const lastCap = 63

// harden applies the process-level protections to the init after the root
// is built: hostname, loopback, capabilities, no_new_privs, rlimits,
// Landlock and seccomp. Everything the init starts afterwards inherits them.
// It returns the Landlock ruleset's descriptor (see applyLandlock).
//
// Preconditions: called once, after pivot, by the init's main thread,
// locked (root in its user namespace); landlockABI >= 1.
func harden(s *guest.Setup, mounts []guest.Mount, landlockABI int) (int, error) {
	if err := unix.Sethostname([]byte(s.Hostname)); err != nil {
		return -1, stageErr("sethostname", err)
	}
	if err := unix.Setdomainname([]byte("(none)")); err != nil {
		return -1, stageErr("setdomainname", err)
	}
	if !s.SharedNet {
		if err := loopbackUp(); err != nil {
			return -1, stageErr("bring up loopback", err)
		}
	}
	// /proc/1 of a sandbox (this process) must not be readable or
	// ptrace-able by its processes: CVE-2019-5736 used /proc/<pid>/exe of
	// the runtime to overwrite the runtime binary.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return -1, stageErr("set non-dumpable", err)
	}
	if err := unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{}); err != nil {
		return -1, stageErr("rlimit core", err)
	}
	if err := dropBoundingCaps(); err != nil {
		return -1, err
	}
	if err := threadPrctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL); err != nil {
		return -1, stageErr("clear ambient capabilities", err)
	}
	if err := clearInheritable(); err != nil {
		return -1, err
	}
	// no_new_privs is per thread too; seccomp's TSYNC below sets it on
	// every other thread of the init.
	if err := threadPrctl(unix.PR_SET_NO_NEW_PRIVS, 1); err != nil {
		return -1, stageErr("no_new_privs", err)
	}
	ruleset, err := applyLandlock(mounts, s, landlockABI)
	if err != nil {
		return -1, stageErr("landlock", err)
	}
	prog, err := seccomp.Decode(s.Seccomp)
	if err == nil {
		err = seccomp.Install(prog)
	}
	if err != nil {
		unix.Close(ruleset)
		return -1, stageErr("seccomp", err)
	}
	return ruleset, nil
}

// threadPrctl applies a per-thread prctl to the calling thread. Capability
// sets belong to threads: the init runs its setup and every fork of a
// sandbox process on its main thread, locked (see Init), so this thread's
// sets are the ones every sandbox process inherits.
func threadPrctl(option, arg uintptr) error {
	return unix.Prctl(int(option), arg, 0, 0, 0)
}

// dropBoundingCaps empties the capability bounding set, so no execve inside
// the sandbox can ever regain a capability, whatever the uid or file
// capabilities.
func dropBoundingCaps() error {
	for c := 0; c <= lastCap; c++ {
		if err := threadPrctl(unix.PR_CAPBSET_DROP, uintptr(c)); err != nil {
			if err == unix.EINVAL { // past the kernel's last capability
				return nil
			}
			return stageErr(fmt.Sprintf("drop capability %d from bounding set", c), err)
		}
	}
	return nil
}

func clearInheritable() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return stageErr("capget", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	return stageErr("capset", unix.Capset(&hdr, &data[0]))
}

// loopbackUp sets IFF_UP on lo, the only interface of the sandbox's network
// namespace; the kernel then gives it 127.0.0.1/8 and ::1.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// applyLandlock mirrors the filesystem policy as a Landlock ruleset and
// enforces it on the calling thread (see landlock_linux.go for which
// threads get it, and why not all): the whole tree readable and
// executable, writes only where the sandbox has writable mounts, abstract
// Unix sockets and signals scoped to the sandbox. With restrictions, a
// writable place may be gone from the view (beneath a hidden directory):
// it gets no rule rather than failing the setup. With s.WritableRoot (an
// imported template), the root's own entries are writable too
// (rootWriteRules). It returns the ruleset's descriptor (close-on-exec),
// for the agent's file worker threads to enforce on themselves.
//
// Preconditions: the init's main thread, locked, after pivot_root.
func applyLandlock(mounts []guest.Mount, s *guest.Setup, abi int) (int, error) {
	restricted := len(s.Restrict) > 0
	rw := []string{"/tmp", sandbox.HomeDir, "/dev/shm"}
	if s.MemoryWorkspace {
		rw = append(rw, sandbox.WorkspaceDir)
	}
	var rwFiles []string
	for _, m := range mounts {
		if !m.Writable {
			continue
		}
		if m.File {
			rwFiles = append(rwFiles, m.Target)
		} else {
			rw = append(rw, m.Target)
		}
	}
	if s.WritableRoot {
		dirs, files, err := rootWriteRules("", rootWriteExclusions(mounts, s.Restrict), slices.Concat(rw, rwFiles))
		if err != nil {
			return -1, err
		}
		rw, rwFiles = append(rw, dirs...), append(rwFiles, files...)
	}
	rs, err := newRuleset(abi)
	if err != nil {
		return -1, err
	}
	// REFER lets files move between directories of the writable roots
	// (mv, npm's and git's renames); without it rename(2) across
	// directories fails with EXDEV. A ruleset of ABI 1 does not handle
	// it (and then cannot allow it: such renames fail there).
	writable := uint64(llReadWrite | unix.LANDLOCK_ACCESS_FS_REFER)
	devFiles := []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"}
	for _, r := range []struct {
		access        uint64
		ignoreMissing bool
		paths         []string
	}{
		{llRead, false, []string{"/"}},
		{writable, restricted, rw},
		// Terminal ioctls need IOCTL_DEV on the device files.
		{(llReadWrite | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV) & llFile, false, devFiles},
		{llReadWrite | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV, false, []string{"/dev/pts"}},
		// /proc/self/... files some tools write (oom_score_adj, comm).
		{unix.LANDLOCK_ACCESS_FS_WRITE_FILE, false, []string{"/proc"}},
		{llReadWrite & llFile, restricted, rwFiles},
	} {
		if err := rs.allow(r.access, r.ignoreMissing, r.paths...); err != nil {
			rs.close()
			return -1, err
		}
	}
	if err := restrictThread(rs.fd); err != nil {
		rs.close()
		return -1, err
	}
	return rs.fd, nil
}

// maxRootRules bounds the Landlock rules rootWriteRules makes.
const maxRootRules = 4096

// rootWriteExclusions are the paths of the root that stay unwritable under
// Landlock when the root itself is writable: /dev, /proc and /sys (what the
// sandbox may write there has rules of its own), every read-only bind, and
// every hidden or read-only restricted path.
func rootWriteExclusions(mounts []guest.Mount, restrict []guest.Restriction) []string {
	ex := []string{"/dev", "/proc", "/sys"}
	for _, m := range mounts {
		if !m.Writable {
			ex = append(ex, m.Target)
		}
	}
	for _, r := range restrict {
		if r.Mode != guest.RestrictPin {
			ex = append(ex, r.Path)
		}
	}
	return ex
}

// rootWriteRules returns the directories and regular files of the root
// (read at fsRoot+path; fsRoot is "" in the init)
// that get write rules so that everything in the root is writable but the
// excluded paths and what lies beneath them. Landlock can only grant, and
// a rule covers a whole hierarchy, so a directory holding an excluded path
// gets no rule of its own: each of its entries gets one instead (and so
// on down to the excluded path). "/" always holds /dev and /proc, so no
// new entry can be made directly in "/" (nor in any directory that holds
// an excluded path). Paths in granted (the writable places, which have
// rules already) are left out, with what they hold. Symlinks, devices,
// fifos and sockets get no rule; nothing is followed.
//
// Preconditions: called by the init after pivot_root, before any sandbox
// process exists (nothing can change the tree under the walk).
func rootWriteRules(fsRoot string, exclude, granted []string) (dirs, files []string, err error) {
	isGranted := map[string]bool{}
	for _, g := range granted {
		isGranted[g] = true
	}
	isExcluded := map[string]bool{}
	for _, e := range exclude {
		isExcluded[e] = true
	}
	holdsExcluded := func(dir string) bool {
		for _, e := range exclude {
			if strings.HasPrefix(e, dir+"/") {
				return true
			}
		}
		return false
	}
	var walk func(dir string) error
	walk = func(dir string) error {
		ents, err := os.ReadDir(fsRoot + dir)
		if err != nil {
			return fmt.Errorf("writable root: %w", err)
		}
		for _, e := range ents {
			p := path.Join(dir, e.Name())
			if isGranted[p] || isExcluded[p] {
				continue
			}
			switch t := e.Type(); {
			case t.IsDir() && holdsExcluded(p):
				if err := walk(p); err != nil {
					return err
				}
				continue
			case t.IsDir():
				dirs = append(dirs, p)
			case t.IsRegular():
				files = append(files, p)
			default:
				continue
			}
			if len(dirs)+len(files) > maxRootRules {
				return fmt.Errorf("writable root: more than %d entries beside read-only paths", maxRootRules)
			}
		}
		return nil
	}
	if err := walk("/"); err != nil {
		return nil, nil, err
	}
	return dirs, files, nil
}
