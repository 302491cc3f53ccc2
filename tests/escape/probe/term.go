//go:build linux

package main

import (
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Terminal attempts.

func init() {
	register("ioctl", 2, "FD|tty|PATH CMD [BYTE] (CMD may carry bits above 32; arg points at BYTE, default '#')", opIoctl)
	register("session", 0, "(pid, sid, pgid, terminals)", opSession)
}

// termFD opens the descriptor an ioctl attempt works on: 0, 1, 2 as they
// are, "tty" as /dev/tty (the controlling terminal), anything else as a
// path.
func termFD(s string) (int, func(), error) {
	if n, err := strconv.Atoi(s); err == nil {
		return n, func() {}, nil
	}
	p := s
	if s == "tty" {
		p = "/dev/tty"
	}
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, nil, wrap("open "+p, err)
	}
	return fd, func() { unix.Close(fd) }, nil
}

func opIoctl(r *Result, a []string) error {
	fd, done, err := termFD(a[0])
	if err != nil {
		return err
	}
	defer done()
	cmd, err := strconv.ParseUint(a[1], 0, 64)
	if err != nil {
		return err
	}
	var buf [64]byte
	buf[0] = '#'
	if len(a) > 2 {
		b, err := strconv.ParseUint(a[2], 0, 8)
		if err != nil {
			return err
		}
		buf[0] = byte(b)
	}
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(cmd), uintptr(unsafe.Pointer(&buf[0])))
	return errnoErr(e)
}

func isTTY(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}

func opSession(r *Result, a []string) error {
	pid := os.Getpid()
	sid, err := unix.Getsid(0)
	if err != nil {
		return wrap("getsid", err)
	}
	r.set("pid", pid)
	r.set("ppid", os.Getppid())
	r.set("sid", sid)
	r.set("pgid", unix.Getpgrp())
	r.set("session_leader", sid == pid)
	for fd := 0; fd < 3; fd++ {
		r.set("isatty"+strconv.Itoa(fd), isTTY(fd))
		if t, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd)); err == nil {
			r.set("fd"+strconv.Itoa(fd), t)
		}
	}
	if fd, err := unix.Open("/dev/tty", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0); err == nil {
		r.set("ctty", true)
		unix.Close(fd)
	} else {
		r.set("ctty", false)
		r.set("ctty_errno", errnoName(err.(unix.Errno)))
	}
	// Field 7 of /proc/self/stat is tty_nr, the controlling terminal.
	if b, err := os.ReadFile("/proc/self/stat"); err == nil {
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 {
			f := strings.Fields(s[i+1:])
			if len(f) > 4 {
				r.set("tty_nr", f[4])
			}
		}
	}
	return nil
}
