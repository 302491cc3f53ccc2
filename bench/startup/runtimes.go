package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/bench/internal/machine"
)

// ociRuntime is an OCI runtime row: its binary runs one container from
// the bundle of writeBundle, with a state directory of its own.
type ociRuntime struct {
	name string // the row's name, the binary in PATH and its Debian package
	// flags are the runtime's global flags besides --root; tmp is the
	// run's temporary directory.
	flags func(tmp string) []string
	// probeSkips makes a failed probe run a skip (the runtime cannot run
	// on this host) rather than a failure of the row.
	probeSkips bool
}

var (
	runcRuntime = ociRuntime{name: "runc"}
	// runsc: the ptrace platform (the default of Debian's 2022 runsc,
	// stated so that a newer default does not change the row silently;
	// KVM is no platform for a VM), no network stack at all, and its log
	// (warnings and errors; debug logging is off) in the temporary
	// directory instead of stdout.
	runscRuntime = ociRuntime{name: "runsc", flags: func(tmp string) []string {
		return []string{"--log", filepath.Join(tmp, "runsc.log"), "--network=none", "--platform=ptrace"}
	}}
	crunRuntime = ociRuntime{name: "crun", probeSkips: true}
)

// prepareOCI builds the bundle and a state directory in one temporary
// directory, runs the container once untimed (the probe), checks that the
// run left no container state and no cgroup behind, and returns
//
//	RUNTIME --root TMP/state [flags] run --bundle TMP/bundle ID
//
// `run` creates, starts, waits for and deletes the container, so the
// same argv runs again and again. A missing binary is a skip; a failed
// probe is a skip for crun (which refuses, for one, hybrid cgroups) and a
// failure for the others.
func prepareOCI(rt ociRuntime) func(*options) (*prepared, error) {
	return func(o *options) (*prepared, error) {
		bin, err := exec.LookPath(rt.name)
		if err != nil {
			return nil, skipf("%s not installed: apt-get install -y %s", rt.name, rt.name)
		}
		if bin, err = filepath.Abs(bin); err != nil {
			return nil, err
		}
		tmp, err := os.MkdirTemp("", "moat-bench-"+rt.name+"-")
		if err != nil {
			return nil, err
		}
		// Unique per benchmark process, so concurrent benchmarks do not
		// collide on the cgroup.
		id := fmt.Sprintf("moat-bench-%s-%d", rt.name, os.Getpid())
		state, bundle := filepath.Join(tmp, "state"), filepath.Join(tmp, "bundle")
		argv := []string{bin, "--root", state}
		if rt.flags != nil {
			argv = append(argv, rt.flags(tmp)...)
		}
		argv = append(argv, "run", "--bundle", bundle, id)
		cleanup := func() { cleanupOCI(bin, state, tmp, id) }

		bo := ociOptions{hostRoot: "/", userns: true, cgroupsPath: "/" + id, limitSwap: canLimitSwap()}
		err = errors.Join(
			os.Chmod(tmp, 0o711), // the container's mapped root reaches the bundle through it
			os.Mkdir(state, 0o700),
			os.Mkdir(bundle, 0o755),
		)
		if err == nil {
			err = writeBundle(bundle, bo)
		}
		if err != nil {
			cleanup()
			return nil, fmt.Errorf("bundle: %w", err)
		}
		// With --root: crun creates its default state directory (/run/crun)
		// otherwise, even for --version.
		version := machine.Version(bin, "--root", state, "--version")

		if msg, err := probe(argv, o.runTimeout); err != nil {
			cleanup()
			if rt.probeSkips {
				return nil, &skipError{version: version, reason: fmt.Sprintf("%s cannot run here: %s (this host's cgroups are %s)",
					strings.Replace(version, " version ", " ", 1), msg, describeCgroups())}
			}
			return nil, fmt.Errorf("probe run %s: %v: %s", machine.ShellQuote(argv), err, msg)
		}
		if left := leftovers(state, id); len(left) > 0 {
			cleanup()
			return nil, fmt.Errorf("the probe run left %s behind: every run would need a clean-up", strings.Join(left, ", "))
		}
		return &prepared{argv: argv, version: version, cleanup: cleanup}, nil
	}
}

