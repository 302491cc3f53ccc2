package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/config"
	"github.com/moat-sandbox/moat/sandbox"
)

// moat build: the command line (this file), the source sent
// (build_source.go), the run and its end (build_run.go), the artifacts
// written on the host (build_out.go) and the summary (build_print.go).

const buildLong = `Build untrusted source in a sandbox: the source package is checked and
copied into the build's private layer by the daemon, the build command
runs there under limits and a timeout, and the files it leaves at the
--output paths come back as artifacts, with their sha256.

SOURCE is a directory or a tar file (plain or gzip). A directory is sent
as a tar made here, following no symlink inside it (symlinks travel as
symlinks); a FIFO, socket or device in it refuses the build before
anything runs (source_bad_type). SOURCE itself is your path: a symlink
naming it is followed, as for any program's argument. A tar file is sent
as it is; the daemon checks it. The daemon refuses, before anything runs,
a package with an absolute or ".." path, a symlink or hardlink leading out
of it, a device or FIFO, more entries than --max-files, a file above
--max-file-bytes or files adding up above --max-total-bytes (defaults and
ceilings: the daemon's [build] configuration; the flags only narrow);
setuid and setgid bits are stripped.

The command runs in /src (the source, writable), as uid 1000, with
HOME=/build/home, TMPDIR=/build/tmp, XDG_CACHE_HOME=/build/cache,
LANG=C.UTF-8, SOURCE_DATE_EPOCH (315532800, 1980-01-01, unless --env sets
it; every source file has that mtime), PATH=/usr/local/sbin:…:/bin, then
the --env and --pass-env variables: nothing else of this environment gets
in. The network is none (loopback only) unless --net proxy, which gives
the egress proxy and the --allow-domain entries. Everything it writes
counts against --disk; past --timeout (default 10 minutes) the whole tree
is killed.

Output: the command's output streams to stderr as it comes (as moat run
passes a command's output through); at the end a summary goes to stdout:
status, reason, source digest, toolchain, each artifact as "SHA256  SIZE
PATH", duration and peak memory. --json prints the build (the daemon's
api.Build) on stdout instead, and does not stream the log (its head and
tail are in the JSON).

Artifacts are written under --out (default ./moat-out, made 0755 if
absent) at their paths relative to /src. Below --out nothing is followed:
a directory on the way that is a symlink, or a symlink or a directory
where a file goes, refuses the artifact; an existing regular file is
replaced (written beside it, then renamed over it). Each file gets the
artifact's permission bits (never setuid or setgid) and its sha256 is
checked as it is written.

Where it runs: a daemon when MOAT_URL is set (MOAT_MODE=http) or one
answers at http://127.0.0.1:7070 with a token moat can read; otherwise, or
with --local (MOAT_MODE=stdio), a private daemon started for this command
('moat serve --stdio', as root), which deletes the build once its
artifacts are written. ^C: a private daemon's build is stopped and
deleted; a daemon's build goes on (its id is printed) until its end or
DELETE /v1/builds/ID. Either way moat exits 130.

Exit codes: 0 succeeded; 1 failed (compile_failed, oom, output_missing,
output_too_large); 2 refused: the source package (source_*); 124 timeout;
125 moat could not run it (bad command line, daemon unreachable or
refusing the request, setup_failed, interrupted, an artifact that could
not be written); 126 policy_denied; 130 interrupted.

Examples:
  moat build --output hello ./hello -- gcc -O2 -o hello hello.c
  moat build --output dist --json ./pkg.tar.gz -- python3 -m pip wheel --no-deps --no-build-isolation --no-index -w dist .
  moat build --env PATH=/usr/local/go/bin:/usr/bin:/bin --env GOFLAGS=-trimpath --output app ./app -- go build -o app .`

// buildFlags are the flags of moat build.
type buildFlags struct {
	template      string
	outputs       []string
	out           string
	timeout       time.Duration
	memory, disk  string
	cpus          float64
	pids          int64
	env, passEnv  []string
	net           string
	allowDomains  []string
	maxFiles      int
	maxFileBytes  string
	maxTotalBytes string
	json          bool
	local         bool
}

// defaultBuildOut is where artifacts land without --out.
const defaultBuildOut = "moat-out"

