package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/api"
)

// The artifacts of a build, written on the host under --out. Their paths
// and bytes come from what the build left in its sandbox: below --out
// everything goes through descriptors, no symlink is followed, nothing
// but a regular file is replaced, and each file's sha256 is checked
// before it takes its name.

// Refusals of one artifact, for callers (and tests) that branch on them.
var (
	// errArtifactPath: the path is not a clean relative path.
	errArtifactPath = errors.New("not a clean relative path")
	// errArtifactTarget: something that is not a regular file (a
	// symlink, a directory) is where the file or a directory on its way
	// goes.
	errArtifactTarget = errors.New("not replaced")
	// errArtifactDigest: the bytes received do not have the artifact's
	// size or sha256.
	errArtifactDigest = errors.New("the bytes received do not match the build's record")
)

// writeArtifacts writes the artifacts of the build b under the directory
// out (made 0755, with its parents, when absent; out itself is the
// caller's path and may be reached through symlinks), fetching each from
// c.
func writeArtifacts(ctx context.Context, c buildClient, b *api.Build, out string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("%w: --out: %w", errBuildOutput, err)
	}
	root, err := unix.Open(out, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: --out %s: %w", errBuildOutput, out, err)
	}
	defer unix.Close(root)
	for _, a := range b.Artifacts {
		err := writeArtifact(root, a, func(w io.Writer) error {
			return c.BuildArtifact(ctx, b.ID, a.SHA256, w)
		})
		if err != nil {
			return buildOutError(a.Path, err)
		}
	}
	return nil
}

// writeArtifact writes the artifact a beneath the directory root, its
// bytes written to the io.Writer fetch is given: its parent directories
// made (0755) or opened without following a symlink, the file written
// under a temporary name (O_CREAT|O_EXCL|O_NOFOLLOW) while its sha256 is
// computed, checked against a's size and sha256 (else removed), given a's
// permission bits (never setuid, setgid or sticky), then renamed to its
// name: over an absent entry or a regular file, never over anything else.
func writeArtifact(root int, a api.BuildArtifact, fetch func(io.Writer) error) error {
	rel, err := artifactPath(a.Path)
	if err != nil {
		return err
	}
	want, err := hex.DecodeString(a.SHA256)
	if err != nil || len(want) != sha256.Size {
		return fmt.Errorf("%w: sha256 %q", errArtifactDigest, a.SHA256)
	}
	if a.Size < 0 {
		return fmt.Errorf("%w: size %d", errArtifactDigest, a.Size)
	}
	dir, base := path.Split(rel)
	dfd, err := openArtifactDir(root, strings.TrimSuffix(dir, "/"))
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if err := replaceable(dfd, base); err != nil {
		return err
	}
	tmp, f, err := createTemp(dfd, base)
	if err != nil {
		return err
	}
	placed := false
	defer func() {
		if !placed {
			unix.Unlinkat(dfd, tmp, 0)
		}
	}()
	cw := &checkedWriter{w: f, h: sha256.New(), max: a.Size}
	err = fetch(cw)
	if err == nil && cw.n != a.Size {
		err = fmt.Errorf("%w: %d bytes, not %d", errArtifactDigest, cw.n, a.Size)
	}
	if err == nil && !bytes.Equal(cw.h.Sum(nil), want) {
		err = fmt.Errorf("%w: sha256 %x, not %s", errArtifactDigest, cw.h.Sum(nil), a.SHA256)
	}
	if err == nil {
		err = f.Chmod(os.FileMode(a.Mode & 0o777))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	// Looked at again: the rename replaces a symlink put there meanwhile
	// (never follows it), and fails on a directory.
	if err := replaceable(dfd, base); err != nil {
		return err
	}
	if err := unix.Renameat(dfd, tmp, dfd, base); err != nil {
		return fmt.Errorf("renaming to %s: %w", base, err)
	}
	placed = true
	return nil
}

// artifactPath checks an artifact's path: relative, clean, not "." and
// without "..", and returns it.
func artifactPath(p string) (string, error) {
	if p == "" || p == "." || strings.HasPrefix(p, "/") || path.Clean(p) != p || strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("%w: %q", errArtifactPath, p)
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return "", fmt.Errorf("%w: %q", errArtifactPath, p)
		}
	}
	return p, nil
}

// openArtifactDir opens the directory rel (slash-separated, "" for root
// itself) beneath root, one component at a time, making those that are
// absent (0755): a component that is a symlink or not a directory is
// refused (O_NOFOLLOW|O_DIRECTORY), never followed.
func openArtifactDir(root int, rel string) (int, error) {
	fd, err := unix.Openat(root, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if rel == "" {
		return fd, nil
	}
	for _, c := range strings.Split(rel, "/") {
		if err := unix.Mkdirat(fd, c, 0o755); err != nil && err != unix.EEXIST {
			unix.Close(fd)
			return -1, fmt.Errorf("making directory %s: %w", c, err)
		}
		next, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err == unix.ELOOP || err == unix.ENOTDIR {
			return -1, fmt.Errorf("%w: directory %s is a symlink or not a directory", errArtifactTarget, c)
		}
		if err != nil {
			return -1, fmt.Errorf("opening directory %s: %w", c, err)
		}
		fd = next
	}
	return fd, nil
}

// replaceable checks that the entry name of the directory dfd is absent
// or a regular file: what an artifact may take the place of.
func replaceable(dfd int, name string) error {
	var st unix.Stat_t
	err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == unix.ENOENT {
		return nil
	}
	if err != nil {
		return err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return nil
	case unix.S_IFLNK:
		return fmt.Errorf("%w: %s is a symlink", errArtifactTarget, name)
	case unix.S_IFDIR:
		return fmt.Errorf("%w: %s is a directory", errArtifactTarget, name)
	}
	return fmt.Errorf("%w: %s is not a regular file", errArtifactTarget, name)
}

// createTemp creates a new file (0600) beside name in the directory dfd,
// with O_EXCL|O_NOFOLLOW: never an existing entry, never through a
// symlink. It returns the file's name and the file.
func createTemp(dfd int, name string) (string, *os.File, error) {
	for range 10 {
		var r [6]byte
		if _, err := rand.Read(r[:]); err != nil {
			return "", nil, err
		}
		tmp := ".moat-" + hex.EncodeToString(r[:]) + ".tmp"
		fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err == unix.EEXIST {
			continue
		}
		if err != nil {
			return "", nil, fmt.Errorf("creating a file beside %s: %w", name, err)
		}
		return tmp, os.NewFile(uintptr(fd), tmp), nil
	}
	return "", nil, fmt.Errorf("creating a file beside %s: no free temporary name", name)
}

// checkedWriter writes to w what it gets, hashing it with h and counting
// it in n; past max bytes it refuses (the record said the size).
type checkedWriter struct {
	w   io.Writer
	h   hash.Hash
	n   int64
	max int64
}

func (c *checkedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > c.max-c.n {
		return 0, fmt.Errorf("%w: more than %d bytes", errArtifactDigest, c.max)
	}
	n, err := c.w.Write(p)
	c.h.Write(p[:n])
	c.n += int64(n)
	return n, err
}
