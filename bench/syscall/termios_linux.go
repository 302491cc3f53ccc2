package main

import "golang.org/x/sys/unix"

// getTermios is ioctl(fd, TCGETS): a syscall the filter inspects by argument.
func getTermios(fd int) error {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err
}