// buildCommand is `moat build`.
func buildCommand() *command {
	f := &buildFlags{}
	var fl *pflag.FlagSet
	return &command{
		name:  "build",
		usage: "[flags] SOURCE -- BUILD COMMAND [ARG...]",
		short: "Build untrusted source in a sandbox; collect its artifacts",
		long:  buildLong,
		setup: func(fs *pflag.FlagSet) {
			fl = fs
			f.declare(fs)
		},
		run: func(ctx context.Context, args []string) error {
			inv, err := f.invocation(args, fl.ArgsLenAtDash(), os.LookupEnv)
			if err != nil {
				return err
			}
			return runBuild(ctx, inv, sandboxIO{os.Stdin, os.Stdout, os.Stderr})
		},
	}
}

func (f *buildFlags) declare(fl *pflag.FlagSet) {
	fl.StringVar(&f.template, "template", "", "the toolchain: run on template `NAME` of the daemon (default host: the host's /usr)")
	fl.StringArrayVar(&f.outputs, "output", nil, "collect `PATH` (relative to /src: a file, or a directory's files) as artifacts when the command exits 0 (repeatable)")
	fl.StringVar(&f.out, "out", defaultBuildOut, "write the artifacts under `DIR` (made 0755 if absent)")
	fl.DurationVar(&f.timeout, "timeout", 0, "kill the whole build after `DURATION` (exit 124); 0: the daemon's default (10m)")
	fl.StringVar(&f.memory, "memory", "", "memory limit `SIZE` (e.g. 512m, 2GiB); past it the OOM killer ends the build (reason oom)")
	fl.Float64Var(&f.cpus, "cpus", 0, "CPU quota in `CPUS` (e.g. 0.5)")
	fl.Int64Var(&f.pids, "pids", 0, "maximum number of processes and threads `N`")
	fl.StringVar(&f.disk, "disk", "", "`SIZE` of what the build may write (its /src, /build, /tmp…): past it writes get ENOSPC")
	fl.StringArrayVarP(&f.env, "env", "e", nil, "set `K=V` in the command's environment (repeatable)")
	fl.StringArrayVar(&f.passEnv, "pass-env", nil, "pass the variable `NAME` of this environment to the command (repeatable; an unset one is an error)")
	fl.StringVar(&f.net, "net", "none", "network `MODE`: none (loopback only) or proxy (the egress proxy, --allow-domain only)")
	fl.StringArrayVar(&f.allowDomains, "allow-domain", nil, "with --net proxy, admit `DOMAIN` ('*.example.com' for subdomains, an IP, or a CIDR) (repeatable)")
	fl.IntVar(&f.maxFiles, "max-files", 0, "refuse a source of more than `N` entries (files, directories, symlinks); 0: the daemon's cap")
	fl.StringVar(&f.maxFileBytes, "max-file-bytes", "", "refuse a source with a file above `SIZE`; default the daemon's cap")
	fl.StringVar(&f.maxTotalBytes, "max-total-bytes", "", "refuse a source whose files add up above `SIZE`; default the daemon's cap")
	fl.BoolVar(&f.json, "json", false, "print the build as JSON on stdout instead of streaming the log and a summary")
	fl.BoolVar(&f.local, "local", false, "build in a private daemon started for this command, even when a daemon answers")
}

// buildInvocation is one moat build, its command line checked: the
// request (without its source), the SOURCE path and the host side.
type buildInvocation struct {
	req    api.CreateBuild
	source string
	out    string
	json   bool
	local  bool
}

// lookupEnv is os.LookupEnv (a test's own environment in tests).
type lookupEnv func(string) (string, bool)

