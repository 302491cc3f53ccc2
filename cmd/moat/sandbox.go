package main

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"net"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/pflag"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/config"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/sandbox"
)

const sandboxLong = `Manage the sandboxes of a running moat daemon ('moat serve') through its
HTTP API: create long-lived sandboxes, run commands in them, copy files in
and out, read the output of background processes, delete them.

Commands:
  create   Create a sandbox and print its id
  ls       List sandboxes
  exec     Run a command in a sandbox and stream its output
  start    Start a command in the background and print its process id
  ps       List a sandbox's processes
  logs     Print the output of a background process
  cp       Copy a file or directory between the host and a sandbox
  snapshot Capture a sandbox's filesystem into a snapshot and print its id
  restore  Roll a sandbox back to a snapshot
  rm       Delete sandboxes

Run 'moat sandbox COMMAND --help' for a command's flags. Snapshots are
listed, deleted and forked into new sandboxes with 'moat snapshot'.

Connection: MOAT_URL (default http://127.0.0.1:7070) and the API token
MOAT_TOKEN, or the file MOAT_TOKEN_FILE (default /var/lib/moat/token).
MOAT_MODE=stdio is refused: a private daemon would end, and delete its
sandboxes, when this command ends.

Policy: the daemon judges every exec, start and file operation by the
sandbox's policy (its policy files, then --ask/--deny rules of the
sandbox and of the call, which can only narrow). A command an ask rule
holds waits until an approver answers ('moat approvals'); exec says so on
stderr.

Exit codes: exec returns the command's own code (as 'moat run' does: 124
timeout, 126, 127, 128+N…); exec and start exit 126 with the reason on
stderr when the policy denies the command (or its approval was denied or
expired); 125 when the daemon cannot be reached or refuses the request;
130 when interrupted; otherwise 0.`

// sandboxIO is what the sandbox commands read and write.
type sandboxIO struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

// sandboxCommand is `moat sandbox`: a client of a running daemon.
func sandboxCommand() *command {
	return &command{
		name:  "sandbox",
		usage: "COMMAND [flags] [ARGS...]",
		short: "Manage the sandboxes of a running daemon (create, exec, cp…)",
		long:  sandboxLong,
		setup: func(*pflag.FlagSet) {},
		run: func(ctx context.Context, args []string) error {
			return runSandbox(ctx, args, sandboxIO{os.Stdin, os.Stdout, os.Stderr})
		},
	}
}

// sandboxSubcommands are the commands of `moat sandbox`, reading and
// writing sio. Those with interspersed set take the command line of exec
// and start after --.
func sandboxSubcommands(sio sandboxIO) []*command {
	return []*command{sbCreate(sio), sbList(sio), sbExec(sio), sbStart(sio), sbPs(sio), sbLogs(sio), sbCopy(sio), sbSnapshot(sio), sbRestore(sio), sbRemove(sio)}
}

// runSandbox dispatches `moat sandbox COMMAND ARGS...`.
func runSandbox(ctx context.Context, args []string, sio sandboxIO) error {
	if len(args) == 0 {
		return usageError("no command (see 'moat sandbox --help')")
	}
	if args[0] == "help" {
		if len(args) == 1 {
			fmt.Fprintf(sio.stdout, "%s\n", sandboxLong)
			return nil
		}
		args = []string{args[1], "--help"}
	}
	var sub *command
	for _, s := range sandboxSubcommands(sio) {
		if s.name == args[0] {
			sub = s
		}
	}
	if sub == nil {
		return usageError("unknown command %q (see 'moat sandbox --help')", args[0])
	}
	fl := pflag.NewFlagSet("moat sandbox "+sub.name, pflag.ContinueOnError)
	fl.SetInterspersed(sub.interspersed)
	fl.SetOutput(io.Discard)
	sub.setup(fl)
	if err := fl.Parse(args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprintf(sio.stdout, "%s\n\nUsage:\n  moat sandbox %s %s\n", strings.TrimSpace(sub.long), sub.name, sub.usage)
			if u := fl.FlagUsages(); u != "" {
				fmt.Fprintf(sio.stdout, "\nFlags:\n%s", u)
			}
			return nil
		}
		hint := ""
		if sub.name == "exec" || sub.name == "start" {
			hint = "; a command line with flags of its own goes after --"
		}
		return usageError("%s: %v (see 'moat sandbox %s --help'%s)", sub.name, err, sub.name, hint)
	}
	err := sub.run(ctx, fl.Args())
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		u := os.Getenv("MOAT_URL")
		if u == "" {
			u = client.DefaultURL
		}
		return fmt.Errorf("%w (is 'moat serve' running at %s? set MOAT_URL)", err, u)
	}
	return err
}

