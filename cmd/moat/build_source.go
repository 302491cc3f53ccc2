package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/build"
	"github.com/moat-sandbox/moat/fstree"
)

// The source of a build, as moat build sends it: a directory as a tar
// made here (fstree.WriteTar: nothing followed, special files left out and
// therefore refused), a file as it is. The daemon checks the package
// again, whatever the client did (build.Unpack).

// buildSource is SOURCE, opened once: everything after works on that
// descriptor, so the path is looked up one time only.
type buildSource struct {
	f   *os.File
	dir bool
}

// openBuildSource opens the SOURCE path p, following symlinks on the way
// (it is the caller's own path): a directory or a regular file, anything
// else is a usage error. O_NONBLOCK keeps a FIFO from blocking the open.
func openBuildSource(p string) (*buildSource, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, usageError("SOURCE: %v", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, usageError("SOURCE: %v", err)
	}
	switch {
	case fi.IsDir():
		return &buildSource{f: f, dir: true}, nil
	case fi.Mode().IsRegular():
		return &buildSource{f: f}, nil
	}
	f.Close()
	return nil, usageError("SOURCE %s: neither a directory nor a tar file (%s)", p, fi.Mode().Type())
}

// Close closes the source.
func (s *buildSource) Close() error { return s.f.Close() }

// sourceCaps are the --max-* values given (zero: not given): a directory
// past one stops here, before the rest of it is read and sent.
type sourceCaps struct {
	files      int
	fileBytes  int64
	totalBytes int64
}

// sourceRefusal is a source package refused here, before the daemon saw
// all of it: Reason is one of api.ReasonSource*.
type sourceRefusal struct {
	Reason, Message string
}

func (r *sourceRefusal) Error() string { return r.Reason + ": " + r.Message }

// errBodyAbandoned ends the making of a tar nobody reads any more (the
// request ended before it was all sent).
var errBodyAbandoned = errors.New("the request ended before the source was sent")

// dirEntry is the top entry of the tar WriteTar makes; retar takes it off.
const dirEntry = "src"

// body returns the request body of the source and done, to be called
// once the request has ended: it stops what is left of the making of the
// tar and returns why it failed (a *sourceRefusal for a package refused
// here), or nil. The reading of a file source needs no stopping. With
// compress the tar of a directory is gzipped (for the stdio transport,
// which carries the source whole in one request).
func (s *buildSource) body(ctx context.Context, caps sourceCaps, compress bool) (io.Reader, func() error) {
	if !s.dir {
		return s.f, func() error { return nil }
	}
	tarR, tarW := io.Pipe()
	bodyR, bodyW := io.Pipe()
	var skipped atomic.Pointer[sourceRefusal]
	opt := fstree.HostOptions{
		// The daemon's caps bound the package; the defaults of depth
		// are fstree's, as the daemon's.
		Limits: fstree.Limits{MaxBytes: math.MaxInt64, MaxEntries: math.MaxInt},
		Skipped: func(rel, why string) {
			skipped.CompareAndSwap(nil, &sourceRefusal{api.ReasonSourceBadType, strconv.Quote(rel) + ": " + why})
		},
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		srcErr error
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if srcErr == nil && !errors.Is(err, errBodyAbandoned) {
			srcErr = err
		}
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, err := fstree.WriteTar(ctx, tarW, int(s.f.Fd()), "", dirEntry, opt)
		if err != nil {
			fail(err)
		}
		tarW.CloseWithError(err)
	}()
	go func() {
		defer wg.Done()
		var w io.Writer = bodyW
		var zw *gzip.Writer
		if compress {
			zw, _ = gzip.NewWriterLevel(bodyW, gzip.BestSpeed) // a valid level: no error
			w = zw
		}
		err := retar(tarR, w, caps, skipped.Load)
		if err == nil && zw != nil {
			err = zw.Close()
		}
		if err != nil {
			fail(err)
			tarR.CloseWithError(err)
			bodyW.CloseWithError(err)
			return
		}
		bodyW.Close()
	}()
	return bodyR, func() error {
		bodyR.CloseWithError(errBodyAbandoned)
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		// A refusal explains the failures it caused downstream.
		if r := skipped.Load(); r != nil {
			return r
		}
		var r *sourceRefusal
		if errors.As(srcErr, &r) {
			return r
		}
		return srcErr
	}
}

// retar copies the tar WriteTar made to w with the top entry taken off
// (build.Retar: the daemon makes /src itself; "src/a" becomes "a"),
// checking the caps on each header before its content is read, and the
// special files WriteTar left out (skipped: a refusal once one was).
func retar(r io.Reader, w io.Writer, caps sourceCaps, skipped func() *sourceRefusal) error {
	var (
		files int
		total int64
	)
	check := func(hdr *tar.Header) error {
		name := hdr.Name
		files++
		if caps.files > 0 && files > caps.files {
			return &sourceRefusal{api.ReasonSourceTooManyFiles, fmt.Sprintf("more than %d entries (--max-files)", caps.files)}
		}
		if hdr.Typeflag == tar.TypeReg {
			if caps.fileBytes > 0 && hdr.Size > caps.fileBytes {
				return &sourceRefusal{api.ReasonSourceFileTooLarge, fmt.Sprintf("%s: %d bytes, above --max-file-bytes (%d)", strconv.Quote(name), hdr.Size, caps.fileBytes)}
			}
			total += hdr.Size
			if caps.totalBytes > 0 && total > caps.totalBytes {
				return &sourceRefusal{api.ReasonSourceTooLarge, fmt.Sprintf("the files add up above --max-total-bytes (%d) at %s", caps.totalBytes, strconv.Quote(name))}
			}
		}
		return nil
	}
	return build.Retar(r, w, dirEntry, check, func() error {
		if sk := skipped(); sk != nil {
			return sk
		}
		return nil
	})
}
