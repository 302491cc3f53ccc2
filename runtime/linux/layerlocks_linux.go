package linux

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// Layer locks. A layer a sandbox uses (the runtime's /etc, locale and
// base layers, the spec's root layers) must not be removed while the
// sandbox's overlay holds it: whoever removes a layer (another moat's
// collector, a template store) first takes an exclusive flock on its
// directory, and a user holds a shared one. flock locks belong to open
// file descriptions, so a second lock of this process would add nothing:
// a runtime holds one descriptor and lock per layer, however many of its
// sandboxes use it, and counts its users in memory (layerLocks). The lock
// goes with the last user; a layer asked to be collected is then removed,
// unless another process uses it.

// layerLocks is one runtime's locks on the layers its sandboxes use. Its
// zero value is ready to use.
type layerLocks struct {
	mu   sync.Mutex
	held map[string]*layerLock // by path
}

// layerLock is one layer's directory, open and locked shared, and its
// users in this process.
type layerLock struct {
	f       *os.File
	users   int  // under layerLocks.mu
	collect bool // remove the layer once its last user is gone, if unused elsewhere
}

// layerLease is one user's (a sandbox's) hold on a layer.
type layerLease struct {
	locks *layerLocks
	lock  *layerLock
	path  string
}

// file is the layer's directory, open and locked.
//
// Preconditions: the lease has not been released.
func (l *layerLease) file() *os.File { return l.lock.f }

// release drops the lease; the last user's release unlocks the layer and,
// if a lease said so, removes it if no other process uses it. Safe on nil
// and more than once.
func (l *layerLease) release() {
	if l == nil || l.lock == nil {
		return
	}
	lk := l.lock
	l.lock = nil
	if l.locks.drop(l.path, lk) && lk.collect {
		collectLayer(filepath.Dir(l.path), filepath.Base(l.path))
	}
}

// lease builds (with get) and locks a layer of the runtime's, shared. A
// layer removed between get and the lock is built again. With collect,
// the last user's release removes the layer if it is then unused.
func (t *layerLocks) lease(collect bool, get func() (string, error)) (*layerLease, error) {
	for range 8 {
		path, err := get()
		if err != nil {
			return nil, err
		}
		if l := t.join(path, collect); l != nil {
			return l, nil
		}
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			continue // collected since get
		}
		if err != nil {
			return nil, fmt.Errorf("layer %s: %w", path, err)
		}
		if err := flockRetry(fd, unix.LOCK_SH); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("layer %s: lock: %w", path, err)
		}
		if samePath(fd, path) {
			return t.add(path, os.NewFile(uintptr(fd), path), collect), nil
		}
		unix.Close(fd) // collected while we waited for the lock
	}
	return nil, fmt.Errorf("layer keeps being removed")
}

// open locks the spec's root layers (absolute paths of directories),
// shared, failing at once for a layer being removed. On error it holds
// none of them.
func (t *layerLocks) open(paths []string) ([]*layerLease, error) {
	var out []*layerLease
	fail := func(err error) ([]*layerLease, error) {
		releaseLayers(out)
		return nil, err
	}
	for _, p := range paths {
		if !filepath.IsAbs(p) {
			return fail(fmt.Errorf("layer %q is not an absolute path", p))
		}
		if l := t.join(p, false); l != nil {
			out = append(out, l)
			continue
		}
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fail(fmt.Errorf("layer %s: %w", p, err))
		}
		if err := unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB); err != nil {
			unix.Close(fd)
			if errors.Is(err, unix.EWOULDBLOCK) {
				return fail(fmt.Errorf("layer %s is being removed", p))
			}
			return fail(fmt.Errorf("layer %s: lock: %w", p, err))
		}
		if !samePath(fd, p) {
			// Moved away (to be removed) between the open and the lock.
			unix.Close(fd)
			return fail(fmt.Errorf("layer %s is being removed", p))
		}
		out = append(out, t.add(p, os.NewFile(uintptr(fd), p), false))
	}
	return out, nil
}

// join counts one more user of path if this runtime holds its lock
// already (nil if not).
func (t *layerLocks) join(path string, collect bool) *layerLease {
	t.mu.Lock()
	defer t.mu.Unlock()
	lk := t.held[path]
	if lk == nil {
		return nil
	}
	lk.users++
	lk.collect = lk.collect || collect
	return &layerLease{locks: t, lock: lk, path: path}
}

// add records f, path open and locked shared, with its first user, or,
// if another user locked path meanwhile, joins that lock and closes f.
func (t *layerLocks) add(path string, f *os.File, collect bool) *layerLease {
	t.mu.Lock()
	defer t.mu.Unlock()
	lk := t.held[path]
	if lk != nil {
		f.Close()
		lk.collect = lk.collect || collect
	} else {
		lk = &layerLock{f: f, collect: collect}
		if t.held == nil {
			t.held = map[string]*layerLock{}
		}
		t.held[path] = lk
	}
	lk.users++
	return &layerLease{locks: t, lock: lk, path: path}
}

// drop counts one user of lk (path's lock) less; the last one closes it
// (dropping the lock) and drop reports true.
func (t *layerLocks) drop(path string, lk *layerLock) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	lk.users--
	if lk.users > 0 {
		return false
	}
	if t.held[path] == lk {
		delete(t.held, path)
	}
	lk.f.Close()
	return true
}

// count is how many layers this runtime holds locked.
func (t *layerLocks) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.held)
}

// releaseLayers releases every lease of ls.
func releaseLayers(ls []*layerLease) {
	for _, l := range ls {
		l.release()
	}
}

// flockRetry is flock(2) restarted on EINTR.
func flockRetry(fd, how int) error {
	for {
		err := unix.Flock(fd, how)
		if err != unix.EINTR {
			return err
		}
	}
}

// samePath says whether path (not followed) is the file open as fd.
func samePath(fd int, path string) bool {
	var a, b unix.Stat_t
	if unix.Fstat(fd, &a) != nil || unix.Lstat(path, &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}