// withClient calls fn with a client of the daemon named by the
// environment and closes it after.
func withClient(fn func(c *client.Client) error) error {
	if m := os.Getenv("MOAT_MODE"); m != "" && m != client.ModeHTTP {
		return usageError("MOAT_MODE=%s: 'moat sandbox' talks to a running daemon over HTTP (MOAT_URL, MOAT_TOKEN)", m)
	}
	c, err := client.New(client.WithHTTPFromEnv())
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(c)
}

// interruptible returns ctx cancelled by SIGINT or SIGTERM.
func interruptible(ctx context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
}

// exitInterrupted is the exit code after ^C.
const exitInterrupted = 130

// printJSONTo writes v as indented JSON.
func printJSONTo(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printMade prints what create or start made: its id, or with asJSON
// its description.
func printMade(w io.Writer, asJSON bool, id, description any) error {
	if asJSON {
		return printJSONTo(w, description)
	}
	_, err := fmt.Fprintln(w, id)
	return err
}

// printList prints items as a JSON array, or as a table under header
// with a line made by row for each item.
func printList[T any](w io.Writer, asJSON bool, items []T, header string, row func(T) string) error {
	if asJSON {
		if items == nil {
			items = []T{}
		}
		return printJSONTo(w, items)
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, item := range items {
		fmt.Fprintln(tw, row(item))
	}
	return tw.Flush()
}

// durationMs converts a flag's duration to milliseconds (a positive
// duration is at least 1 ms).
func durationMs(name string, d time.Duration) (int64, error) {
	if d < 0 {
		return 0, usageError("--%s must not be negative", name)
	}
	ms := d.Milliseconds()
	if d > 0 && ms == 0 {
		ms = 1
	}
	return ms, nil
}

// absHostPath makes a host path absolute: the daemon does not share this
// command's working directory.
func absHostPath(p string) (string, error) {
	if p == "" {
		return "", nil
	}
	a, err := filepath.Abs(p)
	if err != nil {
		return "", usageError("%s: %v", p, err)
	}
	return a, nil
}

// createFlags are the flags of a sandbox's create (moat sandbox create,
// moat snapshot fork).
type createFlags struct {
	f              runFlags
	timeout, idle  time.Duration
	hostname       string
	labels, ro, rw []string
	rules          ruleFlags
}

func (c *createFlags) declare(fl *pflag.FlagSet) {
	f := &c.f
	fl.StringVar(&f.memory, "memory", "", "memory limit `SIZE` (e.g. 512m, 2GiB)")
	fl.Float64Var(&f.cpus, "cpus", 0, "CPU quota in `CPUS` (e.g. 0.5)")
	fl.Int64Var(&f.pids, "pids", 0, "maximum number of processes and threads `N`")
	fl.StringVar(&f.disk, "disk", "", "`SIZE` of the tmpfs behind /tmp, home, /dev/shm and an in-memory workspace")
	fl.DurationVar(&c.timeout, "timeout", 0, "delete the sandbox `DURATION` after its creation (0: the daemon's default)")
	fl.DurationVar(&c.idle, "idle-timeout", 0, "delete the sandbox after `DURATION` without a call (0: the daemon's default)")
	fl.StringVarP(&f.workspace, "workspace", "w", "", "host `DIR` mounted read-write at /workspace (default: in memory)")
	fl.StringArrayVar(&c.ro, "ro", nil, "extra read-only bind `HOST[:PATH]` (repeatable)")
	fl.StringArrayVar(&c.rw, "rw", nil, "extra writable bind `HOST[:PATH]` (repeatable)")
	fl.StringVar(&c.hostname, "hostname", "", "the sandbox's host `NAME`")
	fl.StringArrayVarP(&c.labels, "label", "l", nil, "label the sandbox `KEY=VALUE` (repeatable)")
	c.rules.declare(fl, "every call of the sandbox")
}

// request builds the create request the flags describe.
func (c *createFlags) request() (api.CreateSandbox, error) {
	f := &c.f
	limits, err := f.limits()
	if err != nil {
		return api.CreateSandbox{}, err
	}
	req := api.CreateSandbox{Hostname: c.hostname, Limits: limits, Policy: c.rules.callRules()}
	if req.TimeoutMs, err = durationMs("timeout", c.timeout); err != nil {
		return req, err
	}
	if req.IdleTimeoutMs, err = durationMs("idle-timeout", c.idle); err != nil {
		return req, err
	}
	if req.Workspace, err = absHostPath(f.workspace); err != nil {
		return req, err
	}
	for i, b := range slices.Concat(c.ro, c.rw) {
		bind, err := parseBind(b, i >= len(c.ro))
		if err != nil {
			return req, err
		}
		if bind.Source, err = absHostPath(bind.Source); err != nil {
			return req, err
		}
		req.Binds = append(req.Binds, bind)
	}
	for _, l := range c.labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return req, usageError("--label %q: want KEY=VALUE", l)
		}
		if req.Labels == nil {
			req.Labels = map[string]string{}
		}
		req.Labels[k] = v
	}
	return req, nil
}