// canLimitSwap reports whether the kernel limits swap per cgroup: always on
// v2 (memory.swap.max), with memory.memsw.* on v1. moat then keeps a
// sandbox out of swap; so does the bundle.
func canLimitSwap() bool {
	for _, f := range []string{"/sys/fs/cgroup/cgroup.controllers", "/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"} {
		if _, err := os.Stat(f); err == nil {
			return true
		}
	}
	return false
}

// probe runs argv once, untimed, and returns the first line of its output
// when it fails.
func probe(argv []string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err == nil {
		return "", nil
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if line == "" {
		line = "no output"
	}
	return strings.TrimSpace(line), err
}

// leftovers lists what a finished run left: entries of the state
// directory and cgroups named after the container.
func leftovers(state, id string) []string {
	var left []string
	if ents, err := os.ReadDir(state); err == nil {
		for _, e := range ents {
			left = append(left, filepath.Join(state, e.Name()))
		}
	}
	return append(left, cgroupDirs(id)...)
}

// cgroupDirs returns the cgroups named id at the top of the host's
// hierarchies (/sys/fs/cgroup/*/ID on cgroup v1 and hybrid hosts,
// /sys/fs/cgroup/ID on v2): where cgroupsPath "/ID" puts them.
func cgroupDirs(id string) []string {
	var dirs []string
	for _, pat := range []string{"/sys/fs/cgroup/" + id, "/sys/fs/cgroup/*/" + id} {
		m, _ := filepath.Glob(pat)
		dirs = append(dirs, m...)
	}
	return dirs
}

// cleanupOCI deletes what a failed run may have left (the container, its
// cgroups) and the temporary directory. It says on stderr what it could
// not remove.
func cleanupOCI(bin, state, tmp, id string) {
	if ents, err := os.ReadDir(state); err == nil && len(ents) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, bin, "--root", state, "delete", "--force", id).CombinedOutput()
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "startup: %s delete --force %s: %v: %s\n", filepath.Base(bin), id, err, bytes.TrimSpace(out))
		}
	}
	// rmdir removes only an empty cgroup with no process in it.
	for _, d := range cgroupDirs(id) {
		if err := os.Remove(d); err != nil {
			fmt.Fprintf(os.Stderr, "startup: remove cgroup %s: %v\n", d, err)
		}
	}
	if err := os.RemoveAll(tmp); err != nil {
		fmt.Fprintf(os.Stderr, "startup: remove %s: %v\n", tmp, err)
	}
}

// describeCgroups names the host's cgroup layout for a skip reason:
// "v2", "v1", or "hybrid: v1 memory/cpu/pids, v2 only hugetlb" (the v1
// controllers moat's limits use, the controllers of the v2 hierarchy).
func describeCgroups() string {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	var v1 []string
	v2, v2Controllers := false, ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 {
			continue
		}
		switch fields[2] {
		case "cgroup":
			for _, opt := range strings.Split(fields[3], ",") {
				if slices.Contains([]string{"memory", "cpu", "pids"}, opt) && !slices.Contains(v1, opt) {
					v1 = append(v1, opt)
				}
			}
		case "cgroup2":
			v2 = true
			b, _ := os.ReadFile(filepath.Join(fields[1], "cgroup.controllers"))
			v2Controllers = strings.TrimSpace(string(b))
		}
	}
	return cgroupLayoutName(v1, v2, v2Controllers)
}

// cgroupLayoutName words the layout describeCgroups found.
func cgroupLayoutName(v1 []string, v2 bool, v2Controllers string) string {
	order := []string{"memory", "cpu", "pids"}
	slices.SortFunc(v1, func(a, b string) int { return slices.Index(order, a) - slices.Index(order, b) })
	switch {
	case len(v1) == 0 && v2:
		return "v2"
	case len(v1) == 0:
		return "unknown"
	case !v2:
		return "v1"
	}
	ctrl := "no controller"
	if v2Controllers != "" {
		ctrl = "only " + strings.Join(strings.Fields(v2Controllers), "/")
	}
	return fmt.Sprintf("hybrid: v1 %s, v2 %s", strings.Join(v1, "/"), ctrl)
}
