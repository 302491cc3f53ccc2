// Command syscall measures what moat's sandbox adds to system calls and
// file I/O: the same syscall-heavy workloads run inside a sandbox (seccomp
// filter, Landlock domain, namespaces, overlay/tmpfs/bind mounts) and
// outside it, alternating, in one run. Each workload times itself around
// its loop, so sandbox start-up is not part of the figures.
//
//	CGO_ENABLED=0 go run ./bench/syscall --moat bin/moat [--rounds 15] [--json FILE] [--markdown FILE]
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/bench/internal/machine"
	"github.com/moat-sandbox/moat/bench/internal/stats"
	"golang.org/x/sys/unix"
)

// workload is one syscall-heavy loop.
type workload struct {
	name, what string
	n          int
	run        func(dir string, n int) error
}

var workloads = []workload{
	{"getppid", "getppid(2): the cost of the seccomp filter on a cached-allow syscall", 2_000_000, func(_ string, n int) error {
		for range n {
			unix.Getppid()
		}
		return nil
	}},
	{"read-1B", "read(2) of 1 byte from /dev/zero", 1_000_000, func(_ string, n int) error {
		fd, err := unix.Open("/dev/zero", unix.O_RDONLY, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		b := make([]byte, 1)
		for range n {
			if _, err := unix.Read(fd, b); err != nil {
				return err
			}
		}
		return nil
	}},
	{"ioctl", "ioctl(2) TCGETS on /dev/null (ENOTTY): a syscall the filter inspects by argument", 1_000_000, func(_ string, n int) error {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		for range n {
			_ = getTermios(fd)
		}
		return nil
	}},
	{"open-close", "openat(2)+close(2) of a file in /tmp: path walk, Landlock check", 200_000, func(dir string, n int) error {
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			return err
		}
		for range n {
			fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			unix.Close(fd)
		}
		return nil
	}},
	{"stat-usr", "stat(2) of /usr/bin/env: a walk through the read-only /usr bind", 500_000, func(_ string, n int) error {
		var st unix.Stat_t
		for range n {
			if err := unix.Stat("/usr/bin/env", &st); err != nil {
				return err
			}
		}
		return nil
	}},
	{"write-4k", "write(2) of 4 KiB to a file in /tmp (tmpfs inside, the host's /tmp outside), rewound every 256 MiB", 200_000, func(dir string, n int) error {
		f, err := os.Create(filepath.Join(dir, "w"))
		if err != nil {
			return err
		}
		defer f.Close()
		b := make([]byte, 4096)
		for i := range n {
			if i%65536 == 0 {
				if _, err := f.Seek(0, 0); err != nil {
					return err
				}
			}
			if _, err := f.Write(b); err != nil {
				return err
			}
		}
		return nil
	}},
}

