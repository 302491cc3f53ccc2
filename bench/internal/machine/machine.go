// Package machine is what the benchmarks share about the machine they run
// on: its description for their results (Describe, LoadAvg, GitCommit)
// and the running of commands on it (Timer, which times one command from
// fork to reaped exit; Version; ShellQuote; BwrapArgs, the bubblewrap
// reference bench/startup and bench/controlplane compare moat with).
package machine

import (
	"bufio"
	"bytes"
	"context"

	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/bench/internal/procfs"
	"github.com/moat-sandbox/moat/bench/schema"
)

// Describe reads the host's description; what it cannot read is
// "unknown" (or 0 for the numbers).
func Describe() schema.Machine {
	m := schema.Machine{
		Kernel:    readTrim("/proc/sys/kernel/osrelease"),
		OS:        osRelease(),
		CPUs:      runtime.NumCPU(),
		CPUModel:  cpuModel(),
		GoVersion: runtime.Version(),
		UID:       os.Geteuid(),
	}
	if mem, ok := procfs.ReadMeminfo(); ok {
		m.MemTotalKiB = mem.Total
	}
	m.PIDMax, _ = strconv.Atoi(readTrim("/proc/sys/kernel/pid_max"))
	return m
}

// LoadAvg returns /proc/loadavg as it is now, or "unknown".
func LoadAvg() string { return readTrim("/proc/loadavg") }

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

func osRelease() string {
	b, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return "unknown"
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
			return strings.Trim(v, `"'`)
		}
	}
	return "unknown"
}

// cpuModel reads the CPU's name from /proc/cpuinfo ("model name" on x86,
// other keys elsewhere).
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	found := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if ok && v != "" && found[k] == "" {
			found[k] = v
		}
	}
	for _, k := range []string{"model name", "Model", "Hardware", "cpu model", "uarch", "CPU part"} {
		if v := found[k]; v != "" {
			return v
		}
	}
	return "unknown"
}

// GitCommit returns the current commit of the checkout the benchmark runs
// in, "-dirty" appended when the tree has changes, or "" outside a
// checkout.
func GitCommit() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return ""
	}
	commit := strings.TrimSpace(string(out))
	st, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output()
	if err == nil && len(bytes.TrimSpace(st)) > 0 {
		commit += "-dirty"
	}
	return commit
}
