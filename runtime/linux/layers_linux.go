package linux

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/runtime/linux/sandboxinit"
	"github.com/moat-sandbox/moat/sandbox"
)

// Layers of the root overlay.
//
// A sandbox's root is an overlayfs (buildRoot). Its lower layers, top first:
// the spec's layers (snapshots, then a template's root), and at the bottom,
// or just above a template's root, the base layer the runtime builds itself
// (baseLayer). Each is handed to the init as a detached, read-only,
// nosuid, nodev mount idmapped through the sandbox's own user namespace: a
// file stored as uid N appears as the sandbox's uid N, whichever range of
// host ids the sandbox was leased. So one copy of a template serves every
// sandbox, and nothing is chowned per sandbox.

// baseLayerVersion changes whenever the base layer's content rules change.
// It is part of the layer's name (<kind><version>-<hash>): from version 2
// on, layers are leased and collected when unused (see leaseLayer).
const baseLayerVersion = "2"

// layerFile is one entry of a base layer. The name "" is the layer's root
// directory itself (only its owner is set; its mode is 0755).
type layerFile struct {
	name     string
	mode     os.FileMode // with os.ModeDir or os.ModeSymlink
	uid, gid uint32      // the owner as the sandbox sees it (0: its root)
	content  string      // file content or symlink target
}

// baseDirs are the directories every root has at its bottom: the mount
// points of the setup and the sandbox's writable places.
var baseDirs = []layerFile{
	{name: "dev", mode: os.ModeDir | 0o755},
	{name: "proc", mode: os.ModeDir | 0o555},
	{name: "etc", mode: os.ModeDir | 0o755},
	{name: "tmp", mode: os.ModeDir | os.ModeSticky | 0o777},
	{name: "home", mode: os.ModeDir | 0o755},
	{name: strings.TrimPrefix(sandbox.HomeDir, "/"), mode: os.ModeDir | 0o700, uid: sandbox.UID, gid: sandbox.GID},
	{name: strings.TrimPrefix(sandbox.WorkspaceDir, "/"), mode: os.ModeDir | 0o755, uid: sandbox.UID, gid: sandbox.GID},
}

// hostBaseLayer is the bottom layer of a host-template sandbox: the base
// directories plus, for each host system directory, an empty directory (a
// bind's mount point) or the same symlink (a merged /usr).
func hostBaseLayer(stateDir string) (string, error) {
	files := append([]layerFile(nil), baseDirs...)
	for _, d := range sandboxinit.SystemDirs() {
		fi, err := os.Lstat(d)
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue
		case err != nil:
			return "", err
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(d)
			if err != nil {
				return "", err
			}
			files = append(files, layerFile{name: d[1:], mode: os.ModeSymlink, content: target})
		case fi.IsDir():
			files = append(files, layerFile{name: d[1:], mode: os.ModeDir | 0o755})
		}
	}
	return cachedLayer(filepath.Join(stateDir, "layers"), "host", files)
}

// templateUser is a template's user resolved against its /etc/passwd and
// /etc/group (read once, for the base layer too).
type templateUser struct {
	uid, gid      uint32 // the template's user, as stored in its layer
	passwd, group []byte
}

// resolveTemplateUser reads the template's passwd and group beneath
// templateFD and resolves user (sandbox.RootFS.User) in them.
func resolveTemplateUser(templateFD int, user string) (*templateUser, error) {
	passwd, err := readBeneath(templateFD, "etc/passwd")
	if err != nil {
		return nil, err
	}
	group, err := readBeneath(templateFD, "etc/group")
	if err != nil {
		return nil, err
	}
	uid, gid, err := sandbox.ResolveImageUser(user, passwd, group)
	if err != nil {
		return nil, err
	}
	return &templateUser{uid: uid, gid: gid, passwd: passwd, group: group}, nil
}

// swaps reports whether the template layer needs an idmap of its own: its
// user is not the sandbox user already.
func (u *templateUser) swaps() bool { return u.uid != sandbox.UID || u.gid != sandbox.GID }

