//go:build linux

package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Filesystem attempts.

func init() {
	register("open", 2, "PATH r|w|rw|creat|path|dir", opOpen)
	register("read", 1, "PATH [NEEDLE]", opRead)
	register("write", 2, "PATH DATA (O_WRONLY|O_CREAT|O_APPEND, follows symlinks)", opWrite)
	register("stat", 1, "PATH", func(r *Result, a []string) error { return doStat(r, a[0], true) })
	register("lstat", 1, "PATH", func(r *Result, a []string) error { return doStat(r, a[0], false) })
	register("readlink", 1, "PATH", opReadlink)
	register("ls", 1, "DIR", opLs)
	register("mkdir", 1, "PATH", func(r *Result, a []string) error { return unix.Mkdir(a[0], 0o755) })
	register("unlink", 1, "PATH", func(r *Result, a []string) error { return unix.Unlink(a[0]) })
	register("rmdir", 1, "PATH", func(r *Result, a []string) error { return unix.Rmdir(a[0]) })
	register("rename", 2, "OLD NEW", func(r *Result, a []string) error { return unix.Rename(a[0], a[1]) })
	register("link", 2, "OLD NEW", func(r *Result, a []string) error { return unix.Link(a[0], a[1]) })
	register("symlink", 2, "TARGET LINK", func(r *Result, a []string) error { return unix.Symlink(a[0], a[1]) })
	register("chmod", 2, "PATH OCTAL", opChmod)
	register("chown", 3, "PATH UID GID", opChown)
	register("truncate", 1, "PATH", func(r *Result, a []string) error { return unix.Truncate(a[0], 0) })
	register("mknod", 1, "PATH (char device 1:3)", func(r *Result, a []string) error {
		return unix.Mknod(a[0], unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3)))
	})
	register("link-fd", 2, "PATH NEW (linkat /proc/self/fd/N, AT_SYMLINK_FOLLOW)", opLinkFD)
	register("reopen", 2, "PATH r|w|rw (open O_PATH, then reopen /proc/self/fd/N)", opReopen)
	register("reopen-write", 2, "PATH DATA (reopen /proc/self/fd/N O_WRONLY|O_APPEND and write)", opReopenWrite)
	register("rename-escape", 4, "HELD FROM TO REL", opRenameEscape)
	register("getcwd", 0, "", opGetcwd)
	register("chdir-up", 1, "N (chdir .. N times, then report cwd)", opChdirUp)
}

func openMode(m string) (int, error) {
	switch m {
	case "r":
		return unix.O_RDONLY, nil
	case "w":
		return unix.O_WRONLY, nil
	case "rw":
		return unix.O_RDWR, nil
	case "creat":
		return unix.O_WRONLY | unix.O_CREAT, nil
	case "path":
		return unix.O_PATH, nil
	case "dir":
		return unix.O_RDONLY | unix.O_DIRECTORY, nil
	}
	return 0, fmt.Errorf("unknown open mode %q", m)
}

func opOpen(r *Result, a []string) error {
	flags, err := openMode(a[1])
	if err != nil {
		return err
	}
	fd, err := unix.Open(a[0], flags|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	if t, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd)); err == nil {
		r.set("resolved", t)
	}
	return unix.Close(fd)
}

// readAll reads at most 1 MiB of fd and reports its size and digest.
func readAll(r *Result, fd int, needle string) error {
	f := os.NewFile(uintptr(fd), "file")
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return err
	}
	sum := sha256.Sum256(b)
	r.set("size", len(b))
	r.set("sha256", hex.EncodeToString(sum[:]))
	if needle != "" {
		r.set("found", bytes.Contains(b, []byte(needle)))
	}
	return nil
}

func opRead(r *Result, a []string) error {
	fd, err := unix.Open(a[0], unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	needle := ""
	if len(a) > 1 {
		needle = a[1]
	}
	return readAll(r, fd, needle)
}

func writeAll(fd int, data string) error {
	b := []byte(data)
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

func opWrite(r *Result, a []string) error {
	fd, err := unix.Open(a[0], unix.O_WRONLY|unix.O_CREAT|unix.O_APPEND|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return wrap("open", err)
	}
	defer unix.Close(fd)
	if t, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd)); err == nil {
		r.set("resolved", t)
	}
	return wrap("write", writeAll(fd, a[1]))
}

func doStat(r *Result, p string, follow bool) error {
	var st unix.Stat_t
	var err error
	if follow {
		err = unix.Stat(p, &st)
	} else {
		err = unix.Lstat(p, &st)
	}
	if err != nil {
		return err
	}
	r.set("mode", fmt.Sprintf("%#o", st.Mode))
	r.set("uid", st.Uid)
	r.set("gid", st.Gid)
	r.set("dev", st.Dev)
	r.set("ino", st.Ino)
	r.set("nlink", st.Nlink)
	r.set("size", st.Size)
	return nil
}

func opReadlink(r *Result, a []string) error {
	t, err := os.Readlink(a[0])
	if err != nil {
		return unwrapPathErr(err)
	}
	r.Detail = t
	r.set("target", t)
	return nil
}

