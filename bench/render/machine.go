package render

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/bench/schema"
)

// provenance is what one results file says about its own run.
type provenance struct {
	bench    string // "startup"
	file     string // the results file's name: startup.json
	present  bool
	date     string // start of the run, RFC 3339, or ""
	commit   string
	loadavg  string // at the start
	loadEnd  string // at the end
	duration float64
	written  time.Time // the file's modification time
	host     *schema.Machine
}

// provenances lists every benchmark in the order bench/run.sh runs them.
func provenances(in *Inputs) []provenance {
	var out []provenance
	for _, name := range schema.Kinds() {
		p := provenance{bench: name, file: schema.FileName(name)}
		if r := in.Get(name); r != nil {
			h := r.Header()
			p.present = true
			p.written = in.Written[name].UTC()
			p.date, p.commit, p.loadavg, p.loadEnd, p.duration, p.host = h.Date, h.Commit, h.LoadAvgStart, h.LoadAvgEnd, h.DurationSec, &h.Machine
		}
		out = append(out, p)
	}
	return out
}

// loadAvg keeps the 1, 5 and 15 minute averages of a /proc/loadavg line.
func loadAvg(s string) string {
	f := strings.Fields(s)
	if len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func provenanceTable(ps []provenance) *table {
	t := newTable("benchmark", "results file", "started (UTC)", "file written (UTC)", "moat commit", "load average at start (1/5/15 min)", ">duration s")
	for _, p := range ps {
		if !p.present {
			t.add("`bench/"+p.bench+"`", "not run in this invocation (no "+p.file+")", "", "", "", "", "")
			continue
		}
		dur := "not recorded"
		if p.duration > 0 {
			dur = fmt.Sprintf("%.0f", p.duration)
		}
		date := p.date
		if date == "" {
			date = "not recorded"
		}
		written := ""
		if !p.written.IsZero() {
			written = p.written.Format(time.RFC3339)
		}
		t.add("`bench/"+p.bench+"`", "`"+p.file+"`", date, written,
			orDash(p.commit), orDash(loadAvg(p.loadavg)), dur)
	}
	return t
}

// runSpan is the whole run: the earliest recorded start and the last
// results file written.
func runSpan(ps []provenance) (first, last time.Time, ok bool) {
	for _, p := range ps {
		if !p.present {
			continue
		}
		if t, err := time.Parse(time.RFC3339, p.date); err == nil && (first.IsZero() || t.Before(first)) {
			first = t
		}
		if !p.written.IsZero() && p.written.After(last) {
			last = p.written
		}
	}
	return first, last, !first.IsZero() && last.After(first)
}

// commits lists the distinct commits the results were taken at.
func commits(ps []provenance) []string {
	var out []string
	for _, p := range ps {
		if p.present && p.commit != "" && !slices.Contains(out, p.commit) {
			out = append(out, p.commit)
		}
	}
	return out
}

// machineOf picks the host description: the first benchmark that recorded
// one, and notes the benchmarks whose host differs from it.
func machineOf(ps []provenance) (h *schema.Machine, from string, differ []string) {
	for _, p := range ps {
		if p.host == nil || p.host.Kernel == "" {
			continue
		}
		if h == nil {
			h, from = p.host, p.bench
			continue
		}
		if p.host.Kernel != h.Kernel || p.host.CPUModel != h.CPUModel || p.host.CPUs != h.CPUs || p.host.OS != h.OS {
			differ = append(differ, fmt.Sprintf("bench/%s ran on %s, %d × %s", p.bench, p.host.Kernel, p.host.CPUs, p.host.CPUModel))
		}
	}
	return h, from, differ
}

// memTotal returns the machine's memory in KiB and where it comes from:
// the results record it (bench/density's first, which measures memory);
// without it the report reads this machine's /proc/meminfo.
func memTotal(ps []provenance) (kib int64, source string) {
	for _, want := range []string{"density", ""} {
		for _, p := range ps {
			if p.host != nil && p.host.MemTotalKiB > 0 && (want == "" || p.bench == want) {
				return p.host.MemTotalKiB, "MemTotal, recorded by bench/" + p.bench
			}
		}
	}
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err == nil {
				return n, "MemTotal, read from /proc/meminfo by bench/report: no results file records it"
			}
		}
	}
	return 0, ""
}

// pidMax is kernel.pid_max as the results record it, bench/density's
// first (it is what bounds density).
func pidMax(ps []provenance) int {
	for _, want := range []string{"density", ""} {
		for _, p := range ps {
			if p.host != nil && p.host.PIDMax > 0 && (want == "" || p.bench == want) {
				return p.host.PIDMax
			}
		}
	}
	return 0
}

