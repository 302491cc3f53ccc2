package sandboxtest

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/sandbox"
)

// node is one entry of the in-memory tree.
type node struct {
	typ    string // "file", "dir", "symlink", "fifo" or "dev"
	data   []byte
	mode   fs.FileMode // permission bits
	mtime  time.Time
	kids   map[string]*node
	target string      // a symlink's
	fifo   chan []byte // a FIFO's: one message per writer
	ro     bool        // the sandbox user cannot change it (or, a directory, what is in it)
	// noAccess: a directory the sandbox user cannot look into (/proc:
	// the fake has no processes to show).
	noAccess bool
}

func newDir(mode fs.FileMode, ro bool) *node {
	return &node{typ: "dir", mode: mode, mtime: time.Now(), kids: map[string]*node{}, ro: ro}
}

// memFS is a sandbox's file tree; it implements sandbox.Files.
type memFS struct {
	mu   sync.Mutex
	root *node
}

func newMemFS(hostname string) *memFS {
	root := newDir(0o755, true)
	f := &memFS{root: root}
	add := func(dir string, n *node) *node {
		parent := root
		for _, c := range strings.Split(strings.Trim(path.Dir(dir), "/"), "/") {
			if c != "" {
				parent = parent.kids[c]
			}
		}
		parent.kids[path.Base(dir)] = n
		return n
	}
	for _, d := range []string{"/bin", "/dev", "/etc", "/proc", "/usr"} {
		add(d, newDir(0o755, true))
	}
	root.kids["proc"].noAccess = true
	add("/usr/bin", newDir(0o755, true))
	add("/home", newDir(0o755, true))
	add(sandbox.HomeDir, newDir(0o755, false))
	add("/tmp", newDir(0o1777, false))
	add(sandbox.WorkspaceDir, newDir(0o755, false))
	now := time.Now()
	add("/etc/hostname", &node{typ: "file", data: []byte(hostname + "\n"), mode: 0o644, mtime: now, ro: true})
	add("/etc/passwd", &node{typ: "file", data: []byte("root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n"), mode: 0o644, mtime: now, ro: true})
	add("/dev/null", &node{typ: "dev", mode: 0o666, mtime: now})
	add("/dev/zero", &node{typ: "dev", mode: 0o666, mtime: now})
	return f
}

func ferr(op, p, code, msg string) error {
	return &sandbox.FileError{Op: op, Path: p, Code: code, Message: msg}
}

var (
	msgNoEnt    = "no such file or directory"
	msgNotDir   = "not a directory"
	msgIsDir    = "is a directory"
	msgExist    = "file exists"
	msgNotEmpty = "directory not empty"
	msgAccess   = "permission denied"
)

// abs makes p absolute (relative to /workspace) and clean.
func abs(p string) string {
	if !strings.HasPrefix(p, "/") {
		p = "/workspace/" + p
	}
	return path.Clean(p)
}

// lookup finds the node of p (absolute, clean); follow says whether a
// final symlink is followed. Intermediate symlinks are always followed
// (inside the tree). Callers hold mu.
func (f *memFS) lookup(op, p string, follow bool) (*node, error) {
	return f.walk(op, p, follow, 0)
}

func (f *memFS) walk(op, p string, follow bool, depth int) (*node, error) {
	if depth > 40 {
		return nil, ferr(op, p, "ELOOP", "too many levels of symbolic links")
	}
	n := f.root
	cur := "/"
	parts := strings.Split(strings.Trim(p, "/"), "/")
	for i, c := range parts {
		if c == "" {
			continue
		}
		if n.typ != "dir" {
			return nil, ferr(op, p, "ENOTDIR", msgNotDir)
		}
		if n.noAccess {
			return nil, ferr(op, p, "EACCES", msgAccess)
		}
		k := n.kids[c]
		if k == nil {
			return nil, ferr(op, p, "ENOENT", msgNoEnt)
		}
		cur = path.Join(cur, c)
		if k.typ == "symlink" && (i < len(parts)-1 || follow) {
			t := k.target
			if !strings.HasPrefix(t, "/") {
				t = path.Join(path.Dir(cur), t)
			}
			rest := path.Join(append([]string{t}, parts[i+1:]...)...)
			return f.walk(op, path.Clean(rest), follow, depth+1)
		}
		n = k
	}
	return n, nil
}

