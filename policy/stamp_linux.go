package policy

import (
	"os"
	"syscall"
)

// sysStamp adds the inode, device and change time to a file's stamp.
func sysStamp(fi os.FileInfo, s *stamp) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.dev, s.ino = uint64(st.Dev), st.Ino
		s.ctime = st.Ctim.Nano()
	}
}
