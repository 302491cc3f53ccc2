package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/moat-sandbox/moat/bench/internal/machine"
	"github.com/moat-sandbox/moat/bench/internal/moatd"
)

// system is one way of running the benchmarked command. To add one, append
// to systems: prepare finds its binary, builds any state it needs (an OCI
// bundle, say: prepareOCI) and returns the exact command line to time, or
// a skipError when the system is not installed or cannot run here.
type system struct {
	name string
	// about is one line saying what the row measures, for the report.
	about   string
	prepare func(o *options) (*prepared, error)
}

// prepared is a system ready to be timed.
type prepared struct {
	argv    []string // the exact command line, argv[0] an absolute path
	version string   // the system's version, or why it is unknown
	cleanup func()   // removes what prepare created; nil if nothing
}

// skipError marks a system that cannot run on this host (binary missing,
// or crun on hybrid cgroups): it is reported as skipped, which does not
// fail the benchmark. version, when known, goes in the report's versions.
type skipError struct{ reason, version string }

func (e *skipError) Error() string { return e.reason }

func skipf(format string, args ...any) error {
	return &skipError{reason: fmt.Sprintf(format, args...)}
}

// benchCommand is what every system runs: the smallest program, so the
// figure is the system's own start-up and tear-down cost.
const benchCommand = "/bin/true"

// systems lists every known system in report order. bare and moat are the
// references of the ratio columns.
var systems = []system{
	{
		name:    "bare",
		about:   "the command with no isolation: fork, exec, exit, wait",
		prepare: prepareBare,
	},
	{
		name:    "moat",
		about:   "moat run: user/mount/pid/net/ipc/uts/cgroup namespaces, pivoted tmpfs root, seccomp, Landlock, no capabilities",
		prepare: prepareMoat,
	},
	{
		name:    "moat-nolimits",
		about:   "moat run with an operator config that sets no memory, CPU or pids limit: the same sandbox without a cgroup (the cost of the limits is the difference)",
		prepare: prepareMoatNoLimits,
	},
	{
		name: "moat-proxy",
		about: "moat run --net proxy --allow-domain example.com: the same sandbox with the egress proxy's listener in its network namespace " +
			"and the run's own proxy serving it (the cost of the network mode is the difference from moat)",
		prepare: prepareMoatProxy,
	},
	{
		name: "moat-daemon",
		about: "moat run served by a moat daemon running on this host (moat serve, started before the timed rounds): the CLI hands the request and its stdio " +
			"over the daemon's local run socket (--local-daemon require) and the daemon builds the same sandbox with its long-lived runtime",
		prepare: prepareMoatDaemon,
	},
	{
		name:    "bwrap",
		about:   "bubblewrap with every namespace and binds comparable to moat's (read-only /usr and /etc, fresh /proc, /dev, /tmp, /workspace)",
		prepare: prepareBwrap,
	},
	{
		name: "runc",
		about: "runc run on an OCI bundle comparable to moat's sandbox: a user namespace (root mapped to 65536 unprivileged host ids), " +
			"pid, net, ipc, uts, mount and cgroup namespaces, a read-only empty root with the host's /usr and /etc bound read-only " +
			"(/bin, /lib… as the host has them), fresh /proc (runc's masked paths), /dev a tmpfs with runc's default devices, " +
			"tmpfs /tmp and /workspace, no capabilities, no_new_privs, moat's default limits (memory 2 GiB, 2 CPUs, 1024 pids) in a cgroup of its own; " +
			"unlike moat no seccomp filter, no Landlock and the host's /etc unfiltered",
		prepare: prepareOCI(runcRuntime),
	},
	{
		name: "runsc",
		about: "gVisor's runsc run --platform=ptrace --network=none on the same bundle as runc: the command runs on gVisor's user-space kernel " +
			"(the sentry, under ptrace) with a gofer process serving the binds; the gofer runs in the bundle's user namespace, " +
			"the sentry in one of its own as nobody; the limits apply to the sandbox's cgroup; gVisor's own seccomp filter " +
			"confines the sentry and gofer (none is set for the command, no Landlock)",
		prepare: prepareOCI(runscRuntime),
	},
	{
		name: "crun",
		about: "crun run on the same bundle as runc (the same namespaces, user namespace included, binds, limits, no capabilities, " +
			"no seccomp filter, no Landlock); skipped where a probe run fails: crun 1.8 refuses hybrid cgroups (v1 controllers beside a v2 hierarchy)",
		prepare: prepareOCI(crunRuntime),
	},
	{
		name: "moat-repo",
		about: "moat run -w REPO: a generated repository of " + fmt.Sprint(repoEntries) + " entries bound as the workspace; the policy is compiled into " +
			"the sandbox (the repository searched for .git, credential and rc files, which are mounted hidden, read-only or pinned)",
		prepare: prepareMoatRepo,
	},
	{
		name:    "bwrap-repo",
		about:   "bubblewrap as above with the same repository bound read-write at /workspace (no protection inside it)",
		prepare: prepareBwrapRepo,
	},
}

// repoEntries is the size of the generated repository of the *-repo rows.
const repoEntries = 337 // files and directories written by makeRepo