// parent finds the directory that holds p and p's base name.
func (f *memFS) parent(op, p string) (*node, string, error) {
	if p == "/" {
		return nil, "", ferr(op, p, "EBUSY", "device or resource busy")
	}
	dir, err := f.lookup(op, path.Dir(p), true)
	if err != nil {
		return nil, "", err
	}
	if dir.typ != "dir" {
		return nil, "", ferr(op, p, "ENOTDIR", msgNotDir)
	}
	return dir, path.Base(p), nil
}

func info(name string, n *node) sandbox.FileInfo {
	t := n.typ
	switch t {
	case "fifo", "dev":
		t = "other"
	}
	return sandbox.FileInfo{Name: name, Type: t, Size: int64(len(n.data)), Mode: uint32(n.mode), ModTime: n.mtime, Target: n.target}
}

// ReadFile returns at most max bytes of a regular file.
func (f *memFS) ReadFile(ctx context.Context, p string, max int64) ([]byte, error) {
	p = abs(p)
	f.mu.Lock()
	defer f.mu.Unlock()
	n, err := f.lookup("read", p, true)
	if err != nil {
		return nil, err
	}
	switch n.typ {
	case "dir":
		return nil, ferr("read", p, "EISDIR", msgIsDir)
	case "file":
	default:
		return nil, ferr("read", p, "EINVAL", "not a regular file")
	}
	if int64(len(n.data)) > max {
		return nil, ferr("read", p, "ETOOBIG", "file is larger than the limit")
	}
	return bytes.Clone(n.data), nil
}

// WriteFile replaces p with at most max bytes of r.
func (f *memFS) WriteFile(ctx context.Context, p string, r io.Reader, mode fs.FileMode, max int64) (int64, error) {
	p = abs(p)
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return 0, err
	}
	if int64(len(data)) > max {
		return 0, ferr("write", p, "ETOOBIG", "content is larger than the limit")
	}
	if mode == 0 {
		mode = 0o644
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return int64(len(data)), f.put("write", p, data, mode.Perm(), false)
}

// put writes a regular file (append adds to an existing one). Callers
// hold mu.
func (f *memFS) put(op, p string, data []byte, mode fs.FileMode, appendTo bool) error {
	dir, name, err := f.parent(op, p)
	if err != nil {
		return err
	}
	old := dir.kids[name]
	if old != nil && old.typ == "dir" {
		return ferr(op, p, "EISDIR", msgIsDir)
	}
	if dir.ro || old != nil && old.ro {
		return ferr(op, p, "EACCES", msgAccess)
	}
	if old != nil && appendTo && old.typ == "file" {
		old.data = append(old.data, data...)
		old.mtime = time.Now()
		return nil
	}
	dir.kids[name] = &node{typ: "file", data: data, mode: mode, mtime: time.Now()}
	return nil
}

