package sandboxinit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/guest"
)

// The root is assembled on a staging tmpfs mounted over /tmp of the
// sandbox's private mount namespace copy (invisible to the host), then
// pivoted into.
const stagingRoot = "/tmp"

// SystemDirs are the host directories bound read-only into every sandbox
// of the host template. A host symlink (merged /usr) is recreated as the
// same symlink: the host's base layer (runtime/linux) makes the mount
// points and symlinks, the init binds the directories.
func SystemDirs() []string {
	return []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}
}

// LocaleDir is glibc's directory of compiled locales, where it looks for
// its locale archive (LocaleDir/locale-archive). The host's locale layer
// (guest.Setup.LocaleLayer) is stacked over it.
const LocaleDir = "/usr/lib/locale"

// procMaskedFiles read as empty inside the sandbox; procMaskedDirs appear
// empty; procReadOnly are read-only. The lists follow runc's defaults.
var (
	procMaskedFiles = []string{"kcore", "keys", "latency_stats", "timer_list",
		"timer_stats", "sched_debug", "kallsyms", "kmsg", "kpagecount", "kpageflags",
		"kpagecgroup", "sysrq-trigger", "config.gz", "vmallocinfo"}
	procMaskedDirs = []string{"acpi", "scsi", "asound", "driver", "tty/driver"}
	procReadOnly   = []string{"sys", "bus", "fs", "irq"}
)

// devNodes are the host device nodes bound into /dev.
var devNodes = []string{"null", "zero", "full", "random", "urandom", "tty"}

// buildRoot assembles the sandbox's root filesystem and pivots into it. It
// returns how s.Restrict was applied (nil without restrictions).
//
// The root is an overlayfs: the lower layers (layers, top first) are the
// host's detached idmapped read-only trees, the upper layer and overlayfs'
// work directory live on the scratch tmpfs the host made (so the host can
// read the upper layer for a snapshot, and its size caps what the sandbox
// writes). Every mount point the setup needs (/dev, /proc, /etc, the host's
// system directories) exists in the bottom layer, so a fresh sandbox's
// upper layer starts empty.
//
// Preconditions: the caller is the sandbox's init, root in a fresh user
// namespace that owns a fresh mount namespace; fds are the setup's
// descriptors as s.UnpackFDs split them (the host prepared them all). The
// caller keeps ownership of fds.
func buildRoot(s *guest.Setup, fds guest.SetupFDs) (*guest.RestrictReport, error) {
	trees, layers, scratch := fds.Trees, fds.Layers, fds.Scratch
	if len(trees) != len(s.Mounts) {
		return nil, fmt.Errorf("setup: %d mount trees for %d mounts", len(trees), len(s.Mounts))
	}
	if len(layers) == 0 {
		return nil, errors.New("setup: no root layer")
	}
	// Nothing we mount may propagate back to the host.
	if err := unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		return nil, stageErr("make / a slave mount", err)
	}
	// The layers are attached on a staging tmpfs in the old root, which
	// the pivot detaches; the overlay keeps its own private clones.
	stage := stagingRoot
	if err := unix.Mount("tmpfs", stage, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0700,size=64k,nr_inodes=1024"); err != nil {
		return nil, stageErr("mount staging tmpfs", err)
	}
	lowers := make([]string, len(layers))
	for i, fd := range layers {
		lowers[i] = stage + "/l" + strconv.Itoa(i)
		if err := attachDetached(fd, lowers[i]); err != nil {
			return nil, stageErr("attach layer "+strconv.Itoa(i), err)
		}
	}
	scratchDir := stage + "/s"
	if err := attachDetached(scratch, scratchDir); err != nil {
		return nil, stageErr("attach scratch tmpfs", err)
	}
	root := stage + "/root"
	if err := mountOverlay(root, lowers, scratchDir+"/upper", scratchDir+"/work"); err != nil {
		return nil, err
	}
	if s.HostSystem {
		for _, d := range SystemDirs() {
			if err := bindHostPath(d, root+d); err != nil {
				return nil, err
			}
		}
		if err := buildEtc(root, s); err != nil {
			return nil, err
		}
		if err := buildLocale(root, s.LocaleLayer); err != nil {
			return nil, err
		}
	}
	if err := buildDev(root, scratchDir+"/shm"); err != nil {
		return nil, err
	}
	if err := buildProc(root); err != nil {
		return nil, err
	}
	if err := attachTrees(root, s.Mounts, trees); err != nil {
		return nil, err
	}
	// Restrictions narrow what the trees above made visible or writable.
	rep, err := applyRestrictions(root, s.Restrict)
	if err != nil {
		return nil, err
	}
	return rep, pivot(root)
}

