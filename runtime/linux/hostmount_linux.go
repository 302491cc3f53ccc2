package linux

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/guest"
	"github.com/moat-sandbox/moat/sandbox"
)

// UsernsHoldArg is argv[1] of a moat binary re-executed only to hold a
// user namespace open while the host takes a descriptor of it (IsUsernsHold).
const UsernsHoldArg = "__moat_userns_hold"

// IsUsernsHold reports whether this process is a user-namespace holder.
func IsUsernsHold() bool { return len(os.Args) > 1 && os.Args[1] == UsernsHoldArg }

// UsernsHold blocks until its stdin closes, then exits. It never returns.
func UsernsHold() {
	var b [1]byte
	_, _ = os.Stdin.Read(b[:])
	os.Exit(0)
}

// hostTree is one host path turned into a detached mount tree.
type hostTree struct {
	mount guest.Mount
	fd    int
}

// reservedTargets may not be bind targets: they hold the sandbox's own
// masks and devices.
var reservedTargets = []string{"/proc", "/dev", "/etc", "/"}

// validateTarget checks a bind target inside the sandbox.
func validateTarget(t string) error {
	if !filepath.IsAbs(t) {
		return fmt.Errorf("%w: bind target %q is not absolute", sandbox.ErrInvalidSpec, t)
	}
	if filepath.Clean(t) != t || strings.Contains(t, "/../") {
		return fmt.Errorf("%w: bind target %q is not a clean path", sandbox.ErrInvalidSpec, t)
	}
	for _, r := range reservedTargets {
		if t == r || (r != "/" && strings.HasPrefix(t, r+"/")) {
			return fmt.Errorf("%w: bind target %q is reserved", sandbox.ErrInvalidSpec, t)
		}
	}
	return nil
}

// openHostPath opens a host path given by the operator as O_PATH, refusing
// a symlink as the last component and magic links anywhere, and returns the
// fd and its stat. Everything after this works on the fd, so the path
// cannot be swapped between check and mount.
func openHostPath(what, p string) (int, *unix.Stat_t, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return -1, nil, fmt.Errorf("%w: %s %q: %v", sandbox.ErrInvalidSpec, what, p, err)
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, abs, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return -1, nil, fmt.Errorf("%w: %s %s: %v", sandbox.ErrInvalidSpec, what, abs, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("%s %s: %w", what, abs, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR, unix.S_IFREG:
	case unix.S_IFLNK:
		unix.Close(fd)
		return -1, nil, fmt.Errorf("%w: %s %s is a symlink; bind the path it points to", sandbox.ErrInvalidSpec, what, abs)
	default:
		unix.Close(fd)
		return -1, nil, fmt.Errorf("%w: %s %s is not a directory or regular file", sandbox.ErrInvalidSpec, what, abs)
	}
	return fd, &st, nil
}

// idmapCache holds the user namespaces that translate host owners into the
// sandbox user, one per distinct host owner, for one sandbox's setup.
type idmapCache struct {
	start startFunc
	// hostUID and hostGID are the host ids of the sandbox user.
	hostUID, hostGID uint32
	fds              map[[2]uint32]int
}

func (c *idmapCache) close() {
	for _, fd := range c.fds {
		unix.Close(fd)
	}
}

// userns returns a user namespace fd that maps host uid/gid (as "inside"
// ids) to the sandbox user's host ids: applied to a mount as its idmap, a
// file owned by uid on disk appears owned by the sandbox user, and what the
// sandbox user creates is stored as owned by uid.
func (c *idmapCache) userns(uid, gid uint32) (int, error) {
	key := [2]uint32{uid, gid}
	if fd, ok := c.fds[key]; ok {
		return fd, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return -1, err
	}
	defer r.Close()
	defer w.Close()
	p, err := c.start([]string{"moat", UsernsHoldArg}, []*os.File{r},
		&syscall.SysProcAttr{
			Cloneflags:  unix.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: int(uid), HostID: int(c.hostUID), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: int(gid), HostID: int(c.hostGID), Size: 1}},
			Pdeathsig:   syscall.SIGKILL,
		})
	if err != nil {
		return -1, fmt.Errorf("idmap user namespace: %w", err)
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", p.pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	w.Close()
	p.killAndWait()
	if err != nil {
		return -1, fmt.Errorf("idmap user namespace: %w", err)
	}
	if c.fds == nil {
		c.fds = map[[2]uint32]int{}
	}
	c.fds[key] = fd
	return fd, nil
}

// hostSource is a host path the spec names, opened (O_PATH) and checked,
// with where it goes in the sandbox.
type hostSource struct {
	what, src string
	fd        int
	st        unix.Stat_t
	mount     guest.Mount
}

