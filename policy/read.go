package policy

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
)

// Reading policy files.
//
// A project file (<workspace>/.moat/policy.toml) lies where a sandbox may
// have written: it is opened beneath the workspace without following any
// symlink (neither .moat nor policy.toml may be one), without blocking
// (a FIFO never hangs the reader) and must be a regular file of at most
// MaxFileSize bytes; anything else is an error that names the problem
// without reading what the entry points at. The managed and user files
// are the operator's and may be symlinks (dotfile managers link them),
// but what they lead to must still be a regular file within the cap, opened
// without blocking.

// ErrUnsafeFile is matched (errors.Is) by the error for a policy file
// that is refused unread: a symlink where none may be, a FIFO, a device,
// a directory, a file over MaxFileSize.
var ErrUnsafeFile = errors.New("policy file refused")

// FileError is a policy file that could not be read. Name is the file as
// errors show it (".moat/policy.toml", "~/.config/moat/policy.toml").
type FileError struct {
	Layer  Layer
	Name   string
	Reason string
	Err    error // the cause, if any (ErrUnsafeFile for a refused entry)
	bare   bool  // no layer: a file named on the command line (ReadFile)
}

func (e *FileError) Error() string {
	if e.bare {
		return fmt.Sprintf("policy: %s: %s", e.Name, e.Reason)
	}
	return fmt.Sprintf("policy: %s %s: %s", e.Layer, e.Name, e.Reason)
}

func (e *FileError) Unwrap() error { return e.Err }

// ReadFile reads a policy file the way the operator's own files are read
// (moat policy check): a regular file (a symlink is followed), opened
// without blocking, at most MaxFileSize bytes.
func ReadFile(p string) ([]byte, error) {
	data, err := readPolicy(Context{}, User, p)
	var fe *FileError
	switch {
	case errors.As(err, &fe):
		fe.Name, fe.bare = p, true
	case err == nil && data == nil:
		return nil, &FileError{Name: p, Reason: "no such file", Err: fs.ErrNotExist, bare: true}
	}
	return data, err
}

// readPolicy reads the policy file p of layer: nil data for a missing
// file, an error for anything unreadable or refused.
func readPolicy(c Context, layer Layer, p string) ([]byte, error) {
	name := displayName(c, layer, p)
	fail := func(reason string, err error) error {
		return &FileError{Layer: layer, Name: name, Reason: reason, Err: err}
	}
	if !path.IsAbs(p) || strings.IndexByte(p, 0) >= 0 || len(p) > 4095 {
		return nil, fail("not an absolute path", nil)
	}
	p = path.Clean(p)
	var f *os.File
	var err error
	if layer == Project {
		f, err = openProject(c.Workspace, p)
	} else {
		f, err = openOperator(p)
	}
	if err != nil {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, nil
		case errors.Is(err, errSymlink):
			return nil, fail("is a symlink or lies under one: a project's policy file is never followed", ErrUnsafeFile)
		case errors.Is(err, errSpecial):
			return nil, fail("not a regular file (a FIFO, socket or device is never opened)", ErrUnsafeFile)
		}
		return nil, fail(errnoText(err), err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fail(errnoText(err), err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fail("not a regular file ("+fileType(fi.Mode())+")", ErrUnsafeFile)
	}
	if fi.Size() > MaxFileSize {
		return nil, fail(fmt.Sprintf("larger than %d bytes", MaxFileSize), ErrUnsafeFile)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fail(errnoText(err), err)
	}
	if len(data) > MaxFileSize {
		return nil, fail(fmt.Sprintf("larger than %d bytes", MaxFileSize), ErrUnsafeFile)
	}
	if data == nil {
		data = []byte{}
	}
	return data, nil
}

// errSymlink and errSpecial are what the openers return for an entry they
// refuse to follow or to open.
var (
	errSymlink = errors.New("symlink")
	errSpecial = errors.New("not a regular file")
)

// errnoText is an open or read error without the path it names (the
// caller names the file its own way).
func errnoText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Op + ": " + pe.Err.Error()
	}
	return err.Error()
}

func fileType(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	}
	return "not a regular file"
}