// seen returns the ids a file stored with uid:gid in the template layer
// has in the sandbox: the template's user and the sandbox user trade
// places, every other id stays.
func (u *templateUser) seen(uid, gid uint32) (uint32, uint32) {
	return swapID(uid, u.uid, sandbox.UID), swapID(gid, u.gid, sandbox.GID)
}

func swapID(id, a, b uint32) uint32 {
	switch id {
	case a:
		return b
	case b:
		return a
	}
	return id
}

// swapIDMap is the id map of the template layer's idmap: stored id k
// appears as the sandbox's σ(k), where σ swaps id and sandboxID, on the
// sandbox's host range starting at base. Without a swap it is the
// sandbox's own map.
func swapIDMap(base, id, sandboxID uint32) []syscall.SysProcIDMap {
	lo, hi := min(id, sandboxID), max(id, sandboxID)
	if lo == hi {
		return []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: uidsPer}}
	}
	var m []syscall.SysProcIDMap
	ident := func(from, to uint32) { // [from, to)
		if to > from {
			m = append(m, syscall.SysProcIDMap{ContainerID: int(from), HostID: int(base + from), Size: int(to - from)})
		}
	}
	ident(0, lo)
	m = append(m, syscall.SysProcIDMap{ContainerID: int(lo), HostID: int(base + hi), Size: 1})
	ident(lo+1, hi)
	m = append(m, syscall.SysProcIDMap{ContainerID: int(hi), HostID: int(base + lo), Size: 1})
	ident(hi+1, uidsPer)
	return m
}

// swapUserns returns a user namespace whose maps are swapIDMap's, for the
// template layer's idmapped mount: a short-lived holder process is started
// in it and the namespace kept by descriptor.
func swapUserns(start startFunc, base uint32, u *templateUser) (int, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return -1, err
	}
	defer r.Close()
	defer w.Close()
	p, err := start([]string{"moat", UsernsHoldArg}, []*os.File{r},
		&syscall.SysProcAttr{
			Cloneflags:  unix.CLONE_NEWUSER,
			UidMappings: swapIDMap(base, u.uid, sandbox.UID),
			GidMappings: swapIDMap(base, u.gid, sandbox.GID),
			Pdeathsig:   syscall.SIGKILL,
		})
	if err != nil {
		return -1, fmt.Errorf("template idmap user namespace: %w", err)
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", p.pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	w.Close()
	p.killAndWait()
	if err != nil {
		return -1, fmt.Errorf("template idmap user namespace: %w", err)
	}
	return fd, nil
}

// templateBaseLayer is the layer just above a template's root: the base
// directories and the identity files (/etc/hostname, hosts, resolv.conf,
// and the template's passwd and group with the sandbox user added where
// they lack uid 1000). templateFD is the template root, read beneath
// itself (its symlinks cannot reach the host). The layer's root, etc,
// home and tmp shadow the template's directories of those names (an
// overlay shows a directory's owner and mode from its top layer), so they
// take the template's owner (as the sandbox sees it, through u) and mode;
// the identity files belong to the owner of /etc.
func templateBaseLayer(stateDir string, templateFD int, hostname string, hostDNS bool, u *templateUser) (string, error) {
	files := append([]layerFile{{name: "", mode: os.ModeDir | 0o755}}, baseDirs...)
	for i, f := range files {
		var st unix.Stat_t
		var err error
		switch f.name {
		case "":
			err = unix.Fstat(templateFD, &st)
		case "etc", "home", "tmp":
			err = unix.Fstatat(templateFD, f.name, &st, unix.AT_SYMLINK_NOFOLLOW)
		default:
			continue
		}
		if err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue // the template has none: moat's default
		}
		files[i].uid, files[i].gid = u.seen(st.Uid, st.Gid)
		if f.name != "" {
			files[i].mode = os.ModeDir | os.FileMode(st.Mode&0o777)
			if st.Mode&unix.S_ISVTX != 0 {
				files[i].mode |= os.ModeSticky
			}
		}
	}
	var etcUID, etcGID uint32
	for _, f := range files {
		if f.name == "etc" {
			etcUID, etcGID = f.uid, f.gid
		}
	}
	ids := etcFiles(hostname, sandbox.UID, sandbox.GID)
	ids["passwd"] = withIdentity(u.passwd, ids["passwd"], sandbox.UID, 2)
	ids["group"] = withIdentity(u.group, ids["group"], sandbox.GID, 2)
	if hostDNS {
		b, err := os.ReadFile("/etc/resolv.conf")
		if err != nil {
			return "", fmt.Errorf("host resolv.conf: %w", err)
		}
		ids["resolv.conf"] = string(b)
	}
	for _, name := range []string{"passwd", "group", "hostname", "hosts", "resolv.conf"} {
		files = append(files, layerFile{name: "etc/" + name, mode: 0o644, uid: etcUID, gid: etcGID, content: ids[name]})
	}
	return cachedLayer(filepath.Join(stateDir, "layers"), "tmpl", files)
}

