//go:build !linux

package policy

import (
	"io/fs"
	"os"
	"path"
)

// openProject opens a project policy file p, refusing a symlink in any
// component below the workspace ws (checked, then opened: without
// openat2 the check is best effort) and anything but a regular file.
func openProject(ws, p string) (*os.File, error) {
	if ws != "" && path.IsAbs(ws) && under(p, path.Clean(ws)) {
		for d := path.Dir(p); under(d, path.Clean(ws)) && d != path.Clean(ws); d = path.Dir(d) {
			if fi, err := os.Lstat(d); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
				return nil, errSymlink
			}
		}
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil, errSymlink
	}
	if !fi.Mode().IsRegular() {
		return nil, errSpecial
	}
	return os.Open(p)
}

// openOperator opens the operator's policy file p, following symlinks.
func openOperator(p string) (*os.File, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, errSpecial
	}
	return os.Open(p)
}
