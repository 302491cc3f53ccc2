package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/moat-sandbox/moat/config"
	"github.com/moat-sandbox/moat/display"
	"github.com/moat-sandbox/moat/output"
	"github.com/moat-sandbox/moat/policy"
	moatruntime "github.com/moat-sandbox/moat/runtime"
	"github.com/moat-sandbox/moat/sandbox"
	"github.com/moat-sandbox/moat/templates"
)

type runFlags struct {
	config      string
	memory      string
	cpus        float64
	pids        int64
	disk        string
	outputLimit string
	secrets     []string
	spill       string
	workspace   string
	ro, rw      []string
	interactive bool
	tty         bool
	env         []string
	cwd         string
	timeout     time.Duration
	json        bool
	sh          string

	profile          string
	allow, ask, deny []string
	approvalTimeout  time.Duration

	net                       string
	allowDomains, denyDomains []string

	template, store string
	runtime         string

	// localDaemon and daemonSocket choose whether a running local daemon
	// serves the run (localrun_linux.go); raw are the arguments as given.
	localDaemon  string
	daemonSocket string
	raw          []string
}

const runLong = `Run one command in a fresh sandbox and stream its output.

The command runs as uid 1000 ("sandbox") in new user, mount, pid, net, ipc,
uts and cgroup namespaces, with no capabilities, no_new_privs, Landlock and
a seccomp filter. It sees the host's /usr (and /bin, /lib… links) read-only,
a filtered /etc, a minimal /dev, a masked /proc, a private /tmp and home
(tmpfs), /workspace, and nothing else of the host. The host environment
never reaches the command.

Network (--net): none (the default) is loopback only, no route anywhere.
proxy gives the sandbox one way out, moat's egress proxy at 127.0.0.1:3128
inside it (HTTP, CONNECT and SOCKS5; HTTP_PROXY, HTTPS_PROXY, ALL_PROXY,
NO_PROXY and pip's and npm's settings are set), which admits only the
allowlist: --allow-domain entries and the allow Net rules of the managed
and user policy files, minus deny and ask rules (--deny-domain, any layer).
'*.example.com' matches subdomains, not example.com. The proxy resolves
names itself and refuses loopback, private, link-local, CGNAT, multicast,
metadata and the host's own addresses unless an entry names them (an IP or
a CIDR such as 10.1.0.0/16). A refusal is a 403 with an X-Proxy-Error
header the command can read, and a line on stderr. open shares the host's
network; only a managed policy with open_network = true permits it.

Limits (--memory, --cpus, --pids, --disk) are enforced by cgroups and the
size of the sandbox's tmpfs; defaults come from the template (below), then
the operator config (/etc/moat/config.toml: memory 2 GiB, cpus 2, pids
1024, disk 1 GiB).

Templates (--template NAME): the sandbox's root filesystem is a template
of the store ('moat template import', 'moat template ls'; --store, default
the config's [store] dir, else ` + templates.DefaultDir + `) instead of the
host's system directories, read-only under a private writable layer; its
environment, working directory and limits are the defaults of the call.

Policy: before anything runs, the command is decided by the policy layers
(managed /etc/moat/policy.toml, the workspace's .moat/policy.toml, your
~/.config/moat/policy.toml, then --allow/--ask/--deny; only the managed and
user files can widen, e.g. to the trusted profile). A deny exits 126 with
the rule and its file:line; an ask asks on the terminal (no terminal or no
answer within --approval-timeout denies). The policy is also compiled into
the sandbox: credentials are hidden, .git hooks and config, shell rc and
policy files are read-only; 'moat policy explain' shows what the kernel
enforces and what only the policy engine does.

Signals: SIGTERM, SIGINT, SIGHUP or SIGQUIT sent to moat is forwarded to
the command's process group; if the command has not ended within the kill
grace (kill_grace in the config, default 2 s, as for --timeout), or a
second such signal comes, the whole sandbox is killed (every process of
it, children in sessions of their own included) and moat exits 128+N, N
being the signal it got (143 for SIGTERM, 130 SIGINT, 129 SIGHUP), with
exit_reason "killed". A command that ends by itself meanwhile gives its
own code. Under -t, ^C reaches the command through its terminal (the
sandbox's pty), not as a signal to moat.

Exit codes: the command's own code; 128+N if a signal N ended it, or moat
got signal N and the command outlived the grace; 137 with exit_reason
"oom" when the memory limit was hit (the JSON's oom_kills counts every
process the OOM killer ended, a child the command survived too); 124 on
timeout (the whole process tree is killed, after the kill grace for
SIGTERM); 125 if the sandbox
could not be set up (bad flag, bad path or limit, host lacking a
protection, command line over 1 MiB, a bind the policy refuses); 126 if
the command is not executable or the policy denied it (exit_reason
"denied"); 127 if it was not found. With --json the same code is the exit
status and the JSON's exit_code (a refused request prints a setup_error
result).

Examples:
  moat run -- echo hello
  moat run -w ./project --sh 'make test'
  moat run --ro ~/.gitconfig:/home/sandbox/.gitconfig -w . -- git status
  moat run -it -- bash`