// unwrapPathErr returns the errno inside an *os.PathError or
// *os.LinkError, or err.
func unwrapPathErr(err error) error {
	switch e := err.(type) {
	case *os.PathError:
		return e.Err
	case *os.LinkError:
		return e.Err
	case *os.SyscallError:
		return e.Err
	}
	return err
}

func opLs(r *Result, a []string) error { return listInto(r, a[0]) }

// listInto records the sorted entry names of dir.
func listInto(r *Result, dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return unwrapPathErr(err)
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return unwrapPathErr(err)
	}
	sort.Strings(names)
	r.set("names", names)
	return nil
}

func opChmod(r *Result, a []string) error {
	m, err := strconv.ParseUint(a[1], 8, 32)
	if err != nil {
		return err
	}
	return unix.Chmod(a[0], uint32(m))
}

func opChown(r *Result, a []string) error {
	uid, err := strconv.Atoi(a[1])
	if err != nil {
		return err
	}
	gid, err := strconv.Atoi(a[2])
	if err != nil {
		return err
	}
	return unix.Chown(a[0], uid, gid)
}

// opLinkFD gives a name in NEW to the file open at PATH through its
// /proc/self/fd magic link.
func opLinkFD(r *Result, a []string) error {
	fd, err := unix.Open(a[0], unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return wrap("open", err)
	}
	defer unix.Close(fd)
	return wrap("linkat", unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), unix.AT_FDCWD, a[1], unix.AT_SYMLINK_FOLLOW))
}

func opReopen(r *Result, a []string) error {
	flags, err := openMode(a[1])
	if err != nil {
		return err
	}
	fd, err := unix.Open(a[0], unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return wrap("open O_PATH", err)
	}
	defer unix.Close(fd)
	fd2, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return wrap("reopen", err)
	}
	return unix.Close(fd2)
}

func opReopenWrite(r *Result, a []string) error {
	fd, err := unix.Open(a[0], unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return wrap("open O_PATH", err)
	}
	defer unix.Close(fd)
	fd2, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), unix.O_WRONLY|unix.O_APPEND|unix.O_CLOEXEC, 0)
	if err != nil {
		return wrap("reopen", err)
	}
	defer unix.Close(fd2)
	return wrap("write", writeAll(fd2, a[1]))
}

// opRenameEscape holds a directory open (HELD), renames one of its
// ancestors' children away (FROM → TO) so that HELD ends up outside the
// root of the mount it was opened through, then opens REL relative to the
// held directory. ok means REL was opened and read: the walk escaped.
// The rename is undone afterwards.
func opRenameEscape(r *Result, a []string) error {
	held, err := unix.Open(a[0], unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return wrap("open held dir", err)
	}
	defer unix.Close(held)
	if err := unix.Rename(a[1], a[2]); err != nil {
		return wrap("rename", err)
	}
	defer unix.Rename(a[2], a[1])
	fd, err := unix.Openat(held, a[3], unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return wrap("openat from held dir", err)
	}
	return readAll(r, fd, "")
}

// reachesRoot walks up from dir with ".." until it stops moving and reports
// whether it arrived at the same inode as "/".
func reachesRoot(dir string) (bool, error) {
	var root unix.Stat_t
	if err := unix.Stat("/", &root); err != nil {
		return false, err
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, err
	}
	for range 256 {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return false, err
		}
		if st.Dev == root.Dev && st.Ino == root.Ino {
			unix.Close(fd)
			return true, nil
		}
		up, err := unix.Openat(fd, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return false, err
		}
		var ust unix.Stat_t
		if err := unix.Fstat(up, &ust); err != nil {
			unix.Close(up)
			return false, err
		}
		if ust.Dev == st.Dev && ust.Ino == st.Ino {
			// ".." of a root: this is the top of the tree we are in.
			unix.Close(up)
			return false, nil
		}
		fd = up
	}
	unix.Close(fd)
	return false, nil
}

// opGetcwd reports the working directory three ways and whether walking up
// from it reaches this process's root.
func opGetcwd(r *Result, a []string) error {
	buf := make([]byte, 4096)
	n, err := unix.Getcwd(buf)
	if err != nil {
		r.set("getcwd_errno", err.Error())
	} else {
		r.set("cwd", strings.TrimRight(string(buf[:n]), "\x00"))
	}
	if t, err := os.Readlink("/proc/self/cwd"); err == nil {
		r.set("proc_cwd", t)
	}
	in, err := reachesRoot(".")
	if err != nil {
		return wrap("walk up from cwd", err)
	}
	r.set("reaches_root", in)
	if !in {
		return fmt.Errorf("cwd is not beneath this process's root")
	}
	return nil
}

func opChdirUp(r *Result, a []string) error {
	n, err := strconv.Atoi(a[0])
	if err != nil {
		return err
	}
	for range n {
		if err := unix.Chdir(".."); err != nil {
			return wrap("chdir ..", err)
		}
	}
	if err := opGetcwd(r, nil); err != nil {
		return err
	}
	return listInto(r, ".")
}
