package server

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/fstree"
)

// The host side of a step's artifacts: directories under the engine's
// artifact directory, opened and walked through descriptors, never
// following a symlink below the artifact directory (what a sandbox wrote
// there may hold any).

// artifactDir is an open directory under the artifact directory.
type artifactDir struct{ f *os.File }

func (d *artifactDir) fd() int { return int(d.f.Fd()) }

// Close closes the directory.
func (d *artifactDir) Close() error { return d.f.Close() }

// chmod sets the directory's permission bits.
func (d *artifactDir) chmod(mode uint32) error { return unix.Fchmod(d.fd(), mode) }

// openBelow opens rel (slash-separated, "." for root itself) beneath the
// directory root (trusted: the daemon's), following no symlink.
func openBelow(root, rel string) (*os.File, error) {
	top, err := os.Open(root)
	if err != nil {
		return nil, err
	}
	if rel == "." {
		return top, nil
	}
	defer top.Close()
	fd, err := fstree.OpenBeneath(int(top.Fd()), rel, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", rel, err)
	}
	return os.NewFile(uintptr(fd), path.Join(root, rel)), nil
}

// checkArtifactDir checks that p is a directory under root (the artifact
// directory, or itself) reached without a symlink.
func checkArtifactDir(root, p string) error {
	rel, err := underDir(root, p)
	if err != nil {
		return err
	}
	f, err := openBelow(root, rel)
	if err != nil {
		return fmt.Errorf("%s is not a directory reached without a symlink: %w", p, err)
	}
	return f.Close()
}

// openArtifactDir opens dir, a directory under root reached without a
// symlink.
func openArtifactDir(root, dir string) (*artifactDir, error) {
	rel, err := underDir(root, dir)
	if err != nil {
		return nil, api.Errorf(api.CodeInvalidArgument, "%v", err)
	}
	f, err := openBelow(root, rel)
	if err != nil {
		return nil, fmt.Errorf("the output directory %s: %w", dir, err)
	}
	return &artifactDir{f: f}, nil
}

// mkdirs makes rel (slash-separated, "." for d itself) beneath d, a
// component at a time, and opens it; an existing component must be a
// directory, never a symlink.
func (d *artifactDir) mkdirs(rel string) (*artifactDir, error) {
	cur, err := unix.Openat(d.fd(), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if rel != "." {
		for _, name := range strings.Split(rel, "/") {
			if err := unix.Mkdirat(cur, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				unix.Close(cur)
				return nil, fmt.Errorf("mkdir %s: %w", rel, err)
			}
			next, err := fstree.OpenBeneath(cur, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
			unix.Close(cur)
			if err != nil {
				return nil, fmt.Errorf("%s: %s is not a directory (a symlink is not followed): %w", rel, name, err)
			}
			cur = next
		}
	}
	return &artifactDir{f: os.NewFile(uintptr(cur), rel)}, nil
}

// typeOf is the type of the entry name of d (the S_IFMT bits of its
// st_mode, a symlink not followed), zero when there is none.
func (d *artifactDir) typeOf(name string) (uint32, error) {
	var st unix.Stat_t
	err := unix.Fstatat(d.fd(), name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return st.Mode & unix.S_IFMT, nil
}

// hashArtifacts lists the regular files beneath d, sorted by path, with
// their sizes and sha256; each path is the file's in the sandbox ("/" and
// its path below d). Symlinks are neither followed nor listed.
func hashArtifacts(d *artifactDir) ([]api.WorkflowArtifact, error) {
	files, err := walkArtifacts(d, "/", nil)
	if err != nil {
		return nil, err
	}
	out := make([]api.WorkflowArtifact, len(files))
	for i, f := range files {
		out[i] = api.WorkflowArtifact{Path: f.path, Bytes: f.size, SHA256: f.sha256}
	}
	return out, nil
}

// walkArtifacts lists the regular files beneath d, sorted by path, with
// their sizes, permission bits and sha256; each path is prefix joined
// with the file's path below d ("/": the sandbox's, ".": relative).
// Symlinks and special files are neither followed nor listed: other (nil:
// ignored) is told of each, with its path.
func walkArtifacts(d *artifactDir, prefix string, other func(p string)) ([]artifactFile, error) {
	out := []artifactFile{}
	var walk func(dirfd int, rel string, depth int) error
	walk = func(dirfd int, rel string, depth int) error {
		if depth > fstree.DefaultMaxDepth {
			return fmt.Errorf("%s: deeper than %d levels", rel, fstree.DefaultMaxDepth)
		}
		dup, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		dir := os.NewFile(uintptr(dup), rel)
		names, err := dir.Readdirnames(-1)
		dir.Close()
		if err != nil {
			return err
		}
		slices.Sort(names)
		for _, name := range names {
			p := path.Join(rel, name)
			var st unix.Stat_t
			if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFDIR:
				sub, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				if err != nil {
					return fmt.Errorf("%s: %w", p, err)
				}
				err = walk(sub, p, depth+1)
				unix.Close(sub)
				if err != nil {
					return err
				}
			case unix.S_IFREG:
				a, err := hashFile(dirfd, name, p)
				if err != nil {
					return err
				}
				out = append(out, a)
			default:
				if other != nil {
					other(p)
				}
			}
		}
		return nil
	}
	if err := walk(d.fd(), prefix, 0); err != nil {
		return nil, fmt.Errorf("hashing the outputs: %w", err)
	}
	return out, nil
}

// hashFile hashes the regular file name of dirfd; p is its path as
// listed.
func hashFile(dirfd int, name, p string) (artifactFile, error) {
	f, st, err := fstree.OpenRegular(dirfd, name)
	if err != nil {
		return artifactFile{}, fmt.Errorf("%s: %w", p, err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return artifactFile{}, fmt.Errorf("%s: %w", p, err)
	}
	return artifactFile{path: p, size: n, sha256: hex.EncodeToString(h.Sum(nil)), mode: st.Mode & 0o7777}, nil
}
