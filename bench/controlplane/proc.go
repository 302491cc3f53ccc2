package main

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// Memory and resource figures read from /proc. Sizes are in KiB.

// procStatus holds fields of /proc/PID/status.
type procStatus struct {
	RSSKB   int64 // VmRSS
	HWMKB   int64 // VmHWM: the peak RSS since the process started
	Threads int
}

func readStatus(pid int) (procStatus, bool) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return procStatus{}, false
	}
	defer f.Close()
	var s procStatus
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(fields[0], 10, 64)
		switch k {
		case "VmRSS":
			s.RSSKB = n
		case "VmHWM":
			s.HWMKB = n
		case "Threads":
			s.Threads = int(n)
		}
	}
	return s, true
}

// countFDs is the number of open file descriptors of pid (-1 if unknown).
func countFDs(pid int) int {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

// descendants returns the pids of every process below pid (the sandboxes'
// inits and what runs in them), by one scan of /proc: the children files
// are per thread, and the daemon's children are forked from many threads.
func descendants(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, ok := readPPID(p); ok {
			children[pp] = append(children[pp], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// readPPID reads the parent pid from /proc/PID/stat (the field after the
// state, which follows the parenthesised command name).
func readPPID(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, false
	}
	pp, err := strconv.Atoi(f[1])
	return pp, err == nil
}

var pageKB = int64(os.Getpagesize() / 1024)

// rssKB is the resident set of pid from /proc/PID/statm (cheaper than
// status; the same figure as VmRSS).
func rssKB(pid int) (int64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, false
	}
	n, err := strconv.ParseInt(f[1], 10, 64)
	return n * pageKB, err == nil
}

// pssKB is the proportional set size of pid from /proc/PID/smaps_rollup:
// its resident pages with each shared page divided among its sharers, so
// the PSS of many processes adds up to the memory they really use.
func pssKB(pid int) (int64, bool) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Pss:"); ok {
			fields := strings.Fields(v)
			if len(fields) > 0 {
				n, err := strconv.ParseInt(fields[0], 10, 64)
				return n, err == nil
			}
		}
	}
	return 0, false
}

// memSnapshot is the daemon's and its sandboxes' memory at one moment.
type memSnapshot struct {
	Phase         string  `json:"phase"`
	AtSec         float64 `json:"at_s"` // since the daemon started listening
	DaemonRSSKB   int64   `json:"daemon_rss_kb"`
	DaemonHWMKB   int64   `json:"daemon_hwm_kb"`
	DaemonThreads int     `json:"daemon_threads"`
	DaemonFDs     int     `json:"daemon_fds"`
	// SandboxProcs counts the daemon's descendants (the sandboxes' inits
	// and their processes); SandboxRSSKB sums their VmRSS, which counts
	// pages they share (moat's own text) once per process.
	SandboxProcs int   `json:"sandbox_procs"`
	SandboxRSSKB int64 `json:"sandbox_rss_kb"`
	// SandboxPSSKB sums their PSS (shared pages split among sharers):
	// only in snapshots taken with pss.
	SandboxPSSKB *int64 `json:"sandbox_pss_kb,omitempty"`
}

// snapshot reads the memory of the daemon pid and its descendants.
func snapshot(pid int, phase string, atSec float64, pss bool) memSnapshot {
	st, _ := readStatus(pid)
	m := memSnapshot{Phase: phase, AtSec: atSec, DaemonRSSKB: st.RSSKB, DaemonHWMKB: st.HWMKB,
		DaemonThreads: st.Threads, DaemonFDs: countFDs(pid)}
	var psum int64
	for _, p := range descendants(pid) {
		if r, ok := rssKB(p); ok {
			m.SandboxProcs++
			m.SandboxRSSKB += r
		}
		if pss {
			if v, ok := pssKB(p); ok {
				psum += v
			}
		}
	}
	if pss {
		m.SandboxPSSKB = &psum
	}
	return m
}