// probe runs every workload once and prints ns/op as JSON.
func probe() error {
	dir, err := os.MkdirTemp("", "moat-sysbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	out := map[string]float64{}
	for _, w := range workloads {
		t0 := time.Now()
		if err := w.run(dir, w.n); err != nil {
			return fmt.Errorf("%s: %w", w.name, err)
		}
		out[w.name] = float64(time.Since(t0).Nanoseconds()) / float64(w.n)
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

type result struct {
	Name        string  `json:"name"`
	What        string  `json:"what"`
	InsideNs    float64 `json:"inside_ns_per_op_p50"`
	OutsideNs   float64 `json:"outside_ns_per_op_p50"`
	OverheadPct float64 `json:"overhead_pct"`
	InsideP95   float64 `json:"inside_ns_per_op_p95"`
	OutsideP95  float64 `json:"outside_ns_per_op_p95"`
	InsideP99   float64 `json:"inside_ns_per_op_p99"`
	OutsideP99  float64 `json:"outside_ns_per_op_p99"`
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "probe" {
		if err := probe(); err != nil {
			fmt.Fprintln(os.Stderr, "probe:", err)
			os.Exit(1)
		}
		return
	}
	moat := flag.String("moat", "bin/moat", "moat binary")
	rounds := flag.Int("rounds", 15, "rounds (each runs the probe inside and outside, in random order)")
	jsonOut := flag.String("json", "", "write results as JSON to FILE")
	mdOut := flag.String("markdown", "", "write a markdown table to FILE")
	flag.Parse()
	if err := run(*moat, *rounds, *jsonOut, *mdOut); err != nil {
		fmt.Fprintln(os.Stderr, "syscall bench:", err)
		os.Exit(1)
	}
}

func run(moat string, rounds int, jsonOut, mdOut string) error {
	start, loadStart := time.Now(), machine.LoadAvg()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// The probe is this (static) binary, bound read-only into the sandbox.
	dir, err := os.MkdirTemp("", "moat-sysbench-bin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "sysbench")
	b, err := os.ReadFile(self)
	if err != nil {
		return err
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		return err
	}
	// A CPU quota far above the machine's CPUs: CFS throttling at a
	// quota of one CPU would otherwise show up as syscall overhead.
	inside := []string{moat, "run", "--cpus", "64", "--ro", bin + ":/opt/sysbench", "--", "/opt/sysbench", "probe"}
	outside := []string{bin, "probe"}
	samples := map[string]map[string][]float64{"inside": {}, "outside": {}}
	for r := range rounds {
		order := []string{"inside", "outside"}
		if rand.IntN(2) == 0 {
			order[0], order[1] = order[1], order[0]
		}
		for _, where := range order {
			argv := inside
			if where == "outside" {
				argv = outside
			}
			out, err := exec.Command(argv[0], argv[1:]...).Output()
			if err != nil {
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					return fmt.Errorf("round %d %s: %v: %s", r, where, err, ee.Stderr)
				}
				return fmt.Errorf("round %d %s: %w", r, where, err)
			}
			var m map[string]float64
			if err := json.Unmarshal(out, &m); err != nil {
				return fmt.Errorf("round %d %s: %w (%q)", r, where, err, out)
			}
			for k, v := range m {
				samples[where][k] = append(samples[where][k], v)
			}
		}
	}
	var results []result
	for _, w := range workloads {
		in, _ := stats.Summarize(samples["inside"][w.name])
		out, _ := stats.Summarize(samples["outside"][w.name])
		res := result{Name: w.name, What: w.what, InsideNs: in.P50, OutsideNs: out.P50, InsideP95: in.P95, OutsideP95: out.P95,
			InsideP99: in.P99, OutsideP99: out.P99}
		res.OverheadPct = (res.InsideNs/res.OutsideNs - 1) * 100
		results = append(results, res)
	}
	var md strings.Builder
	fmt.Fprintf(&md, "| workload | outside ns/op (p50) | inside ns/op (p50) | overhead | outside p95 | inside p95 |\n|---|--:|--:|--:|--:|--:|\n")
	for _, r := range results {
		fmt.Fprintf(&md, "| %s | %.1f | %.1f | %+.1f%% | %.1f | %.1f |\n", r.Name, r.OutsideNs, r.InsideNs, r.OverheadPct, r.OutsideP95, r.InsideP95)
	}
	fmt.Fprintf(&md, "\n%d rounds, inside and outside alternating in random order; each figure is the loop's own time per operation.\n", rounds)
	for _, w := range workloads {
		fmt.Fprintf(&md, "- %s: %s (%d ops)\n", w.name, w.what, w.n)
	}
	fmt.Print(md.String())
	if mdOut != "" {
		if err := os.WriteFile(mdOut, []byte(md.String()), 0o644); err != nil {
			return err
		}
	}
	if jsonOut != "" {
		rep := map[string]any{"machine": machine.Describe(), "commit": machine.GitCommit(), "date": start.UTC().Format(time.RFC3339),
			"loadavg": loadStart, "rounds": rounds, "results": results}
		if err := machine.WriteJSON(jsonOut, rep); err != nil {
			return err
		}
	}
	return nil
}
