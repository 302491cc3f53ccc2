// Package machine is what bench/startup and bench/controlplane share
// about the machine they run on: its description for their reports (Host,
// LoadAvg, GitCommit) and the running of commands on it (Timer, which
// times one command from fork to reaped exit; Version; ShellQuote;
// BwrapArgs, the bubblewrap reference both compare moat with), plus
// WriteJSON for their result files.
package machine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// Host describes the machine and toolchain. A report embeds it in its own
// machine object, beside what that benchmark adds (load averages,
// versions, commit, date).
type Host struct {
	Kernel    string `json:"kernel"` // uname -r
	OS        string `json:"os"`     // /etc/os-release PRETTY_NAME
	CPUs      int    `json:"cpus"`   // CPUs this process may run on
	CPUModel  string `json:"cpu_model"`
	GoVersion string `json:"go_version"`
	UID       int    `json:"uid"`
}

// Describe reads the host's description; what it cannot read is
// "unknown".
func Describe() Host {
	return Host{
		Kernel:    readTrim("/proc/sys/kernel/osrelease"),
		OS:        osRelease(),
		CPUs:      runtime.NumCPU(),
		CPUModel:  cpuModel(),
		GoVersion: runtime.Version(),
		UID:       os.Geteuid(),
	}
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

// WriteJSON writes v to path as indented JSON ending in a newline.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// WriteResults writes a benchmark's results: v as JSON to jsonPath and md
// to mdPath, each only when its path is set, logging each file written or
// each failure through logf. It reports whether everything was written.
func WriteResults(jsonPath, mdPath string, v any, md string, logf func(format string, a ...any)) bool {
	ok := true
	write := func(path string, fn func() error) {
		if path == "" {
			return
		}
		if err := fn(); err != nil {
			logf("%v", err)
			ok = false
			return
		}
		logf("wrote %s", path)
	}
	write(jsonPath, func() error { return WriteJSON(jsonPath, v) })
	write(mdPath, func() error { return os.WriteFile(mdPath, []byte(md), 0o644) })
	return ok
}