// attachDetached attaches the detached mount fd at a new directory p.
func attachDetached(fd int, p string) error {
	if err := unix.Mkdir(p, 0o700); err != nil {
		return err
	}
	return unix.MoveMount(fd, "", unix.AT_FDCWD, p, unix.MOVE_MOUNT_F_EMPTY_PATH)
}

// mountOverlay mounts the root overlay at a new directory root: lowers
// (top first), upper and work. "userxattr" keeps overlayfs' own markers
// (opaque directories) in user.overlay.* xattrs, the ones a user namespace
// may set; whiteouts are 0/0 character devices, which it may create.
func mountOverlay(root string, lowers []string, upper, work string) error {
	if err := unix.Mkdir(root, 0o755); err != nil {
		return stageErr("mkdir root", err)
	}
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return stageErr("root overlay", err)
	}
	defer unix.Close(fsfd)
	for _, l := range lowers {
		if err := unix.FsconfigSetString(fsfd, "lowerdir+", l); err != nil {
			return stageErr("root overlay: lower layer "+l, err)
		}
	}
	for _, kv := range [][2]string{{"upperdir", upper}, {"workdir", work}} {
		if err := unix.FsconfigSetString(fsfd, kv[0], kv[1]); err != nil {
			return stageErr("root overlay: "+kv[0], err)
		}
	}
	if err := unix.FsconfigSetFlag(fsfd, "userxattr"); err != nil {
		return stageErr("root overlay: userxattr", err)
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return stageErr("root overlay", err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return stageErr("root overlay", err)
	}
	defer unix.Close(mfd)
	return stageErr("attach root overlay", unix.MoveMount(mfd, "", unix.AT_FDCWD, root, unix.MOVE_MOUNT_F_EMPTY_PATH))
}