func runCommand() *command { return newRunCommand(&runFlags{}) }

// newRunCommand is moat run with its flags parsed into f.
func newRunCommand(f *runFlags) *command {
	return &command{
		rawArgs: &f.raw,
		name:    "run",
		usage:   "[flags] -- COMMAND [ARG...]   |   moat run [flags] --sh 'SHELL COMMAND'",
		short:   "Run one command in a fresh sandbox",
		long:    runLong,
		setup: func(fl *pflag.FlagSet) {
			fl.StringVarP(&f.workspace, "workspace", "w", "", "host `DIR` mounted read-write at /workspace (default: a fresh in-memory dir, gone afterwards)")
			fl.StringArrayVar(&f.ro, "ro", nil, "extra read-only bind `HOST[:PATH]` (repeatable)")
			fl.StringArrayVar(&f.rw, "rw", nil, "extra writable bind `HOST[:PATH]` (repeatable)")
			fl.BoolVarP(&f.interactive, "interactive", "i", false, "keep stdin attached (default: stdin is /dev/null)")
			fl.BoolVarP(&f.tty, "tty", "t", false, "give the command a new terminal inside the sandbox, bridged to yours")
			fl.StringArrayVarP(&f.env, "env", "e", nil, "set `K=V` in the command's environment (repeatable)")
			fl.StringVar(&f.cwd, "cwd", "", "working `PATH` inside the sandbox (default /workspace, or the template's workdir)")
			fl.DurationVar(&f.timeout, "timeout", 0, "kill the whole process tree after `DURATION` (exit 124); 0 means none")
			fl.BoolVar(&f.json, "json", false, "capture output and print one JSON result object instead of streaming")
			fl.StringVar(&f.sh, "sh", "", "run `STRING` with /bin/sh -c inside the sandbox")
			fl.StringVar(&f.memory, "memory", "", "memory limit `SIZE` (e.g. 512m, 2GiB); swap is off; past it the OOM killer ends the call (exit 137, exit_reason oom); oom_kills in --json counts every process it killed")
			fl.Float64Var(&f.cpus, "cpus", 0, "CPU quota in `CPUS` (e.g. 0.5)")
			fl.Int64Var(&f.pids, "pids", 0, "maximum number of processes and threads `N`")
			fl.StringVar(&f.disk, "disk", "", "`SIZE` of the one tmpfs behind /tmp, home, /dev/shm and an in-memory workspace (writes past it get ENOSPC)")
			fl.StringVar(&f.outputLimit, "output-limit", "", "cap each captured stream at `BYTES`: the first and last halves are kept (--json)")
			fl.StringArrayVar(&f.secrets, "secret", nil, "hand the command a secret read from a host file, `NAME=@FILE`: inside it is the sealed in-memory file $NAME_FILE and it is redacted from output (repeatable)")
			fl.StringVar(&f.spill, "spill", "", "with --json, write a stream that passes the output limit in full to a file in `DIR` (named in the result)")
			fl.StringVar(&f.profile, "profile", "", "policy profile `NAME`: untrusted narrows; trusted only where a user or managed policy file declares it")
			fl.StringArrayVar(&f.allow, "allow", nil, "per-call allow `RULE` (repeatable; can only narrow, grants nothing)")
			fl.StringArrayVar(&f.ask, "ask", nil, "per-call ask `RULE`, e.g. 'Exec(git push*)' (repeatable)")
			fl.StringArrayVar(&f.deny, "deny", nil, "per-call deny `RULE`, e.g. 'Read(secrets/**)' (repeatable)")
			fl.DurationVar(&f.approvalTimeout, "approval-timeout", time.Minute, "how long an ask rule waits for an answer on the terminal before it denies")
			fl.StringVar(&f.net, "net", "none", "network `MODE`: none (loopback only), proxy (the egress proxy is the only way out), open (host network; managed policy must permit)")
			fl.StringArrayVar(&f.allowDomains, "allow-domain", nil, "with --net proxy, admit `DOMAIN` ('*.example.com' for subdomains, an IP, or a CIDR like 10.0.0.0/8) (repeatable)")
			fl.StringArrayVar(&f.denyDomains, "deny-domain", nil, "refuse `DOMAIN` even where an allowlist admits it (repeatable)")
			fl.StringVar(&f.config, "config", "", "operator config `FILE` with default limits (default $MOAT_CONFIG or "+config.DefaultPath+")")
			fl.StringVar(&f.template, "template", "", "run on the root filesystem of template `NAME` (default host: the host's system directories; see 'moat template')")
			fl.StringVar(&f.store, "store", "", "template store `DIR` of --template (default the config's [store] dir, else "+templates.DefaultDir+")")
			fl.StringVar(&f.runtime, "runtime", "", runtimeFlagUsage())
			fl.StringVar(&f.localDaemon, "local-daemon", localNever, "`MODE` of handing the run to a moat daemon running on this host: never (default: run here), auto (when one runs and can serve it, else run here), require (fail with 125 when none can)")
			fl.StringVar(&f.daemonSocket, "daemon-socket", "", "the local daemon's run `SOCKET` (default $MOAT_RUN_SOCKET, else "+defaultRunSocket+")")
		},
		run: func(ctx context.Context, args []string) error {
			if code, served, err := runLocal(ctx, f, args); err != nil {
				return runOutcome(f, err, os.Stdout)
			} else if served {
				return &exitError{code: code}
			}
			return runOutcome(f, runRun(ctx, f, args, processIO()), os.Stdout)
		},
	}
}

