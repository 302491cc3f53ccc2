package fstree

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"golang.org/x/sys/unix"
)

// resolveFlags confine a path walk to the directory it starts from and
// refuse every symlink on the way, the last component included.
const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// maxWalkDepth bounds the recursion of walks over trees this package did not
// necessarily write itself (TreeDigest, removals).
const maxWalkDepth = 4096

// opaqueXattr is the xattr this package writes on opaque directories.
const opaqueXattr = "user.overlay.opaque"

// trustedOpaqueXattr is the opaque marker overlayfs itself writes.
const trustedOpaqueXattr = "trusted.overlay.opaque"

// openBeneath opens rel (slash-separated, relative; "" is dirfd itself)
// beneath dirfd with openat2, refusing symlinks anywhere in the path and any
// escape from dirfd. O_CLOEXEC and O_NOFOLLOW are always added.
func openBeneath(dirfd int, rel string, flags int) (int, error) {
	if rel == "" {
		rel = "."
	}
	how := unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW),
		Resolve: resolveFlags,
	}
	for tries := 0; ; tries++ {
		fd, err := unix.Openat2(dirfd, rel, &how)
		switch {
		case err == nil:
			return fd, nil
		case err == unix.EINTR, err == unix.EAGAIN && tries < 16:
			continue
		case err == unix.ENOSYS:
			return -1, fmt.Errorf("openat2: %w (kernel 5.6 or later is required)", ErrUnsupported)
		default:
			return -1, err
		}
	}
}

// openDir opens rel beneath dirfd as a directory, for reading entries and
// setting metadata.
func openDir(dirfd int, rel string) (int, error) {
	return openBeneath(dirfd, rel, unix.O_RDONLY|unix.O_DIRECTORY)
}

// openRoot opens the directory p (a caller's trusted path, whose last
// component must not be a symlink).
func openRoot(p string) (int, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", p, err)
	}
	return fd, nil
}

// splitRel splits a cleaned relative path into its parent ("" for the root)
// and its last component.
func splitRel(rel string) (dir, base string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return "", rel
	}
	return rel[:i], rel[i+1:]
}

// joinRel joins a relative directory ("" for the root) and a name.
func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// depth is the number of components of a cleaned relative path.
func depth(rel string) int {
	if rel == "" {
		return 0
	}
	return strings.Count(rel, "/") + 1
}

// cleanName turns an archive entry name into a cleaned path relative to the
// destination root. A leading "/" or "./" is stripped, "." components are
// dropped and ".." components are resolved lexically; a ".." that would
// leave the root, a NUL byte or an empty name is an error. "" means the root.
func cleanName(name string) (string, error) {
	if name == "" {
		return "", errors.New("empty name")
	}
	if strings.IndexByte(name, 0) >= 0 {
		return "", errors.New("NUL byte in name")
	}
	parts := make([]string, 0, strings.Count(name, "/")+1)
	for _, c := range strings.Split(name, "/") {
		switch c {
		case "", ".":
		case "..":
			if len(parts) == 0 {
				return "", errors.New(`".." leaves the root`)
			}
			parts = parts[:len(parts)-1]
		default:
			parts = append(parts, c)
		}
	}
	return strings.Join(parts, "/"), nil
}

// hostile returns an ErrHostile error naming the entry.
func hostile(name, format string, args ...any) error {
	return fmt.Errorf("%w: entry %q: %s", ErrHostile, name, fmt.Sprintf(format, args...))
}