func sbCreate(sio sandboxIO) *command {
	var (
		cf                 createFlags
		template, snapshot string
		asJSON             bool
	)
	return &command{
		name:  "create",
		usage: "[flags]",
		short: "Create a sandbox and print its id",
		long: `Create a sandbox and print its id (with --json, its whole description).

Limits default to the template's, then to the daemon's configuration;
--workspace and bind mounts name host paths, which the daemon accepts only
when its operator allows them. --template chooses the root filesystem
("host" by default: the host's system directories; 'moat template ls'
lists the others); --snapshot starts the sandbox from one of your
snapshots instead (with its template).`,
		setup: func(fl *pflag.FlagSet) {
			cf.declare(fl)
			fl.StringVar(&template, "template", "", "create the sandbox from template `NAME` (default host)")
			fl.StringVar(&snapshot, "snapshot", "", "start the sandbox from snapshot `ID` ('moat snapshot ls')")
			fl.BoolVar(&asJSON, "json", false, "print the sandbox's description as JSON")
		},
		run: func(ctx context.Context, args []string) error {
			if len(args) > 0 {
				return usageError("create takes no arguments")
			}
			req, err := cf.request()
			if err != nil {
				return err
			}
			req.Template, req.Snapshot = template, snapshot
			return withClient(func(c *client.Client) error {
				sb, err := c.CreateSandbox(ctx, req)
				if err != nil {
					return err
				}
				return printMade(sio.stdout, asJSON, sb.ID(), sb.Snapshot())
			})
		},
	}
}

func sbList(sio sandboxIO) *command {
	var asJSON, all bool
	return &command{
		name:  "ls",
		usage: "[--all] [--json]",
		short: "List sandboxes",
		long:  "List the running sandboxes (with --all, those that stopped recently too).",
		setup: func(fl *pflag.FlagSet) {
			fl.BoolVarP(&all, "all", "a", false, "include sandboxes that stopped recently")
			fl.BoolVar(&asJSON, "json", false, "print the list as JSON")
		},
		run: func(ctx context.Context, args []string) error {
			if len(args) > 0 {
				return usageError("ls takes no arguments")
			}
			req := api.ListSandboxes{State: api.StateRunning}
			if all {
				req.State = ""
			}
			return withClient(func(c *client.Client) error {
				list, err := c.ListSandboxes(ctx, req)
				if err != nil {
					return err
				}
				now := time.Now()
				return printList(sio.stdout, asJSON, list, "ID\tSTATE\tTEMPLATE\tCREATED\tLAST ACTIVE\tPROCS\tLABELS", func(s api.Sandbox) string {
					state := s.State
					if s.EndReason != "" {
						state += " (" + s.EndReason + ")"
					}
					root := orDash(s.Template)
					if s.Snapshot != "" {
						root += "@" + s.Snapshot
					}
					return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%d\t%s", s.ID, state, root, ago(now, s.CreatedAt), ago(now, s.LastActiveAt), s.Running, formatLabels(s.Labels))
				})
			})
		},
	}
}

// ago says how long before now t was, in one unit.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", max(0, int(d.Seconds())))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

func formatLabels(l map[string]string) string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		keys[i] = k + "=" + l[k]
	}
	return strings.Join(keys, ",")
}

// execFlags are the flags of exec and start.
type execFlags struct {
	env         []string
	cwd         string
	timeout     time.Duration
	sh          string
	outputLimit string
	concurrent  bool
	stdin       bool
	json        bool
	rules       ruleFlags
}

