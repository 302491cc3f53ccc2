package main

import (
	"github.com/moat-sandbox/moat/bench/internal/procfs"
	"github.com/moat-sandbox/moat/bench/schema"
)

// snapshot reads the memory of the daemon pid and its descendants.
func snapshot(pid int, phase string, atSec float64, pss bool) schema.MemSnapshot {
	st, _ := procfs.ReadStatus(pid)
	m := schema.MemSnapshot{Phase: phase, AtSec: atSec, DaemonRSSKB: st.RSSKB, DaemonHWMKB: st.HWMKB,
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
