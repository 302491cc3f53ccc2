package engine

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// tee is the stdout of one attempt of a producer step (a step another
// step's stdin_from names). The producer's process writes it into a file
// of the run's artifact directory; consumers follow the file as it grows
// and read to its end once the attempt has ended. A consumer that starts
// again (a retry) reads the same bytes from the beginning; the producer
// never waits for a consumer.
type tee struct {
	path string

	mu      sync.Mutex
	f       *os.File // the writer, open while the attempt runs
	size    int64    // bytes written and readable
	ended   bool
	changed chan struct{} // closed and replaced at every write and at the end
}

// newTee returns the tee of an attempt that has not started; create opens
// its file.
func newTee(path string) *tee {
	return &tee{path: path, changed: make(chan struct{})}
}

// endedTee returns the tee of an attempt that ended before this engine
// started: its file is read as it is.
func endedTee(path string) *tee {
	t := newTee(path)
	t.ended = true
	if fi, err := os.Stat(path); err == nil {
		t.size = fi.Size()
	}
	return t
}

// create makes the file (and its directory, 0700).
func (t *tee) create() error {
	if err := os.MkdirAll(filepath.Dir(t.path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(t.path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.f = f
	t.mu.Unlock()
	return nil
}

// Write appends the producer's output (one writer at a time).
func (t *tee) Write(p []byte) (int, error) {
	t.mu.Lock()
	f := t.f
	t.mu.Unlock()
	if f == nil {
		return 0, errors.New("stdout file is closed")
	}
	n, err := f.Write(p)
	t.mu.Lock()
	t.size += int64(n)
	t.broadcast()
	t.mu.Unlock()
	return n, err
}

// end marks the attempt's stdout complete (idempotent): followers read to
// the end and get io.EOF.
func (t *tee) end() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended {
		return
	}
	t.ended = true
	if t.f != nil {
		t.f.Close()
		t.f = nil
	}
	t.broadcast()
}

func (t *tee) broadcast() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// follow returns a reader of the whole stdout, from its first byte, that
// waits for more while the attempt runs; ctx ends its waits.
func (t *tee) follow(ctx context.Context) *follower {
	return &follower{t: t, ctx: ctx}
}

// follower reads a tee.
type follower struct {
	t   *tee
	ctx context.Context
	f   *os.File
	off int64
}

// Read implements io.Reader.
func (r *follower) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		r.t.mu.Lock()
		size, ended, changed := r.t.size, r.t.ended, r.t.changed
		r.t.mu.Unlock()
		if r.off < size {
			if r.f == nil {
				f, err := os.Open(r.t.path)
				if err != nil {
					return 0, err
				}
				r.f = f
			}
			n, err := r.f.ReadAt(p[:min(int64(len(p)), size-r.off)], r.off)
			r.off += int64(n)
			if n > 0 {
				return n, nil
			}
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
		if ended {
			return 0, io.EOF
		}
		select {
		case <-changed:
		case <-r.ctx.Done():
			return 0, r.ctx.Err()
		}
	}
}

// Close closes the reader's file.
func (r *follower) Close() error {
	if r.f == nil {
		return nil
	}
	return r.f.Close()
}