func machineTable(ps []provenance) (*table, []string) {
	t := newTable("", "")
	h, from, differ := machineOf(ps)
	if h == nil {
		return nil, nil
	}
	t.add("kernel", "Linux "+h.Kernel)
	t.add("OS", h.OS)
	t.add("CPUs", fmt.Sprintf("%d × %s", h.CPUs, h.CPUModel))
	if kib, src := memTotal(ps); kib > 0 {
		t.add("memory", fmt.Sprintf("%.1f GiB (%s)", float64(kib)/(1<<20), src))
	} else {
		t.add("memory", "not recorded")
	}
	if pm := pidMax(ps); pm > 0 {
		t.add("pid_max", fmt.Sprint(pm))
	}
	t.add("Go", h.GoVersion)
	t.add("uid", fmt.Sprint(h.UID))
	t.add("described by", "bench/"+from+"'s results")
	var loads []string
	for _, p := range ps {
		if p.present && p.loadavg != "" {
			loads = append(loads, fmt.Sprintf("%s: %s", p.bench, loadAvg(p.loadavg)))
		}
	}
	for _, p := range ps {
		if p.present && p.loadEnd != "" {
			loads = append(loads, fmt.Sprintf("%s at its end: %s", p.bench, loadAvg(p.loadEnd)))
		}
	}
	if len(loads) > 0 {
		t.add("load average (1/5/15 min) at each benchmark's start", strings.Join(loads, "; "))
	}
	return t, differ
}

// ---- peers ----

// peer is one system moat is compared with (or the reference rows).
type peer struct {
	name    string // as the table shows it
	startup string // its bench/startup system name, "" if none
	fixed   string // a peer never runnable here: the reason
}

var peers = []peer{
	{name: "moat (the system measured)", startup: "moat"},
	{name: "no sandbox (`/bin/true` run directly: the floor)", startup: "bare"},
	{name: "bubblewrap (`bwrap`)", startup: "bwrap"},
	{name: "runc", startup: "runc"},
	{name: "crun", startup: "crun"},
	{name: "gVisor (`runsc`)", startup: "runsc"},
	{name: "Firecracker", fixed: "not packaged in Debian 12, and /dev/kvm here is nested PVM where ordinary guest kernels do not boot"},
	{name: "hosted agent sandboxes (Anthropic's, OpenAI's, E2B-style services)",
		fixed: "hosted services, not runnable on this machine, which reaches only the Go module proxy and Debian's and npm's registries"},
}

// peerStatus says whether a bench/startup system ran, and if not why.
func peerStatus(in *Inputs, name string) (ran bool, status string) {
	if in.Startup == nil {
		return false, "no: bench/startup was not run in this invocation (no startup.json)"
	}
	s := in.Startup.System(name)
	switch {
	case s == nil:
		return false, "no: not a system of this run's bench/startup (no row in startup.json)"
	case s.SkippedReason != "":
		return false, "skipped: " + oneLine(s.SkippedReason)
	case !s.Measured():
		msg := "failed: every run failed"
		if len(s.Errors) > 0 {
			msg += ": " + code(firstN(s.Errors[0], 200))
		}
		return false, msg
	}
	msg := fmt.Sprintf("yes: bench/startup, %d runs", s.N)
	if s.Failed > 0 {
		msg += fmt.Sprintf(", %d failed", s.Failed)
	}
	return true, msg
}

func firstN(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func peerTable(in *Inputs, a *analysis) *table {
	t := newTable("system", "version", "in this run")
	for _, p := range peers {
		if p.fixed != "" {
			t.add(p.name, "—", "no: "+p.fixed)
			a.missing("%s: %s.", p.name, p.fixed)
			continue
		}
		version := ""
		// bench/startup's versions first, then any other benchmark's.
		for _, name := range schema.Kinds() {
			if r := in.Get(name); version == "" && r != nil {
				version = r.Header().Versions[p.startup]
			}
		}
		if p.startup == "moat" {
			if cs := commits(provenances(in)); len(cs) > 0 {
				version = strings.TrimSpace(version + ", commit " + strings.Join(cs, ", "))
			}
		}
		_, status := peerStatus(in, p.startup)
		switch p.startup {
		case "moat":
			var where []string
			for _, b := range []string{"startup", "syscall", "netproxy", "controlplane", "daemon", "rootfs", "density", "workflow", "build", "agent"} {
				if in.Present(b) {
					where = append(where, b)
				}
			}
			if len(where) > 0 {
				status = "yes: bench/" + strings.Join(where, ", bench/")
			}
		case "bwrap":
			if in.Controlplane != nil && hasKind(in.Controlplane.TTI, "bwrap") {
				status += "; bench/controlplane's one-shot reference"
			}
		}
		if version == "" {
			version = "not recorded"
		}
		t.add(p.name, oneLine(version), status)
	}
	return t
}

func hasKind(rows []schema.ControlplaneRow, kind string) bool {
	for _, r := range rows {
		if r.Kind == kind && r.Stats != nil {
			return true
		}
	}
	return false
}