// runOutcome completes runRun's error: with --json a caller always gets
// one result object on stdout, a refused request included (exit 125).
func runOutcome(f *runFlags, err error, stdout io.Writer) error {
	var ee *exitError
	if err != nil && f.json && !errors.As(err, &ee) {
		if perr := printJSONTo(stdout, sandbox.SetupResult(err)); perr != nil {
			return perr
		}
		return &exitError{code: sandbox.ExitSetupFailed}
	}
	return err
}

// parseBind splits HOST[:PATH].
func parseBind(v string, writable bool) (sandbox.Bind, error) {
	src, dst, _ := strings.Cut(v, ":")
	if src == "" {
		return sandbox.Bind{}, fmt.Errorf("%w: bind %q has no host path", sandbox.ErrInvalidSpec, v)
	}
	return sandbox.Bind{Source: src, Target: dst, Writable: writable}, nil
}

// runRun runs one moat run with the parsed flags f and the command line
// args; rio says where its stdio, terminal, signals and runtime are.
func runRun(ctx context.Context, f *runFlags, args []string, rio *runIO) error {
	if f.sh != "" && len(args) > 0 {
		return fmt.Errorf("%w: give either --sh or a command after --, not both", sandbox.ErrInvalidSpec)
	}
	if f.sh != "" {
		args = []string{"/bin/sh", "-c", f.sh}
	}
	if len(args) == 0 {
		return fmt.Errorf("%w: no command (moat run -- COMMAND, or --sh 'STRING')", sandbox.ErrInvalidSpec)
	}
	if f.timeout < 0 {
		return fmt.Errorf("%w: --timeout must not be negative", sandbox.ErrInvalidSpec)
	}
	defaults, err := config.Load(f.config)
	if err != nil {
		return err
	}
	rtName, err := runtimeName(f.runtime, defaults)
	if err != nil {
		return err
	}
	limits, err := f.limits()
	if err != nil {
		return err
	}
	spec := &sandbox.Spec{Workspace: f.workspace, Limits: limits}
	tmpl, err := f.applyTemplate(spec, defaults)
	if err != nil {
		return err
	}
	for _, v := range f.ro {
		b, err := parseBind(v, false)
		if err != nil {
			return err
		}
		spec.Binds = append(spec.Binds, b)
	}
	for _, v := range f.rw {
		b, err := parseBind(v, true)
		if err != nil {
			return err
		}
		spec.Binds = append(spec.Binds, b)
	}
	proc := &sandbox.Process{Args: args, Env: f.env, Cwd: f.cwd, TTY: f.tty, OutputLimit: defaults.OutputLimit, SpillDir: f.spill}
	if f.outputLimit != "" {
		n, err := config.ParseSize(f.outputLimit)
		if err != nil || n <= 0 || n > 1<<31 {
			return fmt.Errorf("%w: --output-limit: must be a size above 0 and at most 2 GiB", sandbox.ErrInvalidSpec)
		}
		proc.OutputLimit = int(n)
	}
	if f.spill != "" && !f.json {
		return fmt.Errorf("%w: --spill needs --json (without it output streams through, nothing is truncated)", sandbox.ErrInvalidSpec)
	}
	if proc.Secrets, err = readSecrets(f.secrets); err != nil {
		return err
	}
	// red redacts the secrets from what moat itself writes about the run
	// (its error lines, the proxy's refusals and events); the runtime
	// redacts the output streams with the same forms.
	red := secretMatcher(proc.Secrets)
	if !f.json {
		proc.Stdout, proc.Stderr = rio.stdout, rio.stderr
	}
	if f.interactive {
		proc.Stdin = rio.stdin
	}
	if f.tty {
		restore, err := setupTTY(proc, rio.stdin)
		if err != nil {
			return err
		}
		defer restore()
	}
	if f.profile != "" && f.profile != string(policy.Untrusted) && f.profile != string(policy.Trusted) {
		return fmt.Errorf("%w: --profile: want untrusted or trusted, not %q", sandbox.ErrInvalidSpec, f.profile)
	}
	if f.approvalTimeout <= 0 {
		return fmt.Errorf("%w: --approval-timeout must be above 0", sandbox.ErrInvalidSpec)
	}
	if _, err := sandbox.ParseNetMode(f.net); err != nil {
		return fmt.Errorf("--net: %w", err)
	}
	spec, rp, err := applyPolicy(f, spec, args, rio)
	if err != nil {
		return err
	}
	if rp.Effect != policy.Allow {
		res := sandbox.DeniedResult(deniedReason(rp))
		if f.json {
			if err := printJSONTo(rio.stdout, runResult{Result: res, Policy: rp}); err != nil {
				return err
			}
		} else {
			fmt.Fprintln(rio.stderr, "moat:", display.String(res.Error))
		}
		return &exitError{code: res.ExitCode}
	}
	netw, err := networkSetup(f, spec, rp.eff, defaults, red, rio)
	if err != nil {
		return err
	}
	defer netw.close()
	// From here on SIGTERM, SIGINT, SIGHUP and SIGQUIT go to the command.
	ctx, sw := watchSignals(ctx, proc, defaults.KillGrace, rio)
	defer sw.stop()

	rt, closeRT := rio.runtime, func() {}
	if rt == nil || rio.rtName != rtName {
		if rt, closeRT, err = openRuntime(rtName, moatruntime.Options{Defaults: defaults.Limits, KillGrace: defaults.KillGrace}); err != nil {
			return err
		}
	}
	defer closeRT()
	if f.timeout == 0 {
		f.timeout = defaults.Timeout
	}
	if f.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.timeout)
		defer cancel()
	}
	res, err := rt.Run(ctx, spec, proc)
	sw.stop()
	netw.close()
	if sig, killed := sw.outcome(res); killed {
		// moat got a signal and the command outlived the grace: the
		// run ends as that signal would have ended moat.
		err = nil
		if res == nil {
			res = &sandbox.Result{TimeToFirstOutputMs: -1}
		}
		res.ExitCode, res.ExitReason, res.Signal = sandbox.ExitSignalBase+int(sig), sandbox.ReasonKilled, 0
		res.Error = fmt.Sprintf("got %s; the command did not exit within the %s grace; the process tree was killed", signalName(sig), defaults.KillGrace)
	}
	if res != nil {
		res.Error = red.RedactString(res.Error)
	}
	if err != nil && red != nil {
		err = &redactedError{msg: red.RedactString(err.Error()), err: err}
	}
	if f.json {
		if perr := printJSONTo(rio.stdout, runResult{Result: res, Template: tmpl, Policy: rp, Network: netw.view()}); perr != nil {
			return perr
		}
		return &exitError{code: res.ExitCode}
	}
	if err != nil {
		return err
	}
	if res.Error != "" && res.ExitReason != sandbox.ReasonTimeout {
		fmt.Fprintln(rio.stderr, "moat:", display.String(res.Error))
	}
	if res.ExitReason == sandbox.ReasonTimeout {
		fmt.Fprintf(rio.stderr, "moat: timed out after %s; the process tree was killed\n", f.timeout)
	}
	return &exitError{code: res.ExitCode}
}