// withIdentity returns the template's passwd or group (have) with the
// sandbox's entries (ours, moat's own file) added when have lacks id in
// field idField; an empty have is replaced by ours.
func withIdentity(have []byte, ours string, id, idField int) string {
	if len(bytes.TrimSpace(have)) == 0 {
		return ours
	}
	out := string(have)
	if !strings.HasSuffix(out, "\n") {
		out += "\n"
	}
	want := strconv.Itoa(id)
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Split(line, ":"); len(f) > idField && f[idField] == want {
			return out
		}
	}
	for _, line := range strings.Split(ours, "\n") {
		if f := strings.Split(line, ":"); len(f) > idField && f[idField] == want {
			out += line + "\n"
		}
	}
	return out
}

// maxIdentityFile bounds a template's passwd or group read by the host.
const maxIdentityFile = 1 << 20

// readBeneath reads rel beneath dirFD, symlinks resolved inside it (never
// outside, never through /proc magic links); a missing file reads empty.
func readBeneath(dirFD int, rel string) ([]byte, error) {
	fd, err := unix.Openat2(dirFD, rel, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOCTTY | unix.O_NONBLOCK,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV})
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("template %s: %w", rel, err)
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(f, maxIdentityFile+1))
	if err != nil {
		return nil, fmt.Errorf("template %s: %w", rel, err)
	}
	if len(b) > maxIdentityFile {
		return nil, fmt.Errorf("template %s: larger than %d bytes", rel, maxIdentityFile)
	}
	return b, nil
}

