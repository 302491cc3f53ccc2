package sandboxinit

import "golang.org/x/sys/unix"

// closeFDs closes every descriptor of fds.
func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
