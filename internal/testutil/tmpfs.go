package testutil

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// FillDisk fills the file system of dir with the file dir/name until a
// write fails with ENOSPC, and checks (the control) that a further small
// write there fails with ENOSPC too. It returns the file's path: removing
// it gives the space back.
func FillDisk(t testing.TB, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for size := len(buf); size > 0; {
		if _, err := f.Write(buf[:size]); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", dir, err)
			}
			size /= 2 // down to the last bytes
		}
	}
	// The control: the disk really is full.
	_, err = f.Write([]byte("x"))
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a write to the filled %s: %v, want ENOSPC", dir, err)
	}
	return path
}