// ruleFlags are per-sandbox or per-call policy rules; they can only
// narrow the daemon's policy.
type ruleFlags struct {
	ask, deny []string
}

func (r *ruleFlags) declare(fl *pflag.FlagSet, what string) {
	fl.StringArrayVar(&r.ask, "ask", nil, "policy rule `RULE` that needs an approval for "+what+", e.g. 'Exec(git push*)' (repeatable)")
	fl.StringArrayVar(&r.deny, "deny", nil, "policy rule `RULE` that denies for "+what+", e.g. 'Read(secrets/**)' (repeatable)")
}

// callRules is nil when no rule was given.
func (r *ruleFlags) callRules() *policy.CallRules {
	if len(r.ask)+len(r.deny) == 0 {
		return nil
	}
	return &policy.CallRules{Ask: r.ask, Deny: r.deny}
}

func (f *execFlags) declare(fl *pflag.FlagSet, exec bool) {
	fl.StringArrayVarP(&f.env, "env", "e", nil, "set `K=V` in the command's environment (repeatable)")
	fl.StringVar(&f.cwd, "cwd", "", "working `PATH` inside the sandbox (default /workspace)")
	fl.DurationVar(&f.timeout, "timeout", 0, "kill the command's process tree after `DURATION` (exit 124); 0 means the daemon's default")
	fl.StringVar(&f.sh, "sh", "", "run `STRING` with /bin/sh -c")
	f.rules.declare(fl, "this command")
	if exec {
		fl.StringVar(&f.outputLimit, "output-limit", "", "with --json, cap each captured stream at `BYTES`")
		fl.BoolVar(&f.concurrent, "concurrent", false, "run beside another exec running in the sandbox (otherwise refused as busy)")
		fl.BoolVarP(&f.stdin, "interactive", "i", false, "send this command's standard input (read to its end first) to the command")
		fl.BoolVar(&f.json, "json", false, "capture output and print one JSON result object instead of streaming")
	} else {
		fl.StringVar(&f.outputLimit, "output-limit", "", "keep at most `BYTES` of output for readers (moat sandbox logs)")
		fl.BoolVar(&f.json, "json", false, "print the process's description as JSON")
	}
}

// request builds the exec/start request from the flags and SANDBOX CMD...
func (f *execFlags) request(name string, args []string, stdin io.Reader) (string, api.Exec, error) {
	var req api.Exec
	if len(args) == 0 {
		return "", req, usageError("%s: no sandbox id (moat sandbox %s SANDBOX -- COMMAND [ARG...])", name, name)
	}
	id, cmd := args[0], args[1:]
	if f.sh != "" && len(cmd) > 0 {
		return "", req, usageError("%s: give either --sh or a command, not both", name)
	}
	if f.sh != "" {
		cmd = []string{"/bin/sh", "-c", f.sh}
	}
	if len(cmd) == 0 {
		return "", req, usageError("%s: no command (moat sandbox %s SANDBOX -- COMMAND [ARG...], or --sh 'STRING')", name, name)
	}
	req = api.Exec{Args: cmd, Env: f.env, Cwd: f.cwd, Concurrent: f.concurrent, Policy: f.rules.callRules()}
	var err error
	if req.TimeoutMs, err = durationMs("timeout", f.timeout); err != nil {
		return "", req, err
	}
	if f.outputLimit != "" {
		n, err := config.ParseSize(f.outputLimit)
		if err != nil || n <= 0 || n > 1<<31 {
			return "", req, usageError("--output-limit: must be a size above 0 and at most 2 GiB")
		}
		req.OutputLimit = int(n)
	}
	if f.stdin {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return "", req, fmt.Errorf("reading standard input: %w", err)
		}
		if utf8.Valid(b) {
			req.Stdin = string(b)
		} else {
			req.StdinBase64 = b
		}
	}
	return id, req, nil
}

const execLong = `Run a command in a sandbox to completion, streaming its output to this
command's stdout and stderr, and exit with its exit code.

The command's standard input is empty unless -i sends this command's own
(read to its end before the command starts). ^C abandons the call, which
ends the command in the sandbox.

Examples:
  moat sandbox exec sb-123 -- ls -la /workspace
  moat sandbox exec -e DEBUG=1 --timeout 30s sb-123 -- python3 main.py
  echo 'print(6*7)' | moat sandbox exec -i sb-123 -- python3
  moat sandbox exec --json sb-123 --sh 'make test'`

