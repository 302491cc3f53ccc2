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

	"golang.org/x/sys/unix"
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

// layerFile is one entry of a base layer.
type layerFile struct {
	name    string
	mode    os.FileMode // with os.ModeDir or os.ModeSymlink
	owned   bool        // owned by the sandbox user
	content string      // file content or symlink target
}

// baseDirs are the directories every root has at its bottom: the mount
// points of the setup and the sandbox's writable places.
var baseDirs = []layerFile{
	{name: "dev", mode: os.ModeDir | 0o755},
	{name: "proc", mode: os.ModeDir | 0o555},
	{name: "etc", mode: os.ModeDir | 0o755},
	{name: "tmp", mode: os.ModeDir | os.ModeSticky | 0o777},
	{name: "home", mode: os.ModeDir | 0o755},
	{name: strings.TrimPrefix(homeDir, "/"), mode: os.ModeDir | 0o700, owned: true},
	{name: strings.TrimPrefix(workspaceDir, "/"), mode: os.ModeDir | 0o755, owned: true},
}

// hostBaseLayer is the bottom layer of a host-template sandbox: the base
// directories plus, for each host system directory, an empty directory (a
// bind's mount point) or the same symlink (a merged /usr).
func hostBaseLayer(stateDir string) (string, error) {
	files := append([]layerFile(nil), baseDirs...)
	for _, d := range systemDirs {
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

// templateBaseLayer is the layer just above a template's root: the base
// directories and the identity files (/etc/hostname, hosts, resolv.conf,
// and the template's passwd and group with the sandbox user added where
// they lack uid 1000). templateFD is the template root, read beneath
// itself (its symlinks cannot reach the host).
func templateBaseLayer(stateDir string, templateFD int, hostname string, hostDNS bool) (string, error) {
	files := append([]layerFile(nil), baseDirs...)
	ids := etcFiles(hostname, sandboxUID, sandboxGID)
	passwd, err := readBeneath(templateFD, "etc/passwd")
	if err != nil {
		return "", err
	}
	group, err := readBeneath(templateFD, "etc/group")
	if err != nil {
		return "", err
	}
	ids["passwd"] = withIdentity(passwd, ids["passwd"], sandboxUID, 2)
	ids["group"] = withIdentity(group, ids["group"], sandboxGID, 2)
	if hostDNS {
		b, err := os.ReadFile("/etc/resolv.conf")
		if err != nil {
			return "", fmt.Errorf("host resolv.conf: %w", err)
		}
		ids["resolv.conf"] = string(b)
	}
	for _, name := range []string{"passwd", "group", "hostname", "hosts", "resolv.conf"} {
		files = append(files, layerFile{name: "etc/" + name, mode: 0o644, content: ids[name]})
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
// used. Entries are owned by root (stored id 0) or by the sandbox user
// (stored id 1000).
func cachedLayer(parent, kind string, files []layerFile) (string, error) {
	key := []string{"v" + baseLayerVersion}
	for _, f := range files {
		key = append(key, fmt.Sprintf("%s\x00%o\x00%t\x00%s", f.name, uint32(f.mode), f.owned, f.content))
	}
	return buildOnce(parent, kind+baseLayerVersion+"-"+contentName(key...), func(dir string) error {
		for _, f := range files {
			p := filepath.Join(dir, f.name)
			var err error
			switch {
			case f.mode&os.ModeDir != 0:
				err = os.Mkdir(p, 0o700)
			case f.mode&os.ModeSymlink != 0:
				err = os.Symlink(f.content, p)
			default:
				err = os.WriteFile(p, []byte(f.content), 0o600)
			}
			if err == nil && f.owned {
				err = os.Lchown(p, sandboxUID, sandboxGID)
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

// openLayers opens each layer directory and takes a shared lock on it,
// which the sandbox holds until it is shut down: a store removes a layer
// only after taking the lock exclusively. On error nothing stays open.
func openLayers(paths []string) ([]*os.File, error) {
	var out []*os.File
	for _, p := range paths {
		if !filepath.IsAbs(p) {
			closeFiles(out)
			return nil, fmt.Errorf("layer %q is not an absolute path", p)
		}
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			closeFiles(out)
			return nil, fmt.Errorf("layer %s: %w", p, err)
		}
		f := os.NewFile(uintptr(fd), p)
		if err := unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB); err != nil {
			f.Close()
			closeFiles(out)
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, fmt.Errorf("layer %s is being removed", p)
			}
			return nil, fmt.Errorf("layer %s: lock: %w", p, err)
		}
		out = append(out, f)
	}
	return out, nil
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
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
