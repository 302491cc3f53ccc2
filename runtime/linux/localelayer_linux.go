package linux

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/runtime/linux/sandboxinit"
)

// The locale layer.
//
// Every sandbox process starts with LANG=C.UTF-8 (defaultEnv). glibc
// loads a locale from its archive, /usr/lib/locale/locale-archive, with
// one open and one mmap. A host without an archive (Debian and its
// derivatives ship C.utf8 as a directory, and build an archive only of
// the locales an operator generates) makes every program that calls
// setlocale try the name under two spellings, read locale.alias and open
// a file per category: some 25 opens and as many stats per exec.
//
// So, when the host has no archive, the runtime builds one of the host's
// compiled locale directories with the host's own localedef (the same
// glibc reads it in the sandbox, whose /usr is the host's), once per
// distinct input (named by the metadata of every input file and of
// localedef), under stateDir/locale, leased like the /etc layer; the
// init of a host-template sandbox stacks it read-only over the host's
// /usr/lib/locale (sandboxinit.LocaleDir), where every entry of the host's
// directory stays visible. Inputs are root-owned files no one else may
// write, and localedef runs as root with an empty environment: nothing a
// sandbox can write reaches the archive. A host without localedef, or
// where it fails, gets no layer: its sandboxes work as before.

const (
	// localeLayerVersion changes whenever how the layer is built changes.
	// It is part of the layer's name (locale<version>-<hash>).
	localeLayerVersion = "1"
	// localeLayerDir is the directory of stateDir that holds the layers.
	localeLayerDir = "locale"
	// localeArchive is the archive's name in glibc's locale directory and
	// in a layer.
	localeArchive = "locale-archive"
	// localeArchiveMode is the archive's mode in a layer.
	localeArchiveMode = 0o644
	// localedefTimeout bounds one run of localedef (a few milliseconds).
	localedefTimeout = 30 * time.Second
	// maxLocaleDirs bounds the locale directories put in one archive.
	maxLocaleDirs = 1024
)

// localedefPaths are where the host's localedef is looked for, in order
// (not PATH: the caller's environment chooses nothing here).
var localedefPaths = []string{"/usr/bin/localedef", "/usr/sbin/localedef", "/bin/localedef", "/sbin/localedef"}

// errNoLocaleLayer reports a host that needs no locale layer (it has an
// archive) or cannot have one (no localedef, no compiled locale); its
// sandboxes start without one.
var errNoLocaleLayer = errors.New("no locale layer")

// errUntrustedLocaleLayer reports a layer (or a directory holding it) that
// someone other than root could have written.
var errUntrustedLocaleLayer = errors.New("not root-owned and read-only for others")

// localeInputs is what a locale layer is built from.
type localeInputs struct {
	localedef string   // the host's localedef
	dirs      []string // the compiled locale directories, sorted
	key       string   // names the inputs: their paths and metadata
}

// findLocaleInputs finds what a locale layer is built from: the first of
// localedefs that exists (the host's localedef) and the compiled locale
// directories of dir (sandboxinit.LocaleDir, but in tests), every file of
// which is root-owned and writable by no one else (a directory that is
// not is left out). It returns an error wrapping errNoLocaleLayer when
// dir has an archive already, or there is no localedef or no compiled
// locale.
//
// The key covers each input file's type, mode, owner, size, inode and
// times, so a locale or a localedef replaced or rewritten gives another
// layer; reading them costs a few dozen stats per sandbox, on the
// goroutine that provisions while the init starts.
func findLocaleInputs(dir string, localedefs []string) (*localeInputs, error) {
	switch _, err := os.Lstat(filepath.Join(dir, localeArchive)); {
	case err == nil:
		return nil, fmt.Errorf("%w: the host has %s/%s", errNoLocaleLayer, dir, localeArchive)
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("locale archive: %w", err)
	}
	in := &localeInputs{}
	var err error
	var id string
	if in.localedef, id, err = findLocaledef(localedefs); err != nil {
		return nil, err
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("%w: %s is not a directory", errNoLocaleLayer, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("locale inputs: %w", err)
	}
	d := os.NewFile(uintptr(fd), dir)
	defer d.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("locale inputs: %w", err)
	}
	if !rootOnly(&st) {
		return nil, fmt.Errorf("%w: %s: %w", errNoLocaleLayer, dir, errUntrustedLocaleLayer)
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("locale inputs: %w", err)
	}
	sort.Strings(names)
	parts := []string{"v" + localeLayerVersion, in.localedef, id}
	for _, name := range names {
		if len(in.dirs) == maxLocaleDirs {
			break
		}
		if strings.HasPrefix(name, ".") {
			continue
		}
		var tree []string
		if !describeLocaleTree(fd, name, 0, &tree) {
			continue
		}
		in.dirs = append(in.dirs, filepath.Join(dir, name))
		parts = append(parts, tree...)
	}
	if len(in.dirs) == 0 {
		return nil, fmt.Errorf("%w: no compiled locale in %s", errNoLocaleLayer, dir)
	}
	in.key = contentName(parts...)
	return in, nil
}