// applyTemplate resolves --template in the store and makes spec a sandbox
// of it: its root, its environment and working directory, and its limits
// where the flags left them unset. It returns the template's name ("" when
// --template was not given).
func (f *runFlags) applyTemplate(spec *sandbox.Spec, d config.Defaults) (string, error) {
	if f.template == "" || f.template == templates.HostTemplate && f.store == "" {
		return f.template, nil
	}
	st, err := openStore(f.store, d)
	if err != nil {
		return "", fmt.Errorf("%w: --template %s: %v", sandbox.ErrInvalidSpec, f.template, err)
	}
	t, err := st.Template(f.template)
	if errors.Is(err, templates.ErrNotFound) {
		return "", fmt.Errorf("%w: --template %s: no such template in %s (see 'moat template ls')", sandbox.ErrInvalidSpec, f.template, st.Dir())
	}
	if err != nil {
		return "", fmt.Errorf("%w: --template %s: %v", sandbox.ErrInvalidSpec, f.template, err)
	}
	spec.Root = st.Root(t)
	spec.Env, spec.Workdir = t.Env, t.Workdir
	spec.Limits = spec.Limits.Or(t.Limits)
	return t.Name, nil
}

// limits reads the limit flags; unset ones are zero (the config's
// defaults apply).
func (f *runFlags) limits() (sandbox.Limits, error) {
	var l sandbox.Limits
	var err error
	if f.memory != "" {
		if l.MemoryBytes, err = config.ParseSize(f.memory); err != nil || l.MemoryBytes <= 0 {
			return l, fmt.Errorf("%w: --memory: %s", sandbox.ErrInvalidSpec, sizeErr(err))
		}
	}
	if f.disk != "" {
		if l.DiskBytes, err = config.ParseSize(f.disk); err != nil || l.DiskBytes <= 0 {
			return l, fmt.Errorf("%w: --disk: %s", sandbox.ErrInvalidSpec, sizeErr(err))
		}
	}
	if f.cpus < 0 || f.pids < 0 {
		return l, fmt.Errorf("%w: --cpus and --pids must not be negative", sandbox.ErrInvalidSpec)
	}
	l.CPUs, l.Pids = f.cpus, f.pids
	return l, nil
}

