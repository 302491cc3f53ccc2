// Command syscall measures what moat's sandbox adds to system calls and
// file I/O: the same syscall-heavy workloads run inside a sandbox (seccomp
// filter, Landlock domain, namespaces, overlay/tmpfs/bind mounts) and
// outside it, alternating, in one run. Each workload times itself around
// its loop, so sandbox start-up is not part of the figures.
//
// A failed round stops the measuring; the results hold the failure and the
// command exits 1.
//
//	CGO_ENABLED=0 go run ./syscall [--rounds 15] [--json FILE] [--markdown FILE]   (from bench/)
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/bench/internal/cli"
	"github.com/moat-sandbox/moat/bench/internal/machine"
	"github.com/moat-sandbox/moat/bench/internal/stats"
	"github.com/moat-sandbox/moat/bench/schema"
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

// spec is how bench/syscall takes the common flags.
var spec = cli.Spec{
	Name:        "syscall",
	About:       "Times syscall and file I/O loops inside a moat sandbox and outside it, alternating. The probe must be static: CGO_ENABLED=0.",
	Rounds:      15,
	Warmup:      0,
	RoundsUsage: "rounds, each running the probe inside and outside the sandbox, in a random order",
	WarmupUsage: "warm-up rounds, run the same way but not recorded",
	MinRounds:   1,
}

// maxErrors is how many failures the results keep verbatim.
const maxErrors = 5

func main() {
	if len(os.Args) > 1 && os.Args[1] == "probe" {
		if err := probe(); err != nil {
			fmt.Fprintln(os.Stderr, "probe:", err)
			os.Exit(1)
		}
		return
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole program; it returns the exit code: 0, 1 when a round
// failed or the results could not be written, 2 on bad usage.
func run(args []string, stdout, stderr io.Writer) int {
	var f cli.Flags
	fs := spec.FlagSet(stderr, &f)
	if err := spec.Parse(fs, args, &f); err != nil {
		return spec.Exit(stderr, err)
	}
	logf := spec.Logf(stderr)
	start := time.Now()
	rep := &schema.Syscall{Run: spec.Start(&f, args, start)}
	rep.Versions["moat"] = machine.Version(f.Moat, "version")
	if err := measure(&f, rep, logf); err != nil {
		rep.Fail(maxErrors, err.Error())
		logf("%v", err)
	}
	cli.Finish(&rep.Run, start)
	return f.Conclude(rep.Failed, rep, stdout, logf)
}

// measure runs the rounds and fills rep.Results; it stops at the first
// failed round.
func measure(f *cli.Flags, rep *schema.Syscall, logf func(string, ...any)) error {
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
	argv := map[string][]string{
		"inside":  {f.Moat, "run", "--cpus", "64", "--ro", bin + ":/opt/sysbench", "--", "/opt/sysbench", "probe"},
		"outside": {bin, "probe"},
	}
	samples := map[string]map[string][]float64{"inside": {}, "outside": {}}
	rng := rand.New(rand.NewPCG(f.Seed, f.Seed^0x9e3779b97f4a7c15))
	var failed error
	for r := range f.Warmup + f.Rounds {
		order := []string{"inside", "outside"}
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, where := range order {
			m, err := runProbe(argv[where])
			if err != nil {
				failed = fmt.Errorf("round %d %s: %w", r+1, where, err)
				break
			}
			if r < f.Warmup {
				continue
			}
			for k, v := range m {
				samples[where][k] = append(samples[where][k], v)
			}
		}
		if failed != nil {
			break
		}
	}
	for _, w := range workloads {
		in, okIn := stats.Summarize(samples["inside"][w.name])
		out, okOut := stats.Summarize(samples["outside"][w.name])
		if !okIn || !okOut {
			continue
		}
		res := schema.SyscallResult{Name: w.name, What: w.what, Ops: w.n, InsideNs: in.P50, OutsideNs: out.P50,
			InsideP95: in.P95, OutsideP95: out.P95, InsideP99: in.P99, OutsideP99: out.P99}
		res.OverheadPct = (res.InsideNs/res.OutsideNs - 1) * 100
		rep.Results = append(rep.Results, res)
		logf("%s: %.1f ns/op inside, %.1f outside (%+.1f%%)", w.name, res.InsideNs, res.OutsideNs, res.OverheadPct)
	}
	if rep.Results == nil {
		rep.Results = []schema.SyscallResult{}
	}
	return failed
}

// runProbe runs the probe once and returns its ns/op per workload.
func runProbe(argv []string) (map[string]float64, error) {
	out, err := exec.Command(argv[0], argv[1:]...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("%v: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return nil, err
	}
	var m map[string]float64
	if err := json.Unmarshal(out, &m); err != nil {
		return nil, fmt.Errorf("%w (%q)", err, out)
	}
	return m, nil
}