func sbExec(sio sandboxIO) *command {
	var f execFlags
	return &command{
		name:         "exec",
		usage:        "[flags] SANDBOX -- COMMAND [ARG...]   |   moat sandbox exec [flags] SANDBOX --sh 'STRING'",
		short:        "Run a command in a sandbox and stream its output",
		long:         execLong,
		setup:        func(fl *pflag.FlagSet) { f.declare(fl, true) },
		interspersed: true,
		run: func(ctx context.Context, args []string) error {
			err := runExec(ctx, sio, &f, args)
			var ee *exitError
			if err != nil && f.json && !errors.As(err, &ee) {
				// With --json a caller always gets one result object.
				if perr := printJSONTo(sio.stdout, sandbox.SetupResult(err)); perr != nil {
					return perr
				}
				fmt.Fprintf(sio.stderr, "moat sandbox exec: %v\n", err)
				return &exitError{code: sandbox.ExitSetupFailed}
			}
			return err
		},
	}
}

func runExec(ctx context.Context, sio sandboxIO, f *execFlags, args []string) error {
	id, req, err := f.request("exec", args, sio.stdin)
	if err != nil {
		return err
	}
	var res *sandbox.Result
	err = withClient(func(c *client.Client) error {
		ctx, stop := interruptible(ctx)
		defer stop()
		sb := c.Sandbox(id)
		var err error
		if f.json {
			if res, err = sb.Exec(ctx, req); err == nil {
				err = printJSONTo(sio.stdout, res)
			}
		} else {
			res, err = copyOutput(sio, sb.ExecStream(ctx, req), "moat: output was dropped here (the daemon's buffer overflowed)")
		}
		if err != nil && ctx.Err() != nil {
			fmt.Fprintln(sio.stderr, "moat: interrupted; the command was abandoned")
			return &exitError{code: exitInterrupted}
		}
		return err
	})
	if client.IsPolicyDenied(err) {
		return policyDenied(sio, f.json, err)
	}
	if err != nil {
		return err
	}
	if res == nil {
		return errors.New("the daemon sent no result")
	}
	if !f.json {
		if res.ExitReason == sandbox.ReasonTimeout {
			fmt.Fprintln(sio.stderr, "moat: timed out; the process tree was killed")
		} else if res.Error != "" {
			fmt.Fprintln(sio.stderr, "moat:", res.Error)
		}
	}
	if res.ExitCode != 0 {
		return &exitError{code: res.ExitCode}
	}
	return nil
}

// policyDenied reports a command the policy refused: the reason on
// stderr (with asJSON, a denied result on stdout too), exit 126.
func policyDenied(sio sandboxIO, asJSON bool, err error) error {
	var e *api.Error
	errors.As(err, &e)
	res := sandbox.DeniedResult(e.Message)
	if asJSON {
		if perr := printJSONTo(sio.stdout, res); perr != nil {
			return perr
		}
	}
	fmt.Fprintln(sio.stderr, "moat:", e.Message)
	return &exitError{code: res.ExitCode}
}

// copyOutput writes the output events of events to stdout and stderr, and
// the line lost to stderr where output was lost, until the stream ends or
// fails; it returns the result of its exit event, if any. An approval
// the command waits for is told on stderr.
func copyOutput(sio sandboxIO, events iter.Seq2[api.Event, error], lost string) (*sandbox.Result, error) {
	var res *sandbox.Result
	for ev, err := range events {
		if err != nil {
			return nil, err
		}
		switch ev.Type {
		case api.EventStdout:
			_, err = sio.stdout.Write(ev.Output())
		case api.EventStderr:
			_, err = sio.stderr.Write(ev.Output())
		case api.EventLost:
			fmt.Fprintln(sio.stderr, lost)
		case api.EventApproval:
			if a := ev.Approval; a != nil {
				switch a.State {
				case api.ApprovalPending:
					fmt.Fprintf(sio.stderr, "moat: waiting for approval %s (%s; until %s): moat approvals allow|deny %s\n",
						a.ID, a.Reason, a.ExpiresAt.Local().Format(time.TimeOnly), a.ID)
				case api.ApprovalAllowed:
					fmt.Fprintf(sio.stderr, "moat: approval %s allowed by %s\n", a.ID, a.AnsweredBy)
				}
			}
		case api.EventExit:
			res = ev.Result
		}
		if err != nil {
			return nil, err
		}
	}
	return res, nil
}

