package linux

import (
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/runtime/linux/sandboxinit"
)

// The init's own stderr is a pipe the host reads until the init is ready
// (linuxSandbox.initErr), then a file of the sandbox's scratch tmpfs
// (sandboxinit.StderrFile): a live sandbox costs the host no descriptor
// for it, and the words of an init that dies later are still there.

// initStderrTail returns the last limit bytes of the file the init's stderr
// went to once it was ready, at the root of scratch (nil if there is none
// or it cannot be read). The init wrote it: it is opened beneath scratch
// without following any link, read only if it is a regular file, and
// only its tail.
func initStderrTail(scratch *os.File, limit int64) []byte {
	if scratch == nil {
		return nil
	}
	rc, err := scratch.SyscallConn()
	if err != nil {
		return nil
	}
	fd := -1
	_ = rc.Control(func(dir uintptr) {
		fd, err = unix.Openat2(int(dir), sandboxinit.StderrFile, &unix.OpenHow{
			Flags: unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS |
				unix.RESOLVE_NO_XDEV,
		})
	})
	if fd < 0 || err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), sandboxinit.StderrFile)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	off := max(fi.Size()-limit, 0)
	b, _ := io.ReadAll(io.NewSectionReader(f, off, fi.Size()-off))
	return b
}
