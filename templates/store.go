// Package templates stores the read-only root filesystems sandboxes start
// from: templates (a root imported from a directory or an OCI image, with
// defaults) and snapshots (a sandbox's filesystem changes, layered on the
// snapshot or template it started from). Both are layers: immutable
// directory trees named by the digest of their content and shared by every
// sandbox that uses them, which the runtime stacks under each sandbox's
// private overlayfs upper layer.
//
// The store is a directory (default /var/lib/moat/store):
//
//	layers/<hex>/        a layer's tree (ids as the sandbox sees them)
//	templates/<name>.json
//	snapshots/<id>.json
//	tmp/                 imports and captures in progress
//	lock                 taken exclusively to change what is stored
//
// Several processes may use one store (a daemon and the CLI): metadata is
// written by rename, mutations take the store lock, and a layer in use by a
// live sandbox carries a shared flock(2) (taken by the runtime) that
// removal must break first, so nothing in use is ever removed.
package templates

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// DefaultDir is the store's directory when none is configured.
const DefaultDir = "/var/lib/moat/store"

// Sentinel errors a caller branches on.
var (
	// ErrNotFound: no template or snapshot of that name.
	ErrNotFound = errors.New("not found")
	// ErrExists: a template of that name exists already.
	ErrExists = errors.New("already exists")
	// ErrInUse: a live sandbox, a snapshot or another template still
	// uses what was to be removed.
	ErrInUse = errors.New("in use")
	// ErrInvalid: a bad name, source or request.
	ErrInvalid = errors.New("invalid")
	// ErrQuota: a snapshot would take its tenant's snapshots past their
	// store quota (CaptureInfo.Quota).
	ErrQuota = errors.New("snapshot store quota exceeded")
)

// Store is a layer store on disk. Its methods are safe for concurrent use,
// also by several processes.
type Store struct {
	dir string
}

// Open opens (creating if needed) the store at dir and removes what
// interrupted imports and captures left in tmp/.
func Open(dir string) (*Store, error) {
	if dir == "" {
		dir = DefaultDir
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	s := &Store{dir: abs}
	for _, d := range []string{"", "layers", "templates", "snapshots", "tmp"} {
		if err := os.MkdirAll(filepath.Join(abs, d), 0o700); err != nil {
			return nil, fmt.Errorf("store %s: %w", abs, err)
		}
	}
	s.sweepTmp()
	return s, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// layerPath is where the layer of digest ("sha256:<hex>") lives.
func (s *Store) layerPath(digest string) string {
	return filepath.Join(s.dir, "layers", strings.TrimPrefix(digest, "sha256:"))
}

// lock takes the store's lock exclusively; the returned func drops it.
func (s *Store) lock() (func(), error) {
	f, err := os.OpenFile(filepath.Join(s.dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("store lock: %w", err)
	}
	return func() { f.Close() }, nil
}

// work is a directory of tmp/ that one import or capture owns: it holds an
// exclusive flock on it, so a sweep by another process leaves it alone.
type work struct {
	dir string
	f   *os.File
}

func (s *Store) newWork(kind string) (*work, error) {
	dir, err := os.MkdirTemp(filepath.Join(s.dir, "tmp"), kind+"-")
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	f, err := os.Open(dir)
	if err == nil {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		os.RemoveAll(dir)
		return nil, fmt.Errorf("store: %w", err)
	}
	return &work{dir: dir, f: f}, nil
}

// done removes what is left of the work directory.
func (w *work) done() {
	_ = os.RemoveAll(w.dir)
	w.f.Close()
}

// sweepTmp removes work directories nobody holds (a crashed import).
func (s *Store) sweepTmp() {
	ents, err := os.ReadDir(filepath.Join(s.dir, "tmp"))
	if err != nil {
		return
	}
	for _, e := range ents {
		p := filepath.Join(s.dir, "tmp", e.Name())
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			_ = os.RemoveAll(p)
		}
		f.Close()
	}
}

// commitLayer moves a finished tree into layers/ under its digest, unless
// that layer exists already (same content), in which case tree is left for
// the caller's cleanup. Called with the store lock held.
func (s *Store) commitLayer(tree, digest string) error {
	dst := s.layerPath(digest)
	if _, err := os.Lstat(dst); err == nil {
		return nil
	}
	if err := os.Rename(tree, dst); err != nil {
		return fmt.Errorf("store layer: %w", err)
	}
	return nil
}

// removeLayer removes a layer no metadata refers to any more, unless a
// live sandbox holds it (ErrInUse). Called with the store lock held.
func (s *Store) removeLayer(digest string) error {
	p := s.layerPath(digest)
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("layer %s is used by a live sandbox: %w", digest, ErrInUse)
		}
		return err
	}
	// Out of layers/ first (atomic), then deleted at leisure: a sandbox
	// opening it by path from now on finds nothing.
	w, err := s.newWork("rm")
	if err != nil {
		return err
	}
	defer w.done()
	if err := os.Rename(p, filepath.Join(w.dir, "layer")); err != nil {
		return fmt.Errorf("remove layer: %w", err)
	}
	return nil
}

// layerInUse reports whether a live sandbox holds the layer.
func (s *Store) layerInUse(digest string) bool {
	f, err := os.Open(s.layerPath(digest))
	if err != nil {
		return false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return true
	}
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false
}

// validName accepts template names: lower-case letters, digits and
// ".-_", starting with a letter or digit, at most 63 bytes. (No regexp:
// a package-level one is compiled by every moat process, the sandbox's
// init included.)
func validName(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := range len(s) {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && (c == '.' || c == '_' || c == '-')
		if !ok {
			return false
		}
	}
	return true
}

// writeJSON writes v to path atomically (temp file and rename).
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// readJSON reads path into v; ErrNotFound when it does not exist.
func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// readMeta reads a template's or snapshot's metadata at path; a missing
// file is ErrNotFound naming what.
func readMeta[T any](path, what string) (*T, error) {
	v := new(T)
	if err := readJSON(path, v); err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("%s: %w", what, ErrNotFound)
		}
		return nil, err
	}
	return v, nil
}

// listJSON reads every *.json of dir/ into values made by mk, in name order.
func listJSON[T any](dir string) ([]*T, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".json") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	var out []*T
	for _, n := range names {
		v := new(T)
		if err := readJSON(filepath.Join(dir, n), v); err != nil {
			if errors.Is(err, ErrNotFound) {
				continue // removed meanwhile
			}
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}