// findLocaledef returns the first of paths that is an executable file
// root owns and no one else may write, and its metadata, or an error
// wrapping errNoLocaleLayer if there is none.
func findLocaledef(paths []string) (path, id string, err error) {
	for _, p := range paths {
		var st unix.Stat_t
		if unix.Stat(p, &st) != nil {
			continue
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG || !rootOnly(&st) || st.Mode&0o100 == 0 {
			continue
		}
		return p, statID(&st), nil
	}
	return "", "", fmt.Errorf("%w: no localedef in %s", errNoLocaleLayer, strings.Join(paths, ", "))
}

// describeLocaleTree appends to parts a line for name beneath dirFD and,
// for a directory, for everything in it (a compiled locale is a directory
// of files with one subdirectory, LC_MESSAGES). It reports false if the
// tree is not a directory at the top, or holds something other than
// files and directories, deeper than two levels, or that someone other
// than root may write.
func describeLocaleTree(dirFD int, name string, level int, parts *[]string) bool {
	var st unix.Stat_t
	if unix.Fstatat(dirFD, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || !rootOnly(&st) {
		return false
	}
	*parts = append(*parts, strconv.Itoa(level)+"/"+name+":"+statID(&st))
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return level > 0
	case unix.S_IFDIR:
		if level > 1 {
			return false
		}
	default:
		return false
	}
	fd, err := unix.Openat(dirFD, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	d := os.NewFile(uintptr(fd), name)
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return false
	}
	sort.Strings(names)
	for _, n := range names {
		if !describeLocaleTree(fd, n, level+1, parts) {
			return false
		}
	}
	return true
}

// rootOnly reports whether st is owned by root and writable by neither
// its group nor others.
func rootOnly(st *unix.Stat_t) bool { return st.Uid == 0 && st.Mode&0o022 == 0 }

// statID is a file's identity and version: type and mode, owner, size,
// device, inode, and its modification and change times.
func statID(st *unix.Stat_t) string {
	return fmt.Sprintf("%o:%d:%d:%d:%d:%d:%d.%d:%d.%d", st.Mode, st.Uid, st.Gid, st.Size, st.Dev, st.Ino,
		st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
}

// localeLayer returns stateDir/locale/locale<version>-<key>, a directory
// holding only locale-archive, an archive of in's locales, building it
// first if no earlier run has (buildOnce: built aside, renamed into
// place). A layer is used only if it and the directories holding it are
// root's and no one else may write them.
//
// Preconditions: the caller is root; in came from findLocaleInputs.
func localeLayer(ctx context.Context, stateDir string, in *localeInputs) (string, error) {
	parent := filepath.Join(stateDir, localeLayerDir)
	dir, err := buildOnce(parent, "locale"+localeLayerVersion+"-"+in.key, func(tmp string) error {
		return buildLocaleArchive(ctx, tmp, in)
	})
	if err != nil {
		return "", fmt.Errorf("locale layer: %w", err)
	}
	if err := checkLocaleLayer(stateDir, parent, dir); err != nil {
		return "", err
	}
	return dir, nil
}

// buildLocaleArchive writes dir/locale-archive: each of in's locale
// directories added with the host's localedef into a private prefix
// (localedef writes PREFIX/usr/lib/locale/locale-archive). A directory
// localedef rejects is left out; none accepted is an error.
func buildLocaleArchive(ctx context.Context, dir string, in *localeInputs) error {
	prefix := filepath.Join(dir, "prefix")
	out := filepath.Join(prefix, sandboxinit.LocaleDir)
	if err := os.MkdirAll(out, 0o700); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, localedefTimeout)
	defer cancel()
	var failed []string
	for _, d := range in.dirs {
		cmd := exec.CommandContext(ctx, in.localedef, "--prefix="+prefix, "--add-to-archive", d)
		cmd.Env = []string{} // not the caller's: no LOCPATH, I18NPATH…
		cmd.Dir = "/"
		if msg, err := cmd.CombinedOutput(); err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v: %s", d, err, strings.TrimSpace(string(msg))))
		}
	}
	if len(failed) == len(in.dirs) {
		return fmt.Errorf("localedef added no locale: %s", strings.Join(failed, "; "))
	}
	archive := filepath.Join(dir, localeArchive)
	if err := os.Rename(filepath.Join(out, localeArchive), archive); err != nil {
		return fmt.Errorf("localedef wrote no archive: %w", err)
	}
	if err := os.Chmod(archive, localeArchiveMode); err != nil {
		return err
	}
	return os.RemoveAll(prefix)
}