func sbStart(sio sandboxIO) *command {
	var f execFlags
	return &command{
		name:  "start",
		usage: "[flags] SANDBOX -- COMMAND [ARG...]   |   moat sandbox start [flags] SANDBOX --sh 'STRING'",
		short: "Start a command in the background and print its process id",
		long: `Start a command in a sandbox in the background and print its process id;
read its output with 'moat sandbox logs SANDBOX ID'.`,
		setup:        func(fl *pflag.FlagSet) { f.declare(fl, false) },
		interspersed: true,
		run: func(ctx context.Context, args []string) error {
			id, req, err := f.request("start", args, sio.stdin)
			if err != nil {
				return err
			}
			err = withClient(func(c *client.Client) error {
				p, err := c.Sandbox(id).Start(ctx, req)
				if err != nil {
					return err
				}
				return printMade(sio.stdout, f.json, p.ID(), p.Snapshot())
			})
			if client.IsPolicyDenied(err) {
				return policyDenied(sio, false, err)
			}
			return err
		},
	}
}

func sbPs(sio sandboxIO) *command {
	var asJSON bool
	return &command{
		name:  "ps",
		usage: "[--json] SANDBOX",
		short: "List a sandbox's processes",
		long:  "List the processes started in a sandbox (exec and start), running or ended.",
		setup: func(fl *pflag.FlagSet) {
			fl.BoolVar(&asJSON, "json", false, "print the list as JSON")
		},
		run: func(ctx context.Context, args []string) error {
			if len(args) != 1 {
				return usageError("ps takes one sandbox id")
			}
			return withClient(func(c *client.Client) error {
				procs, err := c.Sandbox(args[0]).Processes(ctx)
				if err != nil {
					return err
				}
				now := time.Now()
				return printList(sio.stdout, asJSON, procs, "ID\tSTATE\tSTARTED\tEXIT\tCOMMAND", func(p api.Process) string {
					exit := "-"
					if p.Result != nil {
						exit = strconv.Itoa(p.Result.ExitCode)
						if p.Result.ExitReason != "" && p.Result.ExitReason != sandbox.ReasonExited {
							exit += " (" + string(p.Result.ExitReason) + ")"
						}
					}
					return fmt.Sprintf("%d\t%s\t%s\t%s\t%s", p.ID, p.State, ago(now, p.StartedAt), exit, strings.Join(p.Args, " "))
				})
			})
		},
	}
}

func sbLogs(sio sandboxIO) *command {
	var follow bool
	var after uint64
	return &command{
		name:  "logs",
		usage: "[--follow] [--after N] SANDBOX PROCESS",
		short: "Print the output of a background process",
		long: `Print the output a background process wrote (as much as the daemon still
holds) to stdout and stderr; with --follow, go on until it ends.`,
		setup: func(fl *pflag.FlagSet) {
			fl.BoolVarP(&follow, "follow", "f", false, "wait for more output until the process ends")
			fl.Uint64Var(&after, "after", 0, "start after the event with sequence number `N`")
		},
		interspersed: true,
		run: func(ctx context.Context, args []string) error {
			if len(args) != 2 {
				return usageError("logs takes a sandbox id and a process id")
			}
			pid, err := strconv.ParseUint(args[1], 10, 64)
			if err != nil {
				return usageError("logs: process id %q is not a number", args[1])
			}
			return withClient(func(c *client.Client) error {
				ctx, stop := interruptible(ctx)
				defer stop()
				_, err := copyOutput(sio, c.Sandbox(args[0]).Process(pid).Output(ctx, after, follow), "moat: earlier output was dropped from the daemon's buffer")
				if err != nil && ctx.Err() != nil {
					return &exitError{code: exitInterrupted}
				}
				return err
			})
		},
	}
}

func sbRemove(sio sandboxIO) *command {
	return &command{
		name:  "rm",
		usage: "SANDBOX...",
		short: "Delete sandboxes",
		long:  "Kill every process of each sandbox named and remove it; print each id deleted.",
		setup: func(*pflag.FlagSet) {},
		run: func(ctx context.Context, args []string) error {
			if len(args) == 0 {
				return usageError("rm takes one or more sandbox ids")
			}
			return withClient(func(c *client.Client) error {
				failed := false
				for _, id := range args {
					if err := c.Sandbox(id).Delete(ctx); err != nil {
						fmt.Fprintf(sio.stderr, "moat sandbox rm: %s: %v\n", id, err)
						failed = true
						continue
					}
					fmt.Fprintln(sio.stdout, id)
				}
				if failed {
					return &exitError{code: sandbox.ExitSetupFailed}
				}
				return nil
			})
		},
	}
}

