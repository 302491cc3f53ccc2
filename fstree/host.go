package fstree

import (
	"errors"
	"fmt"
	"path/filepath"
)

// ErrSymlink is what a *SymlinkError wraps.
var ErrSymlink = errors.New("symlink")

// SymlinkError is the refusal of a path that has a symlink on it, or of
// a destination that is one: Link is the part of Path (cleaned) up to and
// including the component that is a symlink.
type SymlinkError struct {
	Path, Link string
}

func (e *SymlinkError) Error() string {
	if e.Link == filepath.Clean(e.Path) {
		return fmt.Sprintf("%s is a symlink", e.Path)
	}
	return fmt.Sprintf("%s: %s is a symlink", e.Path, e.Link)
}

// Unwrap returns ErrSymlink.
func (e *SymlinkError) Unwrap() error { return ErrSymlink }

// ErrNotRegular: OpenRegular found something else than a regular file.
var ErrNotRegular = errors.New("not a regular file")