func sizeErr(err error) string {
	if err != nil {
		return err.Error()
	}
	return "must be above 0"
}

// maxSecretFile bounds what --secret reads from a host file.
const maxSecretFile = 64 << 10

// readSecrets reads NAME=@FILE secrets. A literal value is refused: on the
// command line it would be visible to every user through ps.
func readSecrets(specs []string) ([]sandbox.Secret, error) {
	var out []sandbox.Secret
	for _, spec := range specs {
		name, ref, ok := strings.Cut(spec, "=")
		path, isFile := strings.CutPrefix(ref, "@")
		if !ok || name == "" || !isFile || path == "" {
			return nil, fmt.Errorf("%w: --secret %q: want NAME=@FILE (a literal value on the command line would be visible in ps)", sandbox.ErrInvalidSpec, name)
		}
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("%w: --secret %s: %v", sandbox.ErrInvalidSpec, name, err)
		}
		b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%w: --secret %s: %v", sandbox.ErrInvalidSpec, name, err)
		}
		if len(b) > maxSecretFile {
			return nil, fmt.Errorf("%w: --secret %s: file larger than %d bytes", sandbox.ErrInvalidSpec, name, maxSecretFile)
		}
		if err := output.CheckSecret(b); err != nil {
			return nil, fmt.Errorf("%w: --secret %s: the file %v", sandbox.ErrInvalidSpec, name, err)
		}
		out = append(out, sandbox.Secret{Name: name, Value: b})
	}
	return out, nil
}