// checkLocaleLayer checks that dirs (the state directory, the layers'
// directory, the layer) are directories, not symlinks, owned by root,
// that no one else may write and others may search (the init reads the
// layer as the sandbox's root, a host uid of its own range), and that the
// layer's archive is a regular root-owned file others may read but not
// write.
func checkLocaleLayer(dirs ...string) error {
	for _, d := range dirs {
		var st unix.Stat_t
		if err := unix.Lstat(d, &st); err != nil {
			return fmt.Errorf("locale layer: %w", err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR || !rootOnly(&st) || st.Mode&0o001 == 0 {
			return fmt.Errorf("locale layer: %s: %w", d, errUntrustedLocaleLayer)
		}
	}
	archive := filepath.Join(dirs[len(dirs)-1], localeArchive)
	var st unix.Stat_t
	if err := unix.Lstat(archive, &st); err != nil {
		return fmt.Errorf("locale layer: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || !rootOnly(&st) || st.Mode&0o004 == 0 {
		return fmt.Errorf("locale layer: %s: %w", archive, errUntrustedLocaleLayer)
	}
	return nil
}

// localeState remembers the inputs whose layer failed to build, so that a
// long-lived runtime tries (and logs) each once, not at every sandbox.
type localeState struct {
	// localedefs replaces localedefPaths when not nil (tests).
	localedefs []string

	mu     sync.Mutex
	failed string // the key of the inputs that last failed
}

// leaseLocaleLayer finds or builds the host's locale layer and leases it
// for a sandbox (kept when unused; Reclaim collects it). It returns nil
// when there is none: the host needs none or cannot have one (logged at
// debug level), or building or checking it failed (logged once per
// input); a sandbox then starts without it.
func (r *Runtime) leaseLocaleLayer() *layerLease {
	defs := r.locale.localedefs
	if defs == nil {
		defs = localedefPaths
	}
	in, err := findLocaleInputs(sandboxinit.LocaleDir, defs)
	if err != nil {
		r.log.Debug("sandboxes start without a locale layer", "reason", err)
		return nil
	}
	r.locale.mu.Lock()
	skip := r.locale.failed == in.key
	r.locale.mu.Unlock()
	if skip {
		return nil
	}
	l, err := r.layers.lease(false, func() (string, error) {
		return localeLayer(context.Background(), r.stateDir, in)
	})
	if err != nil {
		r.locale.mu.Lock()
		r.locale.failed = in.key
		r.locale.mu.Unlock()
		r.log.Warn("sandboxes start without a locale layer", "err", err)
		return nil
	}
	return l
}
