//go:build linux

package main

import (
	"bufio"
	"os"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Information attempts: what the process can learn about its host.

func init() {
	register("hostname", 0, "(uname nodename and domainname)", opHostname)
	register("env", 0, "(the environment)", func(r *Result, a []string) error {
		r.set("env", os.Environ())
		return nil
	})
	register("fds", 0, "(open descriptors: /proc/self/fd and an fcntl scan)", opFDs)
	register("pids", 0, "(processes in /proc and their command lines)", opPids)
	register("mounts", 0, "(mount points and mount roots from /proc/self/mountinfo)", opMounts)
}

func cstr(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}

func opHostname(r *Result, a []string) error {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return err
	}
	r.set("nodename", cstr(u.Nodename[:]))
	r.set("domainname", cstr(u.Domainname[:]))
	r.Detail = cstr(u.Nodename[:])
	return nil
}

// opFDs lists open descriptors twice: by reading /proc/self/fd (leaving out
// the descriptor of the directory being read) and by asking fcntl about
// every number below the soft RLIMIT_NOFILE (at most 65536), which does not
// depend on /proc.
func opFDs(r *Result, a []string) error {
	d, err := unix.Open("/proc/self/fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return wrap("open /proc/self/fd", err)
	}
	f := os.NewFile(uintptr(d), "/proc/self/fd")
	names, err := f.Readdirnames(-1)
	if err != nil {
		f.Close()
		return unwrapPathErr(err)
	}
	listed := []int{}
	targets := map[string]string{}
	for _, n := range names {
		fd, err := strconv.Atoi(n)
		if err != nil || fd == d {
			continue
		}
		listed = append(listed, fd)
		if t, err := os.Readlink("/proc/self/fd/" + n); err == nil {
			targets[n] = t
		}
	}
	f.Close()
	sort.Ints(listed)
	var lim unix.Rlimit
	max := 1024
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil && lim.Cur < 65536 {
		max = int(lim.Cur)
	} else if lim.Cur >= 65536 {
		max = 65536
	}
	open := []int{}
	for fd := 0; fd < max; fd++ {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
			open = append(open, fd)
		}
	}
	r.set("listed", listed)
	r.set("fcntl_open", open)
	r.set("targets", targets)
	return nil
}

func opPids(r *Result, a []string) error {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return unwrapPathErr(err)
	}
	pids := []int{}
	cmdlines := map[string]string{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		pids = append(pids, pid)
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil {
			cmdlines[e.Name()] = strings.TrimRight(strings.ReplaceAll(string(b), "\x00", " "), " ")
		}
	}
	sort.Ints(pids)
	r.set("pids", pids)
	r.set("cmdlines", cmdlines)
	return nil
}

// opMounts reports field 5 (mount point), field 4 (root of the mount
// within its filesystem) and the source of every mount.
func opMounts(r *Result, a []string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return unwrapPathErr(err)
	}
	defer f.Close()
	points := []string{}
	roots := []string{}
	sources := []string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		roots = append(roots, unescapeMount(fields[3]))
		points = append(points, unescapeMount(fields[4]))
		for i, fl := range fields {
			if fl == "-" && i+2 < len(fields) {
				sources = append(sources, unescapeMount(fields[i+2]))
				break
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return unwrapPathErr(err)
	}
	r.set("points", points)
	r.set("roots", roots)
	r.set("sources", sources)
	r.set("mounts", string(mounts))
	return nil
}

// unescapeMount undoes the octal escapes of mountinfo (\040 for space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