// badComponent finds, walking dir beneath root, the first component that
// is a symlink or not a directory: its path, and whether it is a symlink.
// found is false if there is none (or the walk fails for another reason).
func badComponent(root int, dir string) (p string, symlink, found bool) {
	comps := strings.Split(dir, "/")
	for i := range comps {
		p = strings.Join(comps[:i+1], "/")
		pdir, base := splitRel(p)
		fd, err := openDir(root, pdir)
		if err != nil {
			return "", false, false
		}
		var st unix.Stat_t
		err = unix.Fstatat(fd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
		unix.Close(fd)
		if err != nil {
			return "", false, false
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
		case unix.S_IFLNK:
			return p, true, true
		default:
			return p, false, true
		}
	}
	return "", false, false
}

// walkError explains why openat2 of dir beneath root failed, as an error
// about entry name: an ErrHostile error naming the first component that is
// a symlink or not a directory when that is the cause.
func walkError(root int, dir, name string, err error) error {
	if err != unix.ELOOP && err != unix.ENOTDIR && err != unix.EXDEV {
		return fmt.Errorf("entry %q: open %q: %w", name, dir, err)
	}
	p, symlink, found := badComponent(root, dir)
	switch {
	case found && symlink:
		return hostile(name, "parent %q is a symlink", p)
	case found:
		return hostile(name, "parent %q is not a directory", p)
	}
	return hostile(name, "cannot resolve parent %q: %v", dir, err)
}

// readDirNames returns the names in the directory fd (without "." and
// ".."), reading it from the start.
func readDirNames(fd int) ([]string, error) {
	if _, err := unix.Seek(fd, 0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("rewind directory: %w", err)
	}
	var names []string
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("getdents: %w", err)
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

// isEmptyDir tells whether the directory fd has no entries.
func isEmptyDir(fd int) (bool, error) {
	buf := make([]byte, 4096)
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("getdents: %w", err)
		}
		if n <= 0 {
			return true, nil
		}
		_, count, _ := unix.ParseDirent(buf[:n], 1, nil)
		if count > 0 {
			return false, nil
		}
	}
}

// removeAllAt removes name in dirfd and, if it is a directory, everything
// beneath it, through descriptors only. A missing name is not an error.
func removeAllAt(dirfd int, name string, level int) error {
	if level > maxWalkDepth {
		return fmt.Errorf("remove %q: %w: deeper than %d levels", name, ErrLimit, maxWalkDepth)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if err == unix.ENOENT {
			return nil
		}
		return fmt.Errorf("stat %q: %w", name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Unlinkat(dirfd, name, 0); err != nil && err != unix.ENOENT {
			return fmt.Errorf("unlink %q: %w", name, err)
		}
		return nil
	}
	fd, err := openDir(dirfd, name)
	if err != nil {
		return fmt.Errorf("open %q: %w", name, err)
	}
	names, err := readDirNames(fd)
	if err == nil {
		for _, n := range names {
			if err = removeAllAt(fd, n, level+1); err != nil {
				break
			}
		}
	}
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("remove %q: %w", name, err)
	}
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil && err != unix.ENOENT {
		return fmt.Errorf("rmdir %q: %w", name, err)
	}
	return nil
}

// futimens sets the access and modification times of fd to t.
func futimens(fd int, t unix.Timespec) error {
	return unix.UtimesNanoAt(fd, "", []unix.Timespec{t, t}, unix.AT_EMPTY_PATH)
}

// lutimens sets the times of name in dirfd to t without following a symlink.
func lutimens(dirfd int, name string, t unix.Timespec) error {
	return unix.UtimesNanoAt(dirfd, name, []unix.Timespec{t, t}, unix.AT_SYMLINK_NOFOLLOW)
}

// readlinkAt returns the target of the symlink name in dirfd.
func readlinkAt(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", fmt.Errorf("readlink %q: %w", name, err)
		}
		if n < size {
			return string(buf[:n]), nil
		}
		if size > unix.PathMax*2 {
			return "", fmt.Errorf("readlink %q: target too long", name)
		}
	}
}

// xattrIs tells whether the xattr attr of fd equals want. A missing xattr,
// or a filesystem without xattrs, is false.
func xattrIs(fd int, attr, want string) (bool, error) {
	buf := make([]byte, len(want)+1)
	n, err := unix.Fgetxattr(fd, attr, buf)
	switch err {
	case nil:
		return string(buf[:n]) == want, nil
	case unix.ENODATA, unix.EOPNOTSUPP, unix.ERANGE:
		return false, nil
	default:
		return false, fmt.Errorf("getxattr %s: %w", attr, err)
	}
}