// pivot makes root the sandbox's "/" and detaches the host's tree entirely.
func pivot(root string) error {
	if err := unix.Chdir(root); err != nil {
		return stageErr("chdir to new root", err)
	}
	// pivot_root(".", ".") stacks the old root on top of the new one; the
	// unmount then drops it without needing a directory for it.
	if err := unix.PivotRoot(".", "."); err != nil {
		return stageErr("pivot_root", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return stageErr("detach host root", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return stageErr("chdir /", err)
	}
	return nil
}

// bindHostPath binds one host system directory read-only onto the root's
// directory of the same name (the bottom layer has it, and the same symlinks
// where the host has symlinks, such as a merged /usr). A host path that is
// missing or a symlink needs nothing.
func bindHostPath(src, dst string) error {
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return stageErr("stat "+src, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil
	}
	return bindReadOnly(src, dst)
}

// bindReadOnly binds src (recursively) at dst, read-only, nosuid, nodev.
func bindReadOnly(src, dst string) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return stageErr("bind "+src, err)
	}
	return setAttr(dst, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
}

func setAttr(path string, attr uint64) error {
	err := unix.MountSetattr(unix.AT_FDCWD, path, unix.AT_RECURSIVE|unix.AT_SYMLINK_NOFOLLOW,
		&unix.MountAttr{Attr_set: attr})
	return stageErr("set mount attributes of "+path, err)
}

// buildEtc mounts a read-only overlay of the host's /etc under the layer
// the host prepared (etcLayer): identity files replaced, secrets whited out.
func buildEtc(root string, s *guest.Setup) error {
	dst := root + "/etc"
	err := unix.Mount("overlay", dst, "overlay", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV,
		"lowerdir="+s.EtcLayer+":/etc")
	return stageErr("mount /etc overlay", err)
}

// buildLocale mounts a read-only overlay of the host's LocaleDir under the
// layer the host prepared (localeLayer: a locale archive of the host's
// compiled locales), so that glibc maps one archive instead of opening a
// file per locale category at each program's start; every entry of the
// host's directory stays visible. Without a layer ("") it does nothing.
//
// Preconditions: the host's system directories are bound on root.
func buildLocale(root, layer string) error {
	if layer == "" {
		return nil
	}
	if strings.ContainsAny(layer, ":,\\") {
		return stageErr("mount "+LocaleDir+" overlay", fmt.Errorf("layer path %q is not a plain overlay lower directory", layer))
	}
	err := unix.Mount("overlay", root+LocaleDir, "overlay", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV,
		"lowerdir="+layer+":"+LocaleDir)
	return stageErr("mount "+LocaleDir+" overlay", err)
}

// buildDev populates a minimal /dev: a few host device nodes, a private
// devpts instance, /dev/shm (shm, a directory of the scratch tmpfs) and the
// usual symlinks.
func buildDev(root, shm string) error {
	dev := root + "/dev"
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k,nr_inodes=64"); err != nil {
		return stageErr("mount /dev", err)
	}
	// Device nodes cannot be created in a user namespace; bind the host's.
	for _, n := range devNodes {
		if err := touch(dev + "/" + n); err != nil {
			return err
		}
		if err := unix.Mount("/dev/"+n, dev+"/"+n, "", unix.MS_BIND, ""); err != nil {
			return stageErr("bind /dev/"+n, err)
		}
	}
	if err := unix.Mkdir(dev+"/pts", 0o755); err != nil {
		return stageErr("mkdir /dev/pts", err)
	}
	if err := unix.Mount("devpts", dev+"/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC,
		"newinstance,ptmxmode=0666,mode=0620,gid=5"); err != nil {
		return stageErr("mount devpts", err)
	}
	if err := unix.Mkdir(dev+"/shm", 0o755); err != nil {
		return stageErr("mkdir /dev/shm", err)
	}
	if err := unix.Mount(shm, dev+"/shm", "", unix.MS_BIND, ""); err != nil {
		return stageErr("mount /dev/shm", err)
	}
	links := [][2]string{{"pts/ptmx", "ptmx"}, {"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"},
		{"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"}}
	for _, l := range links {
		if err := unix.Symlink(l[0], dev+"/"+l[1]); err != nil {
			return stageErr("symlink /dev/"+l[1], err)
		}
	}
	return nil
}

// buildProc mounts a fresh procfs for the sandbox's pid namespace and masks
// the entries that reveal or touch the host kernel.
func buildProc(root string) error {
	proc := root + "/proc"
	if err := unix.Mount("proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return stageErr("mount /proc", err)
	}
	for _, f := range procMaskedFiles {
		p := proc + "/" + f
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		// Reads of /dev/null are empty and writes vanish.
		if err := unix.Mount("/dev/null", p, "", unix.MS_BIND, ""); err != nil {
			return stageErr("mask /proc/"+f, err)
		}
	}
	for _, d := range procMaskedDirs {
		p := proc + "/" + d
		if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
			continue
		}
		if err := unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0,mode=0555"); err != nil {
			return stageErr("mask /proc/"+d, err)
		}
	}
	for _, d := range procReadOnly {
		p := proc + "/" + d
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		if err := bindReadOnly(p, p); err != nil {
			return err
		}
	}
	return nil
}

