package linux

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/runtime/linux/leaninit"
	"github.com/moat-sandbox/moat/runtime/linux/sandboxinit"
)

// InitArg is argv[1] of a sandbox's init (see sandboxinit.Arg).
const InitArg = sandboxinit.Arg

// IsInit reports whether this process was started as a sandbox's init.
func IsInit() bool { return len(os.Args) > 1 && os.Args[1] == InitArg }

// Init runs this process as a sandbox's pid 1 (sandboxinit.Main): the
// init of a moat built without the lean init, or of a test binary. It
// never returns.
func Init() { sandboxinit.Main() }

// initDir is the directory of the state directory that holds the lean
// init executables, one per build, named by their SHA-256.
const initDir = "init"

// The modes of initDir and of an init executable in it.
const (
	initDirMode  = 0o711
	initFileMode = 0o555
)

// errUntrustedInit reports an init executable (or a directory holding it)
// that someone other than root could have written.
var errUntrustedInit = errors.New("not a root-owned, read-only file in a root-owned directory")

// installLeanInit returns the path of bin's executable under stateDir,
// writing it there first if no earlier run has: stateDir/init/moat-init-SUM,
// content-addressed, root-owned, mode 0555, in root-owned directories no
// one else may write to (the init execs it as the sandbox's root, a
// host uid of its own range: it must be able to search and execute, not
// write). A file found there is used only if it passes the same checks
// and has bin's size; a new one is written to a temporary file created
// with O_EXCL, checked against bin's SHA-256, synced and renamed into
// place (concurrent installers rename identical files).
//
// Preconditions: the caller is root (New checks it).
func installLeanInit(stateDir string, bin leaninit.Binary) (string, error) {
	if len(bin.SHA256) != sha256.Size*2 {
		return "", fmt.Errorf("lean init: malformed checksum %q", bin.SHA256)
	}
	dir := filepath.Join(stateDir, initDir)
	p := filepath.Join(dir, "moat-init-"+bin.SHA256)
	size := int64(len(bin.Bytes))
	if checkInitFile(p, size) == nil && checkRootDirs(stateDir, dir) == nil {
		return p, nil
	}
	if err := os.MkdirAll(dir, initDirMode); err != nil {
		return "", fmt.Errorf("lean init: %w", err)
	}
	if err := checkRootDirs(stateDir, dir); err != nil {
		return "", err
	}
	if err := os.Chmod(dir, initDirMode); err != nil {
		return "", fmt.Errorf("lean init: %w", err)
	}
	switch err := checkInitFile(p, size); {
	case err == nil:
		return p, nil
	case !errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("lean init %s: %w", p, err)
	}
	if sum := sha256.Sum256(bin.Bytes); hex.EncodeToString(sum[:]) != bin.SHA256 {
		return "", fmt.Errorf("lean init: embedded executable does not match its checksum %s", bin.SHA256)
	}
	f, err := os.CreateTemp(dir, ".moat-init-*") // O_EXCL
	if err != nil {
		return "", fmt.Errorf("lean init: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after the rename, a no-op
	_, err = f.Write(bin.Bytes)
	if err == nil {
		err = f.Chmod(initFileMode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		return "", fmt.Errorf("lean init: write %s: %w", p, err)
	}
	return p, nil
}

// checkInitFile checks that p is a regular file of size bytes, owned by
// root and writable by no one (not followed if a symlink).
func checkInitFile(p string, size int64) error {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return os.ErrNotExist
		}
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Uid != 0 || st.Mode&0o7777 != initFileMode || st.Size != size {
		return errUntrustedInit
	}
	return nil
}

// checkRootDirs checks that each of dirs is a directory (not a symlink)
// owned by root that neither its group nor others may write to, and
// others may search (the init's exec is theirs).
func checkRootDirs(dirs ...string) error {
	for _, d := range dirs {
		var st unix.Stat_t
		if err := unix.Lstat(d, &st); err != nil {
			return fmt.Errorf("lean init: %w", err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != 0 || st.Mode&0o022 != 0 || st.Mode&0o001 == 0 {
			return fmt.Errorf("lean init: %s: %w", d, errUntrustedInit)
		}
	}
	return nil
}
