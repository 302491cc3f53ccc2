// Package procfs reads what the benchmarks report about processes and the
// machine from /proc: resident and proportional set sizes, threads, open
// descriptors, a process's descendants, and /proc/meminfo. Sizes are in
// KiB.
package procfs

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// Status holds fields of /proc/PID/status.
type Status struct {
	RSSKB   int64 // VmRSS
	HWMKB   int64 // VmHWM: the peak RSS since the process started
	Threads int
}

// ReadStatus reads /proc/PID/status; false if the process is gone.
func ReadStatus(pid int) (Status, bool) {
	var s Status
	var threads int64
	ok := readKV("/proc/"+strconv.Itoa(pid)+"/status", map[string]*int64{
		"VmRSS": &s.RSSKB, "VmHWM": &s.HWMKB, "Threads": &threads,
	})
	s.Threads = int(threads)
	return s, ok
}

// CountFDs is the number of open file descriptors of pid (-1 if unknown).
func CountFDs(pid int) int {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

// Descendants returns the pids of every process below pid (the sandboxes'
// inits and what runs in them), by one scan of /proc: the children files
// are per thread, and the daemon's children are forked from many threads.
func Descendants(pid int) []int {
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
		if pp, ok := ReadPPID(p); ok {
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

// ReadPPID reads the parent pid from /proc/PID/stat (the field after the
// state, which follows the parenthesised command name).
func ReadPPID(pid int) (int, bool) {
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

// RSSKB is the resident set of pid from /proc/PID/statm (cheaper than
// status; the same figure as VmRSS).
func RSSKB(pid int) (int64, bool) {
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

// PSSKB is the proportional set size of pid from /proc/PID/smaps_rollup:
// its resident pages with each shared page divided among its sharers, so
// the PSS of many processes adds up to the memory they really use.
func PSSKB(pid int) (int64, bool) {
	r, ok := ReadRollup(pid)
	return r.PSS, ok
}

// Rollup holds fields of /proc/PID/smaps_rollup, in KiB.
type Rollup struct {
	RSS     int64 // Rss
	PSS     int64 // Pss: resident pages, each shared one divided among its sharers
	PSSAnon int64 // Pss_Anon: the process's own heap, stacks and data
	PSSFile int64 // Pss_File: its share of mapped files (the binary's text)
}

// ReadRollup reads /proc/PID/smaps_rollup; false if the process is gone.
func ReadRollup(pid int) (Rollup, bool) {
	var r Rollup
	ok := readKV("/proc/"+strconv.Itoa(pid)+"/smaps_rollup", map[string]*int64{
		"Rss": &r.RSS, "Pss": &r.PSS, "Pss_Anon": &r.PSSAnon, "Pss_File": &r.PSSFile,
	})
	return r, ok
}

// Meminfo holds fields of /proc/meminfo, in KiB.
type Meminfo struct {
	Total, Available int64 // MemTotal, MemAvailable
	// Kernel is what the kernel holds for itself: Slab, KernelStack and
	// PageTables.
	Kernel int64
}

// ReadMeminfo reads /proc/meminfo.
func ReadMeminfo() (Meminfo, bool) {
	var m Meminfo
	var slab, stack, tables int64
	ok := readKV("/proc/meminfo", map[string]*int64{
		"MemTotal": &m.Total, "MemAvailable": &m.Available,
		"Slab": &slab, "KernelStack": &stack, "PageTables": &tables,
	})
	m.Kernel = slab + stack + tables
	return m, ok
}

// readKV reads the "Key: N kB" lines of path into the fields named in
// want; false if the file cannot be read.
func readKV(path string, want map[string]*int64) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		dst := want[k]
		if dst == nil {
			continue
		}
		if fields := strings.Fields(v); len(fields) > 0 {
			*dst, _ = strconv.ParseInt(fields[0], 10, 64)
		}
	}
	return sc.Err() == nil
}
