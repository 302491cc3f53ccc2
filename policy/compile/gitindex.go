package compile

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// Limits of readGitlinks: an index larger than maxIndexBytes is not read
// (the sandbox's submodule directories then stay unprotected, and the
// report says so); names are at most maxIndexName bytes (PATH_MAX).
const (
	maxIndexBytes = 512 << 20
	maxIndexName  = 4096
	maxConfig     = 1 << 20
)

// gitlinkMode is the index mode of a submodule entry.
const gitlinkMode = 0o160000

// readGitlinks returns the paths of the gitlinks (submodules) in the index
// of the git directory dir, relative to its worktree. A missing index has
// none. Only the entries are read (versions 2, 3 and 4, SHA-1 or SHA-256
// object names); names that are not clean relative paths are skipped, as
// git refuses them. The file is opened without following a symlink and
// must be a regular file.
func readGitlinks(dir string) ([]string, error) {
	f, size, err := openRegular(dir+"/index", maxIndexBytes)
	if errors.Is(err, errNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	hashLen := 20
	if b, err := readSmallRegular(dir+"/config", maxConfig); err == nil && sha256Repo(b) {
		hashLen = 32
	}
	return parseGitlinks(bufio.NewReader(io.LimitReader(f, size)), hashLen)
}

// sha256Repo says whether a repository config sets
// extensions.objectFormat = sha256.
func sha256Repo(config []byte) bool {
	for _, line := range strings.Split(strings.ToLower(string(config)), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if ok && strings.TrimSpace(k) == "objectformat" && strings.Trim(strings.TrimSpace(v), `"`) == "sha256" {
			return true
		}
	}
	return false
}

var errIndex = errors.New("not a git index")

// parseGitlinks reads index entries from r and returns the gitlinks' names.
func parseGitlinks(r *bufio.Reader, hashLen int) ([]string, error) {
	var hdr [12]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, fmt.Errorf("%w: %v", errIndex, err)
	}
	if string(hdr[:4]) != "DIRC" {
		return nil, fmt.Errorf("%w: bad signature", errIndex)
	}
	version := binary.BigEndian.Uint32(hdr[4:8])
	if version < 2 || version > 4 {
		return nil, fmt.Errorf("%w: version %d", errIndex, version)
	}
	count := binary.BigEndian.Uint32(hdr[8:12])
	fixed := 40 + hashLen + 2 // stat data, object name, flags
	buf := make([]byte, fixed+2)
	var links []string
	var prev []byte
	for i := uint32(0); i < count; i++ {
		if _, err := io.ReadFull(r, buf[:fixed]); err != nil {
			return nil, fmt.Errorf("%w: entry %d: %v", errIndex, i, err)
		}
		mode := binary.BigEndian.Uint32(buf[24:28])
		flags := binary.BigEndian.Uint16(buf[fixed-2 : fixed])
		n := fixed
		if flags&0x4000 != 0 {
			if version < 3 {
				return nil, fmt.Errorf("%w: extended flags in version %d", errIndex, version)
			}
			if _, err := io.ReadFull(r, buf[fixed:fixed+2]); err != nil {
				return nil, fmt.Errorf("%w: entry %d: %v", errIndex, i, err)
			}
			n += 2
		}
		var name []byte
		if version == 4 {
			strip, err := readOffsetVarint(r)
			if err != nil || strip > uint64(len(prev)) {
				return nil, fmt.Errorf("%w: entry %d: bad name prefix", errIndex, i)
			}
			suffix, err := readName(r)
			if err != nil {
				return nil, fmt.Errorf("%w: entry %d: %v", errIndex, i, err)
			}
			name = append(prev[:len(prev)-int(strip):len(prev)-int(strip)], suffix...)
		} else {
			var err error
			if name, err = readName(r); err != nil {
				return nil, fmt.Errorf("%w: entry %d: %v", errIndex, i, err)
			}
			// NULs pad the entry to a multiple of 8 bytes (at least one,
			// read with the name).
			pad := (8 - (n+len(name)+1)%8) % 8
			if _, err := r.Discard(pad); err != nil {
				return nil, fmt.Errorf("%w: entry %d: %v", errIndex, i, err)
			}
		}
		if len(name) > maxIndexName {
			return nil, fmt.Errorf("%w: entry %d: name longer than %d bytes", errIndex, i, maxIndexName)
		}
		prev = name
		if mode&0o170000 == gitlinkMode && cleanRel(string(name)) {
			links = append(links, string(name))
		}
	}
	return links, nil
}

// readName reads a NUL-terminated name of at most maxIndexName bytes.
func readName(r *bufio.Reader) ([]byte, error) {
	var name []byte
	for {
		chunk, err := r.ReadSlice(0)
		name = append(name, chunk...)
		if len(name) > maxIndexName+1 {
			return nil, fmt.Errorf("name longer than %d bytes", maxIndexName)
		}
		if err == nil {
			return bytes.Clone(name[:len(name)-1]), nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
	}
}

// readOffsetVarint reads git's offset varint (index version 4).
func readOffsetVarint(r *bufio.Reader) (uint64, error) {
	c, err := r.ReadByte()
	if err != nil {
		return 0, err
	}
	v := uint64(c & 0x7f)
	for c&0x80 != 0 {
		if v > 1<<50 {
			return 0, errIndex
		}
		if c, err = r.ReadByte(); err != nil {
			return 0, err
		}
		v = (v+1)<<7 | uint64(c&0x7f)
	}
	return v, nil
}

// cleanRel says whether p is a clean relative path without "." or ".."
// components or a .git component (git refuses such index entries).
func cleanRel(p string) bool {
	if p == "" || path.IsAbs(p) || path.Clean(p) != p || strings.ContainsRune(p, 0) {
		return false
	}
	for _, c := range strings.Split(p, "/") {
		if c == "." || c == ".." || strings.EqualFold(c, ".git") {
			return false
		}
	}
	return true
}
