package main

import "github.com/moat-sandbox/moat/bench/internal/procfs"

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
	st, _ := procfs.ReadStatus(pid)
	m := memSnapshot{Phase: phase, AtSec: atSec, DaemonRSSKB: st.RSSKB, DaemonHWMKB: st.HWMKB,
		DaemonThreads: st.Threads, DaemonFDs: procfs.CountFDs(pid)}
	var psum int64
	for _, p := range procfs.Descendants(pid) {
		if r, ok := procfs.RSSKB(p); ok {
			m.SandboxProcs++
			m.SandboxRSSKB += r
		}
		if pss {
			if v, ok := procfs.PSSKB(p); ok {
				psum += v
			}
		}
	}
	if pss {
		m.SandboxPSSKB = &psum
	}
	return m
}