// ReadDir lists a directory, sorted by name.
func (f *memFS) ReadDir(ctx context.Context, p string) ([]sandbox.FileInfo, error) {
	p = abs(p)
	f.mu.Lock()
	defer f.mu.Unlock()
	n, err := f.lookup("list", p, true)
	if err != nil {
		return nil, err
	}
	if n.typ != "dir" {
		return nil, ferr("list", p, "ENOTDIR", msgNotDir)
	}
	if n.noAccess {
		return nil, ferr("list", p, "EACCES", msgAccess)
	}
	out := make([]sandbox.FileInfo, 0, len(n.kids))
	for name, k := range n.kids {
		out = append(out, info(name, k))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Stat describes p without following a final symlink.
func (f *memFS) Stat(ctx context.Context, p string) (*sandbox.FileInfo, error) {
	p = abs(p)
	f.mu.Lock()
	defer f.mu.Unlock()
	n, err := f.lookup("stat", p, false)
	if err != nil {
		return nil, err
	}
	fi := info(path.Base(p), n)
	return &fi, nil
}

// Mkdir creates a directory (and its parents if parents is set).
func (f *memFS) Mkdir(ctx context.Context, p string, mode fs.FileMode, parents bool) error {
	p = abs(p)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mkdir(p, mode, parents)
}

func (f *memFS) mkdir(p string, mode fs.FileMode, parents bool) error {
	if mode == 0 {
		mode = 0o755
	}
	if n, err := f.lookup("mkdir", p, true); err == nil {
		if parents && n.typ == "dir" {
			return nil
		}
		return ferr("mkdir", p, "EEXIST", msgExist)
	}
	dir, name, err := f.parent("mkdir", p)
	if errors.Is(err, fs.ErrNotExist) && parents {
		if err := f.mkdir(path.Dir(p), mode, true); err != nil {
			return err
		}
		dir, name, err = f.parent("mkdir", p)
	}
	if err != nil {
		return err
	}
	if dir.ro {
		return ferr("mkdir", p, "EACCES", msgAccess)
	}
	if dir.kids[name] != nil {
		return ferr("mkdir", p, "EEXIST", msgExist)
	}
	dir.kids[name] = newDir(mode.Perm(), false)
	return nil
}

// Remove deletes a file, an empty directory or, recursive, a tree.
func (f *memFS) Remove(ctx context.Context, p string, recursive bool) error {
	p = abs(p)
	f.mu.Lock()
	defer f.mu.Unlock()
	dir, name, err := f.parent("remove", p)
	if err != nil {
		return err
	}
	n := dir.kids[name]
	if n == nil {
		return ferr("remove", p, "ENOENT", msgNoEnt)
	}
	if dir.ro || n.ro {
		return ferr("remove", p, "EACCES", msgAccess)
	}
	if n.typ == "dir" && len(n.kids) > 0 && !recursive {
		return ferr("remove", p, "ENOTEMPTY", msgNotEmpty)
	}
	delete(dir.kids, name)
	return nil
}

// Rename moves from to to, replacing to if it is a file (or an empty
// directory, when from is one).
func (f *memFS) Rename(ctx context.Context, from, to string) error {
	from, to = abs(from), abs(to)
	f.mu.Lock()
	defer f.mu.Unlock()
	fdir, fname, err := f.parent("move", from)
	if err != nil {
		return err
	}
	n := fdir.kids[fname]
	if n == nil {
		return ferr("move", from, "ENOENT", msgNoEnt)
	}
	if to == from {
		return nil
	}
	if n.typ == "dir" && strings.HasPrefix(to, from+"/") {
		return ferr("move", to, "EINVAL", "cannot move a directory into itself")
	}
	tdir, tname, err := f.parent("move", to)
	if err != nil {
		return err
	}
	if fdir.ro || tdir.ro || n.ro {
		return ferr("move", from, "EACCES", msgAccess)
	}
	if old := tdir.kids[tname]; old != nil {
		switch {
		case old.ro:
			return ferr("move", to, "EACCES", msgAccess)
		case old.typ == "dir" && n.typ != "dir":
			return ferr("move", to, "EISDIR", msgIsDir)
		case old.typ != "dir" && n.typ == "dir":
			return ferr("move", to, "ENOTDIR", msgNotDir)
		case old.typ == "dir" && len(old.kids) > 0:
			return ferr("move", to, "ENOTEMPTY", msgNotEmpty)
		}
	}
	delete(fdir.kids, fname)
	tdir.kids[tname] = n
	return nil
}

// PutTar extracts a tar stream under dir.
func (f *memFS) PutTar(ctx context.Context, dir string, r io.Reader, max int64) error {
	dir = abs(dir)
	bad := func(msg string) error { return ferr("untar", dir, "EBADTAR", msg) }
	type entry struct {
		hdr  *tar.Header
		data []byte
	}
	var ents []entry
	var total int64
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return bad("not a tar stream: " + err.Error())
		}
		name := hdr.Name
		if strings.HasPrefix(name, "/") || path.Clean(name) == ".." || strings.HasPrefix(path.Clean(name), "../") {
			return bad("entry " + name + " leaves the directory")
		}
		var data []byte
		switch hdr.Typeflag {
		case tar.TypeReg, tar.TypeDir:
		case tar.TypeSymlink:
			t := hdr.Linkname
			if strings.HasPrefix(t, "/") || strings.HasPrefix(path.Clean(path.Join(path.Dir(name), t)), "..") {
				return bad("symlink " + name + " leaves the directory")
			}
		default:
			return bad("entry " + name + " is of an unsupported type")
		}
		if hdr.Typeflag == tar.TypeReg {
			total += hdr.Size
			if total > max {
				return ferr("untar", dir, "ETOOBIG", "archive is larger than the limit")
			}
			if data, err = io.ReadAll(tr); err != nil {
				return bad(err.Error())
			}
		}
		ents = append(ents, entry{hdr, data})
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if n, err := f.lookup("untar", dir, true); err != nil {
		return err
	} else if n.typ != "dir" {
		return ferr("untar", dir, "ENOTDIR", msgNotDir)
	}
	for _, e := range ents {
		p := path.Join(dir, e.hdr.Name)
		if p == dir {
			continue
		}
		mode := fs.FileMode(e.hdr.Mode).Perm()
		if err := f.mkdir(path.Dir(p), 0o755, true); err != nil {
			return err
		}
		switch e.hdr.Typeflag {
		case tar.TypeDir:
			if err := f.mkdir(p, mode, true); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := f.put("untar", p, e.data, mode, false); err != nil {
				return err
			}
		case tar.TypeSymlink:
			pd, name, err := f.parent("untar", p)
			if err != nil {
				return err
			}
			pd.kids[name] = &node{typ: "symlink", target: e.hdr.Linkname, mode: 0o777, mtime: time.Now()}
		}
	}
	return nil
}

// GetTar writes p (a file or a tree) as a tar stream, names relative to
// p's parent.
func (f *memFS) GetTar(ctx context.Context, p string, w io.Writer, max int64) error {
	p = abs(p)
	f.mu.Lock()
	n, err := f.lookup("tar", p, false)
	if err != nil {
		f.mu.Unlock()
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	var total int64
	var walk func(name string, n *node) error
	walk = func(name string, n *node) error {
		hdr := &tar.Header{Name: name, Mode: int64(n.mode), ModTime: n.mtime, Uid: 1000, Gid: 1000}
		switch n.typ {
		case "dir":
			hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
		case "file":
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(n.data))
			if total += hdr.Size; total > max {
				return ferr("tar", p, "ETOOBIG", "content is larger than the limit")
			}
		case "symlink":
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, n.target
		default:
			return nil
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if n.typ == "file" {
			if _, err := tw.Write(n.data); err != nil {
				return err
			}
		}
		if n.typ == "dir" {
			names := make([]string, 0, len(n.kids))
			for k := range n.kids {
				names = append(names, k)
			}
			sort.Strings(names)
			for _, k := range names {
				if err := walk(name+"/"+k, n.kids[k]); err != nil {
					return err
				}
			}
		}
		return nil
	}
	base := path.Base(p)
	if p == "/" {
		base = "."
	}
	err = walk(base, n)
	f.mu.Unlock()
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	_, err = w.Write(buf.Bytes())
	return err
}