// listXattrs returns the names of the xattrs of fd (none on a filesystem
// without xattrs).
func listXattrs(fd int) ([]string, error) {
	for {
		n, err := unix.Flistxattr(fd, nil)
		if err == unix.EOPNOTSUPP {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("listxattr: %w", err)
		}
		if n == 0 {
			return nil, nil
		}
		buf := make([]byte, n)
		n, err = unix.Flistxattr(fd, buf)
		if err == unix.ERANGE {
			continue // grew in between
		}
		if err != nil {
			return nil, fmt.Errorf("listxattr: %w", err)
		}
		var names []string
		for _, b := range bytes.Split(buf[:n], []byte{0}) {
			if len(b) > 0 {
				names = append(names, string(b))
			}
		}
		return names, nil
	}
}

// isOpaque tells whether the directory fd carries an overlay opaque marker,
// trusted (as overlayfs writes it) or user (as this package does).
func isOpaque(fd int) (bool, error) {
	for _, attr := range []string{trustedOpaqueXattr, opaqueXattr} {
		ok, err := xattrIs(fd, attr, "y")
		if ok || err != nil {
			return ok, err
		}
	}
	return false, nil
}

// setOpaqueFd marks the directory fd opaque.
func setOpaqueFd(fd int) error {
	if err := unix.Fsetxattr(fd, opaqueXattr, []byte("y"), 0); err != nil {
		return fmt.Errorf("setxattr %s: %w", opaqueXattr, err)
	}
	return nil
}

// cleanTarget validates a caller-supplied relative path for Whiteout and
// SetOpaque: the same rules as archive names.
func cleanTarget(rel string) (string, error) {
	c, err := cleanName(rel)
	if err != nil {
		return "", fmt.Errorf("%w: path %q: %v", ErrHostile, rel, err)
	}
	return c, nil
}

// Whiteout creates an overlayfs whiteout (a 0/0 character device, mode 0)
// at rel beneath dst, whose parents must exist, replacing whatever is there
// (a directory with its contents). rel follows the rules of archive names;
// no symlink is followed.
func Whiteout(dst, rel string) error {
	c, err := cleanTarget(rel)
	if err != nil {
		return err
	}
	if c == "" {
		return fmt.Errorf("whiteout %q: cannot replace the root", rel)
	}
	root, err := openRoot(dst)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	dir, base := splitRel(c)
	pfd, err := openDir(root, dir)
	if err != nil {
		return fmt.Errorf("whiteout %q: %w", rel, walkError(root, dir, c, err))
	}
	defer unix.Close(pfd)
	if err := removeAllAt(pfd, base, 0); err != nil {
		return fmt.Errorf("whiteout %q: %w", rel, err)
	}
	if err := unix.Mknodat(pfd, base, unix.S_IFCHR, 0); err != nil {
		return fmt.Errorf("whiteout %q: mknod: %w", rel, err)
	}
	return nil
}

// SetOpaque sets user.overlay.opaque="y" on the directory rel beneath dst
// ("" or "." is dst itself). No symlink is followed.
func SetOpaque(dst, rel string) error {
	c := ""
	if rel != "" && rel != "." {
		var err error
		if c, err = cleanTarget(rel); err != nil {
			return err
		}
	}
	root, err := openRoot(dst)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	fd, err := openDir(root, c)
	if err != nil {
		if err == unix.ELOOP || err == unix.ENOTDIR {
			return fmt.Errorf("set opaque %q: %w", rel, walkError(root, c, c, err))
		}
		return fmt.Errorf("set opaque %q: %w", rel, err)
	}
	defer unix.Close(fd)
	if err := setOpaqueFd(fd); err != nil {
		return fmt.Errorf("set opaque %q: %w", rel, err)
	}
	return nil
}