// secretMatcher compiles the secrets' redaction (nil when there are none).
func secretMatcher(secrets []sandbox.Secret) *output.Matcher {
	m := make(map[string][]byte, len(secrets))
	for _, s := range secrets {
		m[s.Name] = s.Value
	}
	return output.NewMatcher(m)
}

// redactedError is an error whose text had secrets redacted; errors.Is
// and errors.As still see the original.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// setupTTY puts the caller's terminal (if stdin is one) in raw mode and
// forwards its size; the command gets a new pty inside the sandbox, never
// this terminal.
func setupTTY(proc *sandbox.Process, stdin *os.File) (func(), error) {
	// TERM is the only host variable a terminal session takes along.
	if t := os.Getenv("TERM"); t != "" {
		proc.Env = append([]string{"TERM=" + t}, proc.Env...)
	}
	fd := int(stdin.Fd())
	if !term.IsTerminal(fd) {
		return func() {}, nil
	}
	if w, h, err := term.GetSize(fd); err == nil {
		proc.InitialSize = &sandbox.WinSize{Rows: uint16(h), Cols: uint16(w)}
	}
	state, err := term.MakeRaw(fd)
	if err != nil {
		return nil, fmt.Errorf("terminal raw mode: %w", err)
	}
	resize := make(chan sandbox.WinSize, 1)
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	go func() {
		for range winch {
			if w, h, err := term.GetSize(fd); err == nil {
				select {
				case resize <- sandbox.WinSize{Rows: uint16(h), Cols: uint16(w)}:
				default:
				}
			}
		}
	}()
	proc.Resize = resize
	return func() {
		signal.Stop(winch)
		_ = term.Restore(fd, state)
	}, nil
}