// makeRepo writes a small repository: .git (config, HEAD, 64 object
// directories, no hooks directory), a .env and a key, an rc file, 20
// source directories of 12 files and a nested repository.
func makeRepo() (string, error) {
	dir, err := os.MkdirTemp("", "moat-bench-repo-")
	if err != nil {
		return "", err
	}
	var files []string
	files = append(files, ".git/config", ".git/HEAD", ".env", "deploy/server.pem", ".bashrc", "sub/.git/config", "sub/README")
	for i := range 64 {
		files = append(files, fmt.Sprintf(".git/objects/%02x/", i))
	}
	for d := range 20 {
		for f := range 12 {
			files = append(files, fmt.Sprintf("src/d%02d/f%02d.go", d, f))
		}
	}
	for _, f := range files {
		p := filepath.Join(dir, f)
		if f[len(f)-1] == '/' {
			err = os.MkdirAll(p, 0o755)
		} else if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
			err = os.WriteFile(p, []byte("x\n"), 0o644)
		}
		if err != nil {
			os.RemoveAll(dir)
			return "", err
		}
	}
	return dir, nil
}

func prepareMoatRepo(o *options) (*prepared, error) {
	p, err := prepareMoat(o)
	if err != nil {
		return nil, err
	}
	repo, err := makeRepo()
	if err != nil {
		return nil, err
	}
	p.argv = []string{p.argv[0], "run", "-w", repo, "--", benchCommand}
	p.cleanup = func() { os.RemoveAll(repo) }
	return p, nil
}

func prepareBwrapRepo(o *options) (*prepared, error) {
	p, err := prepareBwrap(o)
	if err != nil {
		return nil, err
	}
	repo, err := makeRepo()
	if err != nil {
		return nil, err
	}
	for i := 0; i+1 < len(p.argv); i++ {
		if p.argv[i] == "--tmpfs" && p.argv[i+1] == "/workspace" {
			p.argv = append(p.argv[:i:i], append([]string{"--bind", repo, "/workspace"}, p.argv[i+2:]...)...)
			break
		}
	}
	p.cleanup = func() { os.RemoveAll(repo) }
	return p, nil
}

func systemNames() []string {
	names := make([]string, len(systems))
	for i, s := range systems {
		names[i] = s.name
	}
	return names
}

func prepareBare(*options) (*prepared, error) {
	if err := checkExecutable(benchCommand); err != nil {
		return nil, skipf("%s: %v", benchCommand, err)
	}
	return &prepared{
		argv:    []string{benchCommand},
		version: machine.Version(benchCommand, "--version"),
	}, nil
}

func prepareMoat(o *options) (*prepared, error) {
	bin, err := filepath.Abs(o.Moat)
	if err != nil {
		return nil, err
	}
	if err := checkExecutable(bin); err != nil {
		return nil, skipf("moat binary %s: %v (build it: CGO_ENABLED=0 go build -o bin/moat ./cmd/moat)", bin, err)
	}
	return &prepared{
		argv:    []string{bin, "run", "--", benchCommand},
		version: machine.Version(bin, "version"),
	}, nil
}

// prepareMoatDaemon starts a moat daemon with a data directory of its
// own and times moat run handed to it over its local run socket.
func prepareMoatDaemon(o *options) (*prepared, error) {
	p, err := prepareMoat(o)
	if err != nil {
		return nil, err
	}
	d, err := moatd.Start(context.Background(), p.argv[0], "moat-bench-startup-", nil, time.Minute)
	if err != nil {
		return nil, fmt.Errorf("starting the daemon: %w", err)
	}
	sock := filepath.Join(d.DataDir(), "run.sock")
	p.argv = []string{p.argv[0], "run", "--local-daemon", "require", "--daemon-socket", sock, "--", benchCommand}
	p.cleanup = func() { _, _ = d.Stop(time.Minute) }
	return p, nil
}

func prepareMoatProxy(o *options) (*prepared, error) {
	p, err := prepareMoat(o)
	if err != nil {
		return nil, err
	}
	p.argv = []string{p.argv[0], "run", "--net", "proxy", "--allow-domain", "example.com", "--", benchCommand}
	return p, nil
}

// noLimitsConfig is an operator config that turns off every cgroup limit.
const noLimitsConfig = "[limits]\nmemory = \"0\"\ncpus = 0\npids = 0\n"

func prepareMoatNoLimits(o *options) (*prepared, error) {
	p, err := prepareMoat(o)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "moat-bench-config-")
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte(noLimitsConfig), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p.argv = []string{p.argv[0], "run", "--config", cfg, "--", benchCommand}
	p.cleanup = func() { os.RemoveAll(dir) }
	return p, nil
}

func prepareBwrap(*options) (*prepared, error) {
	bin, err := exec.LookPath("bwrap")
	if err != nil {
		return nil, skipf("bwrap not found in PATH (apt-get install -y bubblewrap)")
	}
	if bin, err = filepath.Abs(bin); err != nil {
		return nil, err
	}
	return &prepared{
		argv:    machine.BwrapArgs(bin, "/", benchCommand),
		version: machine.Version(bin, "--version"),
	}, nil
}

// checkExecutable reports why path cannot be run, or nil.
func checkExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return errors.New("not found")
		}
		return err
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return errors.New("not an executable file")
	}
	return nil
}