// invocation checks the command line: args are the positional words and
// dash the number of them before "--" (-1: no "--"); lookup reads
// --pass-env's variables. Every failure is a usage error (exit 125).
func (f *buildFlags) invocation(args []string, dash int, lookup lookupEnv) (*buildInvocation, error) {
	switch {
	case dash < 0 && len(args) <= 1:
		return nil, usageError("no build command: moat build [flags] SOURCE -- COMMAND [ARG...]")
	case dash < 0:
		return nil, usageError("the build command goes after --: moat build [flags] SOURCE -- COMMAND [ARG...]")
	case dash == 0:
		return nil, usageError("no SOURCE before --: moat build [flags] SOURCE -- COMMAND [ARG...]")
	case dash > 1:
		return nil, usageError("one SOURCE before --, not %d words (%q)", dash, args[:dash])
	case dash == len(args):
		return nil, usageError("no build command after --")
	}
	inv := &buildInvocation{source: args[0], out: f.out, json: f.json, local: f.local}
	if inv.source == "" {
		return nil, usageError("SOURCE is empty")
	}
	if inv.out == "" {
		return nil, usageError("--out is empty")
	}
	req := &inv.req
	req.Template, req.Command, req.Outputs = f.template, args[1:], f.outputs
	for _, o := range f.outputs {
		if o == "" {
			return nil, usageError("--output is empty")
		}
	}
	if f.timeout < 0 {
		return nil, usageError("--timeout must not be negative")
	}
	if f.timeout > 0 {
		// Round up: a timeout below a millisecond is not "none".
		req.TimeoutMs = int64((f.timeout + time.Millisecond - 1) / time.Millisecond)
	}
	rf := runFlags{memory: f.memory, disk: f.disk, cpus: f.cpus, pids: f.pids}
	lim, err := rf.limits()
	if err != nil {
		return nil, usageError("%s", strings.TrimPrefix(err.Error(), sandbox.ErrInvalidSpec.Error()+": "))
	}
	req.MemoryBytes, req.DiskBytes, req.CPUs, req.Pids = lim.MemoryBytes, lim.DiskBytes, lim.CPUs, lim.Pids
	if req.Env, err = buildEnv(f.env, f.passEnv, lookup); err != nil {
		return nil, err
	}
	switch f.net {
	case "none", "":
		if len(f.allowDomains) > 0 {
			return nil, usageError("--allow-domain needs --net proxy")
		}
	case "proxy":
		req.AllowDomains = f.allowDomains
	default:
		return nil, usageError("--net %q: want none or proxy", f.net)
	}
	req.Net = f.net
	if f.maxFiles < 0 {
		return nil, usageError("--max-files must not be negative")
	}
	req.MaxFiles = f.maxFiles
	if req.MaxFileBytes, err = sizeFlag("--max-file-bytes", f.maxFileBytes); err != nil {
		return nil, err
	}
	if req.MaxTotalBytes, err = sizeFlag("--max-total-bytes", f.maxTotalBytes); err != nil {
		return nil, err
	}
	return inv, nil
}

// buildEnv is the command's environment as the flags give it: the --env
// pairs, then NAME=VALUE for each --pass-env NAME, read with lookup.
func buildEnv(env, pass []string, lookup lookupEnv) ([]string, error) {
	out := make([]string, 0, len(env)+len(pass))
	for _, kv := range env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageError("--env %q: want K=V", kv)
		}
		out = append(out, kv)
	}
	for _, name := range pass {
		if name == "" || strings.ContainsAny(name, "=\x00") {
			return nil, usageError("--pass-env %q: want a variable's NAME", name)
		}
		v, ok := lookup(name)
		if !ok {
			return nil, usageError("--pass-env %s: the variable is not set", name)
		}
		out = append(out, name+"="+v)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// sizeFlag reads a size flag's value ("" for unset: 0).
func sizeFlag(name, v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := config.ParseSize(v)
	if err != nil || n <= 0 || n == math.MaxInt64 {
		return 0, usageError("%s: %s", name, sizeErr(err))
	}
	return n, nil
}

// Exit codes of moat build (besides 0, 124, 125, 126 and 130, shared with
// the other commands).
const (
	exitBuildFailed  = 1 // the command or its outputs failed
	exitBuildRefused = 2 // the source package was refused
)

// buildExit is the exit code of an ended build.
func buildExit(b *api.Build) int {
	switch b.Status {
	case api.BuildSucceeded:
		return 0
	case api.BuildTimeout:
		return sandbox.ExitTimeout
	case api.BuildRefused:
		if b.Reason == api.ReasonPolicyDenied {
			return sandbox.ExitNotExecutable
		}
		return exitBuildRefused
	case api.BuildFailed:
		switch b.Reason {
		case api.ReasonSetupFailed, api.ReasonInterrupted:
			return sandbox.ExitSetupFailed
		}
		return exitBuildFailed
	}
	return sandbox.ExitSetupFailed
}

// errBuildOutput marks a failure to write an artifact under --out.
var errBuildOutput = errors.New("writing the artifacts")

// buildOutError is the failure to write the artifact p under --out.
func buildOutError(p string, err error) error {
	return fmt.Errorf("%w: %s: %w", errBuildOutput, p, err)
}