// attachTrees places the host's detached mount trees (workspace, --ro,
// --rw) at their targets. Targets are resolved beneath root with
// RESOLVE_IN_ROOT, so a symlink inside an earlier mount (say, a workspace
// the sandbox wrote on a previous run) cannot send a mount outside the root.
func attachTrees(root string, mounts []guest.Mount, trees []int) error {
	order := make([]int, len(mounts))
	for i := range order {
		order[i] = i
	}
	// Parents before children.
	sort.SliceStable(order, func(a, b int) bool {
		return strings.Count(mounts[order[a]].Target, "/") < strings.Count(mounts[order[b]].Target, "/")
	})
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return stageErr("open root", err)
	}
	defer unix.Close(rootFD)
	for _, i := range order {
		m := mounts[i]
		target, err := makeMountpoint(rootFD, m.Target, m.File)
		if err != nil {
			return stageErr("mount point "+m.Target, err)
		}
		err = unix.MoveMount(trees[i], "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
		unix.Close(target)
		if err != nil {
			return stageErr("attach "+m.Target, err)
		}
	}
	return nil
}

// makeMountpoint opens (creating if needed) the directory or file at rel
// beneath rootFD and returns an O_PATH fd. No symlink may appear on the
// way: a link planted in a workspace by an earlier run could otherwise
// steer a bind onto the sandbox's own /etc, /proc or /dev.
func makeMountpoint(rootFD int, rel string, file bool) (int, error) {
	rel = strings.TrimPrefix(filepath.Clean("/"+rel), "/")
	if rel == "" {
		return -1, errors.New("cannot mount over /")
	}
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS}
	fd, err := unix.Openat2(rootFD, rel, how)
	if err == nil {
		return fd, nil
	}
	if errors.Is(err, unix.ELOOP) {
		return -1, errors.New("a symlink is on the path")
	}
	parent, name := filepath.Split(rel)
	pfd := rootFD
	if parent != "" {
		if err := mkdirBeneath(rootFD, parent); err != nil {
			return -1, err
		}
		howDir := *how
		howDir.Flags |= unix.O_DIRECTORY
		fd, err := unix.Openat2(rootFD, parent, &howDir)
		if err != nil {
			return -1, err
		}
		defer unix.Close(fd)
		pfd = fd
	}
	if file {
		fd, err := unix.Openat(pfd, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return -1, err
		}
		unix.Close(fd)
	} else if err := unix.Mkdirat(pfd, name, 0o755); err != nil {
		return -1, err
	}
	return unix.Openat(pfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// mkdirBeneath creates every missing directory of rel beneath rootFD,
// resolving each existing component with RESOLVE_IN_ROOT.
func mkdirBeneath(rootFD int, rel string) error {
	cur := ""
	for _, part := range strings.Split(strings.Trim(rel, "/"), "/") {
		next := part
		if cur != "" {
			next = cur + "/" + part
		}
		how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS}
		fd, err := unix.Openat2(rootFD, next, how)
		if err == nil {
			unix.Close(fd)
			cur = next
			continue
		}
		if !errors.Is(err, unix.ENOENT) {
			return err
		}
		pfd := rootFD
		if cur != "" {
			if pfd, err = unix.Openat2(rootFD, cur, how); err != nil {
				return err
			}
		}
		err = unix.Mkdirat(pfd, part, 0o755)
		if pfd != rootFD {
			unix.Close(pfd)
		}
		if err != nil {
			return err
		}
		cur = next
	}
	return nil
}

func touch(p string) error {
	fd, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return stageErr("create "+p, err)
	}
	return unix.Close(fd)
}

// stageErr names the setup stage of a failure; nil stays nil.
func stageErr(stage string, err error) error {
	if err == nil {
		return nil
	}
	return &stageError{stage: stage, err: err}
}

type stageError struct {
	stage string
	err   error
}

func (e *stageError) Error() string { return e.stage + ": " + e.err.Error() }
func (e *stageError) Unwrap() error { return e.err }
