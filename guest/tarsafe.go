package guest

import (
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/moat-sandbox/moat/sandbox"
)

// Pure helpers of the file operations: path and tar-name rules, error
// codes. They touch no file, so they are unit-tested on any OS.

// Error codes of file operations that are moat's own rather than the
// kernel's.
const (
	codeTooBig  = "ETOOBIG"
	codeBadTar  = "EBADTAR"
	codeInvalid = "EINVAL"
)

// Limits of file operations.
const (
	// maxTarEntries bounds the entries of one extracted archive.
	maxTarEntries = 100_000
	// maxTreeDepth bounds how deep a recursive remove or an archived
	// tree goes; each level holds one directory descriptor.
	maxTreeDepth = 1024
	// creationUmask is applied to the modes of directories and
	// extracted entries, as a sandbox process with umask 022 gets.
	creationUmask = 0o022
)

// fileError is a failed file operation with the errno-like code reported to
// the host.
type fileError struct {
	code, msg string
}

func (e *fileError) Error() string { return e.msg }

func errTooBig(format string, a ...any) error {
	return &fileError{codeTooBig, fmt.Sprintf(format, a...)}
}

func errBadTar(format string, a ...any) error {
	return &fileError{codeBadTar, fmt.Sprintf(format, a...)}
}

func errInvalid(format string, a ...any) error {
	return &fileError{codeInvalid, fmt.Sprintf(format, a...)}
}

// sandboxPath turns a path given by the host into a clean absolute path of
// the sandbox: a relative path starts at /workspace; "." and ".." are
// resolved lexically (".." never goes above "/"). It never touches the
// filesystem: the result is still resolved beneath the sandbox root.
func sandboxPath(p string) (string, error) {
	if p == "" {
		return "", errInvalid("empty path")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", errInvalid("path contains a NUL byte")
	}
	if !strings.HasPrefix(p, "/") {
		p = sandbox.WorkspaceDir + "/" + p
	}
	return path.Clean(p), nil
}

// splitPath splits a clean absolute path into its parent directory and
// last component; the root has no last component ("/", "").
func splitPath(clean string) (dir, name string) {
	if clean == "/" {
		return "/", ""
	}
	i := strings.LastIndexByte(clean, '/')
	dir, name = clean[:i], clean[i+1:]
	if dir == "" {
		dir = "/"
	}
	return dir, name
}

// cleanTarName validates a tar entry's name (or a hard link's target) and
// returns it relative to the extraction directory, without "." components
// or duplicate slashes: "" is the extraction directory itself ("./").
// Absolute names, ".." components, empty names and NUL bytes are refused.
func cleanTarName(name string) (string, error) {
	switch {
	case name == "":
		return "", errors.New("empty name")
	case strings.IndexByte(name, 0) >= 0:
		return "", errors.New("name contains a NUL byte")
	case strings.HasPrefix(name, "/"):
		return "", errors.New("absolute name")
	}
	var parts []string
	for _, c := range strings.Split(name, "/") {
		switch c {
		case "", ".":
		case "..":
			return "", errors.New(`".." component leaves the extraction directory`)
		default:
			parts = append(parts, c)
		}
	}
	return strings.Join(parts, "/"), nil
}

// createMode is the permission mode a directory is created with: the
// requested bits, or def when none are given, less the setuid, setgid and
// sticky bits and the creation umask.
func createMode(mode uint32, def uint32) uint32 {
	if mode&0o777 == 0 {
		mode = def
	}
	return mode & 0o777 &^ creationUmask
}

// tarPerm is the permission mode of an extracted entry: its own bits less
// setuid, setgid, sticky and the creation umask.
func tarPerm(mode int64) uint32 {
	return uint32(mode) & 0o777 &^ creationUmask
}

// eofWatch passes reads through and remembers whether the stream ended.
// archive/tar treats an archive that stops at an entry boundary, without
// its two zero blocks, as complete; an extraction that reaches EOF on the
// underlying stream before tar does has seen a truncated archive.
type eofWatch struct {
	r   io.Reader
	eof bool
}

func (w *eofWatch) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	if err == io.EOF {
		w.eof = true
	}
	return n, err
}