// openSources opens and checks the workspace and every bind source, and
// checks every target, without creating anything on the host: the
// workspace is a directory, every source a directory or regular file
// (never a symlink), every target a clean absolute path outside the
// reserved ones and used once. On error nothing stays open.
func openSources(spec *sandbox.Spec) ([]hostSource, error) {
	var srcs []hostSource
	fail := func(err error) ([]hostSource, error) {
		closeSources(srcs)
		return nil, err
	}
	open := func(what, src, target string, writable, wantDir bool) error {
		fd, st, err := openHostPath(what, src)
		if err != nil {
			return err
		}
		isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
		if wantDir && !isDir {
			unix.Close(fd)
			return fmt.Errorf("%w: %s %s is not a directory", sandbox.ErrInvalidSpec, what, src)
		}
		srcs = append(srcs, hostSource{what: what, src: src, fd: fd, st: *st,
			mount: guest.Mount{Target: target, Writable: writable, File: !isDir}})
		return nil
	}
	// /workspace is always taken: by -w or by the in-memory workspace.
	seen := map[string]bool{sandbox.WorkspaceDir: true}
	if spec.Workspace != "" {
		if err := open("workspace", spec.Workspace, sandbox.WorkspaceDir, true, true); err != nil {
			return fail(err)
		}
	}
	for _, b := range spec.Binds {
		target := b.Target
		if target == "" {
			target = b.Source
		}
		kind := "--ro"
		if b.Writable {
			kind = "--rw"
		}
		if err := validateTarget(target); err != nil {
			return fail(err)
		}
		if seen[target] {
			return fail(fmt.Errorf("%w: two mounts at %s", sandbox.ErrInvalidSpec, target))
		}
		seen[target] = true
		if err := open(kind, b.Source, target, b.Writable, false); err != nil {
			return fail(err)
		}
	}
	return srcs, nil
}

func closeSources(srcs []hostSource) {
	for _, s := range srcs {
		unix.Close(s.fd)
	}
}

// mountTrees turns each opened source into a detached, recursive, idmapped
// mount tree with nosuid and nodev (and read-only unless writable), working
// on the descriptor opened by openSources so the path cannot be swapped in
// between. The caller owns the returned fds; on error none stays open.
func mountTrees(srcs []hostSource, ids *idmapCache) ([]hostTree, error) {
	var trees []hostTree
	for _, s := range srcs {
		tree, err := mountTree(s, ids)
		if err != nil {
			for _, t := range trees {
				unix.Close(t.fd)
			}
			return nil, err
		}
		trees = append(trees, hostTree{mount: s.mount, fd: tree})
	}
	return trees, nil
}

func mountTree(s hostSource, ids *idmapCache) (int, error) {
	tree, err := unix.OpenTree(s.fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
	if err != nil {
		return -1, fmt.Errorf("%s %s: clone mount: %w", s.what, s.src, err)
	}
	uns, err := ids.userns(s.st.Uid, s.st.Gid)
	if err != nil {
		unix.Close(tree)
		return -1, err
	}
	// A clone of a shared host mount is in the host mount's peer group:
	// whatever the init later mounts inside it (a nested bind, a
	// restriction) would propagate to the host's mount table. Private
	// cuts it out of that group, both ways.
	attr := &unix.MountAttr{
		Attr_set:    unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV,
		Userns_fd:   uint64(uns),
		Propagation: unix.MS_PRIVATE,
	}
	if !s.mount.Writable {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		unix.Close(tree)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EPERM) {
			return -1, fmt.Errorf("%w: %s %s: its filesystem does not support idmapped mounts (%v)", sandbox.ErrUnsupported, s.what, s.src, err)
		}
		return -1, fmt.Errorf("%s %s: idmap: %w", s.what, s.src, err)
	}
	return tree, nil
}

// socketBuffer is the send buffer of each end of a sandbox's control
// socket: one packet of a SOCK_SEQPACKET socket must fit in it, and the
// default (net.core.wmem_default, 208 KiB) is below guest.MaxMessage, so
// a large request (argv and environment, secrets) failed with EMSGSIZE.
const socketBuffer = guest.MaxMessage + 64<<10

// growSocketBuffers raises the send buffers of a control socket pair to
// socketBuffer: SO_SNDBUFFORCE as root, else SO_SNDBUF (capped by
// net.core.wmem_max); a request that still does not fit is refused as too
// big (sendFailure).
func growSocketBuffers(files ...*os.File) {
	for _, f := range files {
		rc, err := f.SyscallConn()
		if err != nil {
			continue
		}
		_ = rc.Control(func(fd uintptr) {
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, socketBuffer) != nil {
				_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, socketBuffer)
			}
		})
	}
}
