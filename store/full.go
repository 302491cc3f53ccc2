package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	sqlite3 "modernc.org/sqlite/lib"
)

// ErrUnavailable is matched (errors.Is) by every [*WriteError]: the
// database could not make a write, for a reason of the disk or the file
// rather than of the data (a full disk, an I/O error, a read-only file
// system). Nothing of the failed write was committed.
var ErrUnavailable = errors.New("store unavailable")

// WriteError is a write (or an open) the database could not make for want
// of its disk. Full says the file system holding the database is out of
// space; the error then also matches syscall.ENOSPC. Test with errors.As,
// or errors.Is against ErrUnavailable or syscall.ENOSPC.
type WriteError struct {
	// Dir is the directory of the database (the file system that failed).
	Dir string
	// Full says the file system is full.
	Full bool
	// Err is SQLite's error.
	Err error
}

func (e *WriteError) Error() string {
	if e.Full {
		return fmt.Sprintf("%s: %v (%v)", e.Dir, syscall.ENOSPC, e.Err)
	}
	return fmt.Sprintf("%s: cannot write the database: %v", e.Dir, e.Err)
}

// Unwrap matches ErrUnavailable, SQLite's error and, when the disk is full,
// syscall.ENOSPC.
func (e *WriteError) Unwrap() []error {
	if e.Full {
		return []error{ErrUnavailable, syscall.ENOSPC, e.Err}
	}
	return []error{ErrUnavailable, e.Err}
}

// minFree is the free space below which a failed write is put down to a
// full disk: SQLite reports a failed write(2) of ENOSPC as SQLITE_FULL, but
// a failed ftruncate or page allocation of its -shm or -wal file (at open,
// or when the WAL grows) only as a disk I/O error.
const minFree = 1 << 20

// writeErr classifies err, an error of a write to the database in dir:
// SQLite's I/O-class errors become a *WriteError (Full when SQLite says
// the disk is full, or the file system has less than minFree left);
// anything else (a constraint, bad input) is returned as it is.
func writeErr(dir string, err error) error {
	if err == nil {
		return nil
	}
	var we *WriteError
	if errors.As(err, &we) {
		return err
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return &WriteError{Dir: dir, Full: true, Err: err}
	}
	code := sqliteCode(err)
	switch code & 0xff {
	case sqlite3.SQLITE_FULL:
		return &WriteError{Dir: dir, Full: true, Err: err}
	case sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CORRUPT,
		sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_PROTOCOL:
		return &WriteError{Dir: dir, Full: diskFull(dir), Err: err}
	}
	if code == -1 {
		// Not SQLite's: an open(2) or the like, with the path in it.
		var pe *os.PathError
		if errors.As(err, &pe) && (errors.Is(err, syscall.EIO) || errors.Is(err, syscall.EROFS)) {
			return &WriteError{Dir: dir, Err: err}
		}
	}
	return err
}

// diskFull reports whether the file system of dir has less than minFree
// bytes left (for root, the blocks reserved to root count: the daemon may
// use them).
func diskFull(dir string) bool {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return false
	}
	free := fs.Bavail
	if os.Geteuid() == 0 {
		free = fs.Bfree
	}
	return free*uint64(fs.Bsize) < minFree
}

// Dir returns the directory of the database file.
func (s *Store) Dir() string { return filepath.Dir(s.path) }
