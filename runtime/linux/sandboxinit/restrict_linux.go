package sandboxinit

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/guest"
)

// This file runs in the sandbox's init: it applies the restrictions the
// host validated (restrict_linux.go) while the init builds the root.

// applyRestrictions applies rs beneath root, parents before children,
// each path resolved with RESOLVE_IN_ROOT|RESOLVE_NO_SYMLINKS: a symlink
// on a path fails the setup, a path that does not exist is skipped (and
// reported). A path beneath an already hidden directory is covered by it
// and counts as applied. With no restrictions it does nothing.
//
// Preconditions: the init, root of the sandbox's user namespace, before
// the root is made read-only and pivoted into; no sandbox process runs.
func applyRestrictions(root string, rs []guest.Restriction) (*guest.RestrictReport, error) {
	if len(rs) == 0 {
		return nil, nil
	}
	order := make([]guest.Restriction, len(rs))
	copy(order, rs)
	sort.SliceStable(order, func(a, b int) bool {
		return strings.Count(order[a].Path, "/") < strings.Count(order[b].Path, "/")
	})
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, stageErr("open root", err)
	}
	defer unix.Close(rootFD)
	var hs hideSource
	defer hs.close()
	rep := &guest.RestrictReport{}
	var hidden []string
	for _, r := range order {
		if under(r.Path, hidden) {
			rep.Applied++
			continue
		}
		ok, err := restrictOne(rootFD, r, &hs)
		if err != nil {
			return nil, stageErr("restrict "+r.Path, err)
		}
		if !ok {
			rep.Skipped = append(rep.Skipped, r.Path)
			continue
		}
		rep.Applied++
		if r.Mode == guest.RestrictHide {
			hidden = append(hidden, r.Path)
		}
	}
	return rep, nil
}

// under reports whether p is strictly beneath one of dirs.
func under(p string, dirs []string) bool {
	for _, d := range dirs {
		if strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// restrictOne applies one restriction; false means its path does not exist.
func restrictOne(rootFD int, r guest.Restriction, hs *hideSource) (bool, error) {
	fd, err := openRestricted(rootFD, r.Path)
	switch {
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR):
		return false, nil
	case errors.Is(err, unix.ELOOP):
		return false, errors.New("a symlink is on the path")
	case err != nil:
		return false, err
	}
	defer unix.Close(fd)
	var tree int
	switch r.Mode {
	case guest.RestrictHide:
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return false, err
		}
		if tree, err = hs.clone(st.Mode&unix.S_IFMT == unix.S_IFDIR); err != nil {
			return false, fmt.Errorf("hide: %w", err)
		}
	case guest.RestrictReadOnly, guest.RestrictPin:
		tree, err = unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
		if err != nil {
			return false, fmt.Errorf("clone mount: %w", err)
		}
		// The clone keeps each mount's idmap and flags; nosuid and
		// nodev are (re)asserted, read-only added for read-only.
		attr := uint64(unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
		if r.Mode == guest.RestrictReadOnly {
			attr |= unix.MOUNT_ATTR_RDONLY
		}
		if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: attr}); err != nil {
			unix.Close(tree)
			return false, fmt.Errorf("set mount attributes: %w", err)
		}
	default:
		return false, fmt.Errorf("unknown mode %q", r.Mode)
	}
	err = unix.MoveMount(tree, "", fd, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
	unix.Close(tree)
	if err != nil {
		return false, fmt.Errorf("mount: %w", err)
	}
	return true, nil
}

// openRestricted opens path beneath rootFD as O_PATH without following any
// symlink (the last component included). No sandbox process runs yet, but
// the host may rename inside a host-bound workspace meanwhile: EAGAIN (a
// rename raced the resolution) is retried a few times.
func openRestricted(rootFD int, path string) (int, error) {
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	rel := strings.TrimPrefix(path, "/")
	for range 8 {
		fd, err := unix.Openat2(rootFD, rel, how)
		if !errors.Is(err, unix.EAGAIN) {
			return fd, err
		}
	}
	return -1, unix.EAGAIN
}

// hideSource is the init's private tmpfs for hiding: an empty directory
// "d" and an empty file "f", mode 000, owned by the sandbox's root, on a
// read-only, nosuid, nodev, noexec mount that is never attached itself.
// It is made on the first hide only.
type hideSource struct {
	made bool
	mfd  int
}

func (h *hideSource) close() {
	if h.made {
		unix.Close(h.mfd)
	}
}

// clone returns a detached bind of the hidden directory or file.
func (h *hideSource) clone(dir bool) (int, error) {
	if !h.made {
		mfd, err := makeHideTmpfs()
		if err != nil {
			return -1, err
		}
		h.mfd, h.made = mfd, true
	}
	name := "f"
	if dir {
		name = "d"
	}
	return unix.OpenTree(h.mfd, name, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
}

func makeHideTmpfs() (int, error) {
	fsfd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, err
	}
	defer unix.Close(fsfd)
	for _, kv := range [][2]string{{"size", "4k"}, {"nr_inodes", "4"}, {"mode", "0755"}} {
		if err := unix.FsconfigSetString(fsfd, kv[0], kv[1]); err != nil {
			return -1, fmt.Errorf("tmpfs %s: %w", kv[0], err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, err
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return -1, err
	}
	err = unix.Mkdirat(mfd, "d", 0)
	if err == nil {
		var fd int
		fd, err = unix.Openat(mfd, "f", unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
		}
	}
	// The umask only clears bits; make the modes exact anyway.
	for _, n := range []string{"d", "f"} {
		if err == nil {
			err = unix.Fchmodat(mfd, n, 0, 0)
		}
	}
	if err == nil {
		// Bind clones inherit the flags: every hide is read-only too.
		err = unix.MountSetattr(mfd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY})
	}
	if err != nil {
		unix.Close(mfd)
		return -1, err
	}
	return mfd, nil
}