const cpLong = `Copy a file or a directory between the host and a sandbox. One side is
SANDBOX:PATH (PATH absolute, or relative to /workspace), the other a host
path, or - for this command's stdin (a file's content) or stdout.

As with cp -r: when the destination is an existing directory the source is
copied into it under its own name, otherwise it is copied to the
destination's name. Directories travel as tar archives; symlinks are
copied as symlinks; a directory from the sandbox is extracted without ever
following a link out of the destination.

Examples:
  moat sandbox cp ./src sb-123:/workspace/
  moat sandbox cp sb-123:/workspace/out/report.json .
  moat sandbox cp - sb-123:/workspace/input.txt < input.txt`

func sbCopy(sio sandboxIO) *command {
	return &command{
		name:  "cp",
		usage: "SRC DST   (one of them SANDBOX:PATH)",
		short: "Copy a file or directory between the host and a sandbox",
		long:  cpLong,
		setup: func(*pflag.FlagSet) {},
		run: func(ctx context.Context, args []string) error {
			if len(args) != 2 {
				return usageError("cp takes a source and a destination")
			}
			srcID, srcPath, srcRemote := splitRemote(args[0])
			dstID, dstPath, dstRemote := splitRemote(args[1])
			if srcRemote == dstRemote {
				return usageError("cp: exactly one of SRC and DST must be SANDBOX:PATH")
			}
			return withClient(func(c *client.Client) error {
				ctx, stop := interruptible(ctx)
				defer stop()
				if dstRemote {
					return copyIn(ctx, sio, c.Sandbox(dstID), args[0], dstPath)
				}
				return copyOut(ctx, sio, c.Sandbox(srcID), srcPath, args[1])
			})
		},
	}
}

// splitRemote reads SANDBOX:PATH; a host path with a colon can be written
// ./a:b.
func splitRemote(s string) (id, p string, ok bool) {
	id, p, ok = strings.Cut(s, ":")
	if !ok || id == "" || strings.Contains(id, "/") {
		return "", "", false
	}
	if p == "" {
		p = "/workspace"
	}
	return id, p, true
}

