package policy

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"syscall"
)

// maxSymlinks is how many symlinks one resolution follows (as Linux).
const maxSymlinks = 40

// ResolvePath resolves the symlinks of an absolute path on the host the way
// the kernel walks it: a ".." after a symlink goes to the parent of the
// link's target. Components that do not exist are appended as written
// (lexically cleaned), so the longest existing prefix is resolved.
func ResolvePath(p string) (string, error) {
	if !path.IsAbs(p) || strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("policy: not an absolute path: %q", p)
	}
	return resolvePath(p, true)
}

// resolvePath resolves p; with followLast false the last component is not
// followed if it is a symlink (the directory entry itself is meant).
func resolvePath(p string, followLast bool) (string, error) {
	todo := strings.Split(p, "/")
	var done []string // resolved components
	missing := false
	hops := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(done) > 0 {
				done = done[:len(done)-1]
			}
			continue
		}
		last := true
		for _, t := range todo {
			if t != "" && t != "." {
				last = false
				break
			}
		}
		// A trailing slash ("link/") follows the link even for entries.
		if missing || (last && !followLast && !strings.HasSuffix(p, "/")) {
			done = append(done, c)
			continue
		}
		cur := "/" + strings.Join(append(done, c), "/")
		fi, err := os.Lstat(cur)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				missing = true
				done = append(done, c)
				continue
			}
			return "", err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			done = append(done, c)
			continue
		}
		hops++
		if hops > maxSymlinks {
			return "", fmt.Errorf("%s: too many levels of symbolic links", p)
		}
		target, err := os.Readlink(cur)
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(target, "/") {
			done = done[:0]
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	return "/" + strings.Join(done, "/"), nil
}
