package fstree

import (
	"errors"
	"fmt"
	"hash"

	"golang.org/x/sys/unix"
)

// zeros is what a hole reads as, fed to a content hash without reading it.
var zeros [64 << 10]byte

// zeroCheckEvery is how many bytes of holes are hashed between two checks
// of a writer's context.
const zeroCheckEvery = 64 << 20

// extents calls hole and data for the regions of the first size bytes of
// the regular file fd, in order, as SEEK_DATA and SEEK_HOLE find them: a
// hole is a length of zeros that occupies no block; data is read into buf
// (pread, in chunks of at most len(buf)) and handed over with its offset.
// A filesystem without SEEK_DATA is all data. A file that shrank since
// its size was taken reads as zeros (a hole) up to size, so the callers
// always see exactly size bytes.
func extents(fd int, size int64, buf []byte, hole func(n int64) error, data func(b []byte, off int64) error) error {
	seekable := true
	for off := int64(0); off < size; {
		start, end := off, size
		if seekable {
			s, err := unix.Seek(fd, off, unix.SEEK_DATA)
			switch {
			case err == nil:
				start = min(s, size)
			case err == unix.ENXIO: // no data at or after off
				start = size
			case err == unix.EINVAL || err == unix.EOPNOTSUPP:
				seekable = false
			default:
				return fmt.Errorf("seek data: %w", err)
			}
			if seekable && start < size {
				e, err := unix.Seek(fd, start, unix.SEEK_HOLE)
				switch {
				case err == nil:
					end = min(max(e, start), size)
				case err == unix.ENXIO: // shrank meanwhile
					end = start
				default:
					return fmt.Errorf("seek hole: %w", err)
				}
			}
		}
		if start > off {
			if err := hole(start - off); err != nil {
				return err
			}
		}
		for p := start; p < end; {
			n, err := unix.Pread(fd, buf[:min(int64(len(buf)), end-p)], p)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return fmt.Errorf("read: %w", err)
			}
			if n == 0 { // shrank: the rest is zeros, as the copy's truncate makes it
				if err := hole(end - p); err != nil {
					return err
				}
				break
			}
			if err := data(buf[:n], p); err != nil {
				return err
			}
			p += int64(n)
		}
		if end == start && start < size {
			// No data found where SEEK_DATA said: treat the rest as a hole.
			if err := hole(size - start); err != nil {
				return err
			}
			break
		}
		off = end
	}
	return nil
}

// hashZeros feeds n zero bytes to h (nil: nothing), checking check, if set,
// every zeroCheckEvery bytes.
func hashZeros(h hash.Hash, n int64, check func() error) error {
	if h == nil {
		return nil
	}
	for done := int64(0); n > 0; {
		k := min(n, int64(len(zeros)))
		h.Write(zeros[:k])
		n -= k
		done += k
		if check != nil && done >= zeroCheckEvery {
			done = 0
			if err := check(); err != nil {
				return err
			}
		}
	}
	return nil
}

// pwriteAll writes b at off of fd.
func pwriteAll(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := unix.Pwrite(fd, b, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

// diskCost is what the entry st allocates on disk.
func diskCost(st *unix.Stat_t) int64 { return st.Blocks * 512 }

// diskBudget refuses to allocate n more bytes past MaxDiskBytes.
func (w *writer) diskBudget(rel string, n int64) error {
	if max := w.lim.MaxDiskBytes; max > 0 && n > max-w.stats.DiskBytes {
		return fmt.Errorf("%w: entry %q: the copy would allocate more than %d bytes on disk (MaxDiskBytes)", ErrDiskLimit, truncName(rel), max)
	}
	return nil
}

// addDisk counts the allocation of the written entry st against
// MaxDiskBytes.
func (w *writer) addDisk(rel string, st *unix.Stat_t) error {
	n := diskCost(st)
	if err := w.diskBudget(rel, n); err != nil {
		return err
	}
	w.stats.DiskBytes += n
	return nil
}

// createSparse creates the regular file name in pfd (O_EXCL, O_NOFOLLOW)
// as a copy of the first size bytes of the source file sfd that keeps its
// holes: only data extents are written, and the file is then truncated to
// size, so a hole of the source stays a hole of the copy. sum receives
// every byte (zeros for holes). Data written counts against MaxDiskBytes
// as it goes; the copy's real allocation is counted once it is written.
// The file then gets m's owner, mode and times; st receives its stat.
func (w *writer) createSparse(pfd int, name, rel string, sfd int, size int64, m meta, sum hash.Hash, st *unix.Stat_t) error {
	fd, err := unix.Openat(pfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("entry %q: create: %w", rel, err)
	}
	defer unix.Close(fd)
	var written int64
	err = extents(sfd, size, w.buf,
		func(n int64) error { return hashZeros(sum, n, w.canceled) },
		func(b []byte, off int64) error {
			if err := w.canceled(); err != nil {
				return err
			}
			if err := w.diskBudget(rel, written+int64(len(b))); err != nil {
				return err
			}
			if err := pwriteAll(fd, b, off); err != nil {
				return fmt.Errorf("write: %w", err)
			}
			if sum != nil {
				sum.Write(b)
			}
			written += int64(len(b))
			return nil
		})
	if err == nil {
		for {
			if err = unix.Ftruncate(fd, size); err != unix.EINTR {
				break
			}
		}
		if err != nil {
			err = fmt.Errorf("truncate: %w", err)
		}
	}
	if err == nil {
		err = setMeta(fd, m)
	}
	if err == nil {
		err = unix.Fstat(fd, st)
	}
	if err != nil {
		if errors.Is(err, ErrLimit) {
			return err // names the entry already
		}
		return fmt.Errorf("entry %q: %w", rel, err)
	}
	w.stats.Bytes += size
	return w.addDisk(rel, st)
}