// copyIn copies the host path src (or stdin) to dst in the sandbox.
func copyIn(ctx context.Context, sio sandboxIO, sb *client.Sandbox, src, dst string) error {
	if src == "-" {
		b, err := io.ReadAll(sio.stdin)
		if err != nil {
			return fmt.Errorf("reading standard input: %w", err)
		}
		return sb.WriteFile(ctx, dst, b, 0)
	}
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	intoDir := strings.HasSuffix(dst, "/")
	if st, err := sb.Stat(ctx, dst); err == nil {
		intoDir = st.Type == "dir"
	} else if !client.IsNotFound(err) {
		return err
	}
	abs, err := filepath.Abs(src)
	if err != nil {
		return err
	}
	name := filepath.Base(abs)
	switch {
	case fi.Mode().IsRegular():
		if intoDir {
			dst = path.Join(dst, name)
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		return sb.WriteFile(ctx, dst, b, fi.Mode().Perm())
	case fi.IsDir():
		dir := dst
		if !intoDir {
			dir, name = path.Dir(dst), path.Base(dst)
		}
		if name == "/" || name == "." || name == ".." {
			return usageError("cp: cannot copy a directory to %q", dst)
		}
		root, err := filepath.EvalSymlinks(abs)
		if err != nil {
			return err
		}
		return pipe(func(w io.Writer) error {
			return writeTar(w, root, name, sio.stderr)
		}, func(r io.Reader) error {
			return sb.Upload(ctx, dir, r)
		})
	}
	return fmt.Errorf("%s is neither a regular file nor a directory", src)
}

// writeTar writes the tree at root as a tar stream whose entries are
// named under name.
func writeTar(w io.Writer, root, name string, warn io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		entry := name
		if rel != "." {
			entry = name + "/" + filepath.ToSlash(rel)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		var link string
		switch {
		case info.Mode().IsRegular(), info.IsDir():
		case info.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		default:
			fmt.Fprintf(warn, "moat: skipping %s: not a file, directory or symlink\n", p)
			return nil
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name = entry
		if info.IsDir() {
			h.Name += "/"
		}
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
		h.Mode &= 0o777
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := io.CopyN(tw, f, h.Size); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// copyOut copies src of the sandbox to the host path dst (or stdout).
func copyOut(ctx context.Context, sio sandboxIO, sb *client.Sandbox, src, dst string) error {
	if dst == "-" {
		b, err := sb.ReadFile(ctx, src)
		if err != nil {
			return err
		}
		_, err = sio.stdout.Write(b)
		return err
	}
	target := dst
	if st, err := os.Stat(dst); err == nil && st.IsDir() {
		if base := path.Base(src); base != "/" && base != "." {
			target = filepath.Join(dst, base)
		}
	}
	return pipe(func(w io.Writer) error {
		return sb.Download(ctx, src, w)
	}, func(r io.Reader) error {
		return extractTar(r, target, sio.stderr)
	})
}

// errPipeStopped ends the writes of a producer whose consumer has ended.
var errPipeStopped = errors.New("the reader stopped")

// pipe runs produce, in a goroutine of its own, writing what consume
// reads. A failure of produce explains a failure best (a failed download
// leaves a truncated archive); a producer that failed only because
// consume stopped reading (ended, or closed the pipe) is not a failure.
func pipe(produce func(io.Writer) error, consume func(io.Reader) error) error {
	pr, pw := io.Pipe()
	produced := make(chan error, 1)
	go func() {
		err := produce(pw)
		pw.CloseWithError(err)
		produced <- err
	}()
	err := consume(pr)
	pr.CloseWithError(errPipeStopped) // a producer still writing stops
	if perr := <-produced; perr != nil && !errors.Is(perr, errPipeStopped) && !errors.Is(perr, io.ErrClosedPipe) {
		return perr
	}
	return err
}

// extractTar extracts an archive of one file or tree (every entry under
// one top name) as target. Entries below the top are created through an
// os.Root at target, so no entry and no symlink of the archive can reach
// outside it.
func extractTar(r io.Reader, target string, warn io.Writer) error {
	x := &extractor{target: target, warn: warn}
	defer x.close()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if err := x.entry(h, tr); err != nil {
			return fmt.Errorf("archive entry %q: %w", h.Name, err)
		}
	}
	if x.top == "" {
		return errors.New("the daemon sent an empty archive")
	}
	return nil
}

// extractor is the state of one extractTar.
type extractor struct {
	target string
	warn   io.Writer
	top    string   // the first name of every entry
	root   *os.Root // target, once the top directory exists
}

func (x *extractor) close() {
	if x.root != nil {
		x.root.Close()
	}
}

func (x *extractor) entry(h *tar.Header, r io.Reader) error {
	name := strings.TrimPrefix(path.Clean(strings.TrimPrefix(h.Name, "/")), "./")
	first, rest, _ := strings.Cut(name, "/")
	if x.top == "" {
		x.top = first
	} else if first != x.top {
		return fmt.Errorf("not under %q", x.top)
	}
	mode := h.FileInfo().Mode().Perm()
	if rest == "" {
		if x.root != nil {
			return errors.New("repeats the top entry")
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.Mkdir(x.target, mode|0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			var err error
			x.root, err = os.OpenRoot(x.target)
			return err
		case tar.TypeReg:
			return writeFileFrom(x.target, r, mode, os.OpenFile)
		case tar.TypeSymlink:
			return os.Symlink(h.Linkname, x.target)
		}
		return fmt.Errorf("unsupported type %q", h.Typeflag)
	}
	if x.root == nil {
		return errors.New("comes before its directory")
	}
	rel := filepath.FromSlash(rest)
	if !filepath.IsLocal(rel) {
		return errors.New("leaves its directory")
	}
	if dir := filepath.Dir(rel); dir != "." {
		if err := x.root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	switch h.Typeflag {
	case tar.TypeDir:
		return x.root.MkdirAll(rel, mode|0o700)
	case tar.TypeReg:
		return writeFileFrom(rel, r, mode, x.root.OpenFile)
	case tar.TypeSymlink:
		_ = x.root.Remove(rel)
		return x.root.Symlink(h.Linkname, rel)
	}
	fmt.Fprintf(x.warn, "moat: skipping %s: type %q is not copied\n", h.Name, h.Typeflag)
	return nil
}

// writeFileFrom creates (or truncates) name with open and copies r to it.
func writeFileFrom(name string, r io.Reader, mode fs.FileMode, open func(string, int, fs.FileMode) (*os.File, error)) error {
	f, err := open(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
