package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// The workflow documents the benchmark submits. They are JSON (which the
// daemon accepts as well as YAML), built from Go values so that no
// quoting can go wrong.

// chainScript is a trivial step: it appends its id to a file of the
// workspace and prints how many lines the file holds, with shell
// builtins only (one process). Started from its predecessor's snapshot
// the k-th step of a chain prints k; started fresh it prints 1.
const chainScript = `echo "$MOAT_STEP_ID" >> /workspace/chain.txt; n=0; while read -r l; do n=$((n+1)); done < /workspace/chain.txt; echo $n`

// retryScript is chainScript failing on the step's first attempt and
// passing on the next: retried from the snapshot its first attempt
// started from, the k-th step prints k again (k+1 if the retry kept the
// failed attempt's files, 1 if it started fresh).
const retryScript = chainScript + `; test "$MOAT_STEP_ATTEMPT" -ge 2`

// doc is a workflow document.
type doc struct {
	Name  string `json:"name"`
	Steps []any  `json:"steps"`
}

// step is one step of a document; empty fields are left out, so the
// daemon's defaults apply.
type step struct {
	ID       string   `json:"id"`
	Sh       string   `json:"sh,omitempty"`
	Run      []string `json:"run,omitempty"`
	From     string   `json:"from,omitempty"`
	Snapshot string   `json:"snapshot,omitempty"`
	Retry    *retry   `json:"retry,omitempty"`
	Timeout  string   `json:"timeout,omitempty"`
}

// retry is a step's retry.
type retry struct {
	Attempts int    `json:"attempts"`
	From     string `json:"from,omitempty"`
}

// group is a group of a document.
type group struct {
	Group  string  `json:"group"`
	Mode   string  `json:"mode"`
	Budget *budget `json:"budget,omitempty"`
	Steps  []any   `json:"steps"`
}

// budget is a group's budget.
type budget struct {
	CPUs float64 `json:"cpus"`
}

func (d doc) encode() string {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		panic(err) // plain structs of strings and numbers
	}
	return string(b)
}

// stepID names step i (from 1) of n: s01 … s10, so that the ids sort.
func stepID(prefix string, i, n int) string {
	return fmt.Sprintf("%s%0*d", prefix, len(fmt.Sprint(n)), i)
}

// chainDoc is a sequential chain of n trivial steps. With snapshots,
// each step after the first starts from its predecessor's light
// snapshot; without, none keeps a snapshot and each starts fresh.
func chainDoc(name string, n int, snapshots bool) string {
	d := doc{Name: name}
	for i := 1; i <= n; i++ {
		s := step{ID: stepID("s", i, n), Sh: chainScript, Snapshot: "none"}
		if snapshots {
			s.Snapshot = "light"
			if i > 1 {
				s.From = stepID("s", i-1, n)
			}
		}
		d.Steps = append(d.Steps, s)
	}
	return d.encode()
}

// retryDoc is a chain of n steps, each from its predecessor's light
// snapshot; the last keeps no snapshot (nothing starts from it) and,
// with fail, fails on its first attempt and is retried once from the
// snapshot it started from. Without fail every step passes at once: the
// same chain run from scratch.
func retryDoc(name string, n int, fail bool) string {
	d := doc{Name: name}
	for i := 1; i <= n; i++ {
		s := step{ID: stepID("s", i, n), Sh: chainScript, Snapshot: "light"}
		if i > 1 {
			s.From = stepID("s", i-1, n)
		}
		if i == n {
			s.Snapshot = "none"
			if fail {
				s.Sh = retryScript
				s.Retry = &retry{Attempts: 2, From: "snapshot"}
			}
		}
		d.Steps = append(d.Steps, s)
	}
	return d.encode()
}

// window is a fairness run's clock, in µs since the epoch: the steps
// start spinning at start, measure their CPU time from from (every step
// spinning by then) to end.
type window struct {
	startUs, fromUs, endUs int64
}

// fairScript is the script of a fairness step, run by bash: it reports
// when it started, sleeps until w.startUs, then spins in a loop of
// builtins until w.endUs. It reports when the loop began ("spin"), and
// the clock and its CPU times (bash's times: its own, then its
// children's) once the clock has passed w.fromUs ("begin") and once it
// has passed w.endUs ("end"): only the loop runs between those two
// reports, so their difference is the step's CPU time in its window,
// while every step spins.
func fairScript(w window) string {
	return strings.Join([]string{
		`a=${EPOCHREALTIME//[!0-9]/}; echo "arrive $a"`,
		fmt.Sprintf(`start=%d; from=%d; end=%d`, w.startUs, w.fromUs, w.endUs),
		`if (( a < start )); then d=$((start - a)); printf -v f %06d $((d % 1000000)); sleep "$((d / 1000000)).$f"; fi`,
		`echo "spin ${EPOCHREALTIME//[!0-9]/}"`,
		`while (( ${EPOCHREALTIME//[!0-9]/} < from )); do :; done`,
		`echo "begin ${EPOCHREALTIME//[!0-9]/}"; times`,
		`while (( ${EPOCHREALTIME//[!0-9]/} < end )); do :; done`,
		`echo "end ${EPOCHREALTIME//[!0-9]/}"; times`,
	}, "\n")
}

// fairDoc is n CPU-bound steps in one parallel group with budget.cpus =
// cpus and no max_parallel, spinning in the window w; each step's
// timeout is timeout.
func fairDoc(name string, n int, cpus float64, w window, timeout time.Duration) string {
	g := group{Group: "burn", Mode: "parallel", Budget: &budget{CPUs: cpus}}
	script := fairScript(w)
	for i := 1; i <= n; i++ {
		g.Steps = append(g.Steps, step{ID: stepID("b", i, n), Run: []string{"/bin/bash", "-c", script},
			Snapshot: "none", Timeout: fmt.Sprintf("%ds", int(timeout.Seconds()+0.5))})
	}
	return doc{Name: name, Steps: []any{g}}.encode()
}
