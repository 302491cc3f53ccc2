package policy

import (
	"context"
	"errors"
	"os"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Sources are the policy files of the file layers. An empty path means
// the layer has no file.
type Sources struct {
	Managed string `json:"managed,omitempty"`
	Project string `json:"project,omitempty"`
	User    string `json:"user,omitempty"`
}

// DefaultSources are the standard locations: /etc/moat/policy.toml,
// <workspace>/.moat/policy.toml and <home>/.config/moat/policy.toml.
func DefaultSources(c Context) Sources {
	s := Sources{Managed: ManagedPath}
	if c.Workspace != "" {
		s.Project = path.Join(c.Workspace, ProjectPath)
	}
	if c.Home != "" {
		s.User = path.Join(c.Home, UserPath)
	}
	return s
}

func (s Sources) list() [3]struct {
	layer Layer
	path  string
} {
	return [3]struct {
		layer Layer
		path  string
	}{{Managed, s.Managed}, {Project, s.Project}, {User, s.User}}
}

func (s Sources) paths() []string {
	var out []string
	for _, l := range s.list() {
		if l.path != "" {
			out = append(out, l.path)
		}
	}
	return out
}

// displayName is how a file is named in errors and decisions: relative to
// the workspace for the project layer, ~/... under the home.
func displayName(c Context, l Layer, p string) string {
	if l == Project && c.Workspace != "" && under(p, c.Workspace) && p != c.Workspace {
		return strings.TrimPrefix(p[len(c.Workspace):], "/")
	}
	if c.Home != "" && c.Home != "/" && under(p, c.Home) && p != c.Home {
		return "~" + p[len(c.Home):]
	}
	return p
}

// LoadFile reads and parses one policy file. A missing file is (nil, nil).
// A project file is read without following symlinks; every file must be
// a regular file of at most MaxFileSize bytes (see ReadFile).
func LoadFile(c Context, layer Layer, p string) (*File, error) {
	data, err := readPolicy(c, layer, p)
	if err != nil || data == nil {
		return nil, err
	}
	f, err := Parse(layer, displayName(c, layer, p), data)
	if err != nil {
		return nil, err
	}
	f.Path = p
	return f, nil
}

// LoadFiles reads the layers' files; missing files are skipped. All errors
// are reported together.
func LoadFiles(c Context, s Sources) ([]*File, error) {
	var files []*File
	var errs []error
	for _, l := range s.list() {
		if l.path == "" {
			continue
		}
		f, err := LoadFile(c, l.layer, l.path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if f != nil {
			files = append(files, f)
		}
	}
	return files, errors.Join(errs...)
}

// Load reads the layers' files and compiles them for the context. Every
// source path (present or not) stays read-only inside writable roots, so a
// sandbox cannot create a policy file that is read later.
func Load(c Context, s Sources) (*Effective, error) {
	files, err := LoadFiles(c, s)
	if err != nil {
		return nil, err
	}
	return compile(c, s.paths(), files)
}

// stamp identifies a version of a file without reading it.
type stamp struct {
	exists     bool
	size       int64
	mtime      int64
	ctime      int64
	dev, ino   uint64
	mode       os.FileMode
	statFailed string
}

func stampOf(p string) stamp {
	if p == "" {
		return stamp{}
	}
	fi, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return stamp{}
		}
		return stamp{statFailed: err.Error()}
	}
	s := stamp{exists: true, size: fi.Size(), mtime: fi.ModTime().UnixNano(), mode: fi.Mode()}
	sysStamp(fi, &s)
	return s
}

// Watcher keeps the effective policy of a context current: Reload re-reads
// the files when one of them changed (size, modification or change time,
// inode, existence), and keeps the last good policy when the new files are
// invalid. Sandboxes holding an *Effective keep it; new decisions use
// Current. Safe for concurrent use.
type Watcher struct {
	ctx    Context
	src    Sources
	cur    atomic.Pointer[Effective]
	mu     sync.Mutex
	stamps [3]stamp
	err    error
}

// NewWatcher loads the policy once; an invalid policy is an error here
// (there is no last good version yet).
func NewWatcher(c Context, s Sources) (*Watcher, error) {
	w := &Watcher{ctx: c, src: s}
	w.stamps = w.stampAll()
	e, err := Load(c, s)
	if err != nil {
		return nil, err
	}
	w.cur.Store(e)
	return w, nil
}

func (w *Watcher) stampAll() [3]stamp {
	var st [3]stamp
	for i, l := range w.src.list() {
		st[i] = stampOf(l.path)
	}
	return st
}

// Current is the last good effective policy.
func (w *Watcher) Current() *Effective { return w.cur.Load() }

// Err is the error of the last reload (nil when the current files are
// good).
func (w *Watcher) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Reload checks the files and, if one changed, reads them again. changed
// is true when a new policy is in effect. When the changed files are
// invalid the previous policy stays current, the error is returned, and
// Err keeps reporting it until the files change again; a Reload that finds
// nothing changed returns (false, nil).
func (w *Watcher) Reload() (changed bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.stampAll()
	if st == w.stamps {
		return false, nil
	}
	w.stamps = st
	e, err := Load(w.ctx, w.src)
	if err != nil {
		w.err = err
		return false, err
	}
	w.err = nil
	w.cur.Store(e)
	return true, nil
}

// Run calls Reload every interval until ctx ends; notify (if not nil) is
// called after every reload that changed the policy or failed.
func (w *Watcher) Run(ctx context.Context, every time.Duration, notify func(*Effective, error)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, err := w.Reload()
		if notify != nil && (changed || err != nil) {
			notify(w.Current(), err)
		}
	}
}