// cachedLayer returns parent/<kind><version>-<hash of files>, building it once: in a
// temporary directory renamed into place, so a half-built layer is never
// used. Entries are stored with the ids the sandbox sees (0 its root,
// 1000 its user).
func cachedLayer(parent, kind string, files []layerFile) (string, error) {
	key := []string{"v" + baseLayerVersion}
	for _, f := range files {
		key = append(key, fmt.Sprintf("%s\x00%o\x00%d:%d\x00%s", f.name, uint32(f.mode), f.uid, f.gid, f.content))
	}
	return buildOnce(parent, kind+baseLayerVersion+"-"+contentName(key...), func(dir string) error {
		// Layers hold entries owned by host ids 1000 and others (the
		// sandbox's, stored unshifted); no host user may reach them. The
		// host opens them by path as root; sandboxes get mounts.
		if err := os.Chmod(parent, 0o700); err != nil {
			return err
		}
		for _, f := range files {
			p := filepath.Join(dir, f.name)
			if f.name == "" { // the layer's root: its mode is buildOnce's
				if err := os.Lchown(dir, int(f.uid), int(f.gid)); err != nil {
					return err
				}
				continue
			}
			var err error
			switch {
			case f.mode&os.ModeDir != 0:
				err = os.Mkdir(p, 0o700)
			case f.mode&os.ModeSymlink != 0:
				err = os.Symlink(f.content, p)
			default:
				err = os.WriteFile(p, []byte(f.content), 0o600)
			}
			if err == nil && (f.uid != 0 || f.gid != 0) {
				err = os.Lchown(p, int(f.uid), int(f.gid))
			}
			if err == nil && f.mode&os.ModeSymlink == 0 {
				err = os.Chmod(p, f.mode&(os.ModePerm|os.ModeSticky))
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// idmapLayer returns a detached, read-only, nosuid, nodev clone of the
// directory dirFD whose owners are mapped through the user namespace
// usernsFD (the sandbox's: stored id N appears as the sandbox's N).
func idmapLayer(dirFD, usernsFD int, name string) (int, error) {
	tree, err := unix.OpenTree(dirFD, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return -1, fmt.Errorf("layer %s: clone mount: %w", name, err)
	}
	attr := &unix.MountAttr{
		Attr_set:  unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV,
		Userns_fd: uint64(usernsFD),
	}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, attr); err != nil {
		unix.Close(tree)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
			return -1, fmt.Errorf("layer %s: its filesystem does not support idmapped mounts, which templates and snapshots need (%w)", name, err)
		}
		return -1, fmt.Errorf("layer %s: idmap: %w", name, err)
	}
	return tree, nil
}

// Directories of the scratch tmpfs.
const (
	scratchUpper = "upper"
	scratchWork  = "work"
	scratchShm   = "shm"
)

// newScratch creates the sandbox's scratch tmpfs as a detached mount of
// size bytes: the root overlay's upper layer and work directory, and
// /dev/shm, all owned by the sandbox's root (host id base). The host keeps
// the descriptor to read the upper layer (snapshots) and to resize it.
func newScratch(size int64, base uint32) (*os.File, error) {
	fsfd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("scratch tmpfs: %w", err)
	}
	defer unix.Close(fsfd)
	for _, kv := range [][2]string{{"size", strconv.FormatInt(size, 10)}, {"mode", "0755"}} {
		if err := unix.FsconfigSetString(fsfd, kv[0], kv[1]); err != nil {
			return nil, fmt.Errorf("scratch tmpfs %s: %w", kv[0], err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return nil, fmt.Errorf("scratch tmpfs: %w", err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return nil, fmt.Errorf("scratch tmpfs: %w", err)
	}
	for _, d := range []struct {
		name string
		mode uint32
	}{{scratchUpper, 0o755}, {scratchWork, 0o700}, {scratchShm, 0o1777}} {
		err := unix.Mkdirat(mfd, d.name, 0o700)
		if err == nil {
			err = unix.Fchmodat(mfd, d.name, d.mode, 0)
		}
		if err == nil {
			err = unix.Fchownat(mfd, d.name, int(base), int(base), unix.AT_SYMLINK_NOFOLLOW)
		}
		if err != nil {
			unix.Close(mfd)
			return nil, fmt.Errorf("scratch tmpfs %s: %w", d.name, err)
		}
	}
	if err := unix.Fchownat(mfd, "", int(base), int(base), unix.AT_EMPTY_PATH); err != nil {
		unix.Close(mfd)
		return nil, fmt.Errorf("scratch tmpfs: %w", err)
	}
	return os.NewFile(uintptr(mfd), "scratch"), nil
}

// resizeScratch sets the size of the scratch tmpfs (a warm sandbox handed
// to a caller with other limits). Shrinking below what is used fails.
func resizeScratch(scratch *os.File, size int64) error {
	fsfd, err := unix.Fspick(int(scratch.Fd()), "", unix.FSPICK_EMPTY_PATH|unix.FSPICK_CLOEXEC)
	if err != nil {
		return fmt.Errorf("resize scratch tmpfs: %w", err)
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigSetString(fsfd, "size", strconv.FormatInt(size, 10)); err != nil {
		return fmt.Errorf("resize scratch tmpfs: %w", err)
	}
	if err := unix.FsconfigReconfigure(fsfd); err != nil {
		return fmt.Errorf("resize scratch tmpfs to %d bytes: %w", size, err)
	}
	return nil
}
