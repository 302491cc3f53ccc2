package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"os/signal"
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
	"github.com/moat-sandbox/moat/display"
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
  ps       List a sandbox's background processes
  logs     Print the output of a background process
  stdin    Send data to a background process's standard input, or close it
  signal   Send a signal to a background process
  wait     Wait for a background process to end and exit with its code
  kill     Kill a background process (SIGKILL)
  cp       Copy a file or directory between the host and a sandbox
  snapshot Capture a sandbox's filesystem into a snapshot and print its id
  restore  Roll a sandbox back to a snapshot
  network  Set a running sandbox's network mode and allowlist
  rm       Delete sandboxes

Run 'moat sandbox COMMAND --help' for a command's flags; flags may also
follow the arguments (after --, words belong to the command line of exec
and start). Snapshots are listed, deleted and forked into new sandboxes
with 'moat snapshot'; 'moat audit' lists the calls made.

Connection: MOAT_URL (default http://127.0.0.1:7070) and the API token:
MOAT_TOKEN, else the file MOAT_TOKEN_FILE, else <MOAT_DATA>/token (MOAT_DATA
naming the daemon's data directory), else /var/lib/moat/token. Every
command that talks to the daemon (sandbox, snapshot, audit, approvals)
finds it this way.
MOAT_MODE=stdio is refused: a private daemon would end, and delete its
sandboxes, when this command ends.

Policy: the daemon judges every exec, start and file operation by the
sandbox's policy (its policy files, then --ask/--deny rules of the
sandbox and of the call, which can only narrow). A command an ask rule
holds waits until an approver answers ('moat approvals'); exec says so on
stderr.

Exit codes: exec returns the command's own code (as 'moat run' does: 124
timeout, 126, 127, 128+N…; 124 too when the sandbox reaches its maximum
age during the command, exit_reason sandbox_timeout in --json); exec and
start exit 126 with the reason on stderr when the policy denies the
command (or its approval was denied or expired); 125 when the daemon
cannot be reached or refuses the request; 130 when interrupted; otherwise
0.`

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
		// The rest, flags included, is the subcommand's.
		flagsFirst: true,
		run: func(ctx context.Context, args []string) error {
			return runSandbox(ctx, args, sandboxIO{os.Stdin, os.Stdout, os.Stderr})
		},
	}
}

// sandboxSubcommands are the commands of `moat sandbox`, reading and
// writing sio. exec and start take their command line after --.
func sandboxSubcommands(sio sandboxIO) []*command {
	return []*command{sbCreate(sio), sbList(sio), sbExec(sio), sbStart(sio), sbPs(sio), sbLogs(sio), sbStdin(sio), sbSignal(sio), sbWait(sio), sbKill(sio), sbCopy(sio), sbSnapshot(sio), sbRestore(sio), sbNetwork(sio), sbRemove(sio)}
}

// runSandbox dispatches `moat sandbox COMMAND ARGS...`.
func runSandbox(ctx context.Context, args []string, sio sandboxIO) error {
	_, err := dispatch(ctx, "sandbox", sandboxLong, sandboxSubcommands(sio), args, sio)
	return daemonHint(err)
}

// withClient calls fn with a client of the daemon named by the
// environment and closes it after.
func withClient(fn func(c *client.Client) error) error {
	if m := os.Getenv("MOAT_MODE"); m != "" && m != client.ModeHTTP {
		return usageError("MOAT_MODE=%s: 'moat sandbox' talks to a running daemon over HTTP (MOAT_URL, MOAT_TOKEN)", m)
	}
	c, err := daemonClient()
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

// printJSONTo writes v as indented JSON, with no raw invisible character
// (display.JSON: the values are the same).
func printJSONTo(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(display.JSON(b), '\n'))
	return err
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
	net            netFlags
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
	c.net.declare(fl, true)
}

// request builds the create request the flags describe.
func (c *createFlags) request() (api.CreateSandbox, error) {
	f := &c.f
	limits, err := f.limits()
	if err != nil {
		return api.CreateSandbox{}, err
	}
	req := api.CreateSandbox{Hostname: c.hostname, Limits: limits, Policy: c.rules.callRules()}
	if req.Network, err = c.net.request(); err != nil {
		return req, err
	}
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
snapshots instead (with its template).

--net proxy gives the sandbox the daemon's egress proxy as its only way
out, admitting what --allow-domain names and the policy files allow
(an IP or CIDR entry only inside the managed policy's
allow_cidr_entries); entries a deny rule of the policy covers are
printed as dropped. 'moat sandbox network' changes it later.`,
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
				if n := sb.Snapshot().Network; n != nil {
					for _, d := range n.Dropped {
						fmt.Fprintf(sio.stderr, "moat: network: dropped %s: %s\n", display.String(d.Entry), display.String(d.Reason))
					}
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
					d := display.String
					return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%d\t%s", d(s.ID), d(state), d(root), ago(now, s.CreatedAt), ago(now, s.LastActiveAt), s.Running, formatLabels(s.Labels))
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
		keys[i] = labelWord(k) + "=" + labelWord(l[k])
	}
	return strings.Join(keys, ",")
}

// labelWord is a label's key or value for the table: escaped, and quoted
// when it holds a separator, so that one label never reads as two.
func labelWord(s string) string {
	e := display.StringN(s, 256)
	if !strings.ContainsAny(e, ",=\" ") {
		return e
	}
	return `"` + strings.ReplaceAll(e, `"`, `\"`) + `"`
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
func (r *ruleFlags) callRules() *api.CallRules {
	if len(r.ask)+len(r.deny) == 0 {
		return nil
	}
	return &api.CallRules{Ask: r.ask, Deny: r.deny}
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
		name:  "exec",
		usage: "[flags] SANDBOX -- COMMAND [ARG...]   |   moat sandbox exec [flags] SANDBOX --sh 'STRING'",
		short: "Run a command in a sandbox and stream its output",
		long:  execLong,
		setup: func(fl *pflag.FlagSet) { f.declare(fl, true) },
		run: func(ctx context.Context, args []string) error {
			err := runExec(ctx, sio, &f, args)
			var ee *exitError
			if err != nil && f.json && !errors.As(err, &ee) {
				// With --json a caller always gets one result object.
				if perr := printJSONTo(sio.stdout, sandbox.SetupResult(err)); perr != nil {
					return perr
				}
				fmt.Fprintf(sio.stderr, "moat sandbox exec: %s\n", display.String(err.Error()))
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
			fmt.Fprintln(sio.stderr, "moat:", display.String(res.Error))
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
	fmt.Fprintln(sio.stderr, "moat:", display.String(e.Message))
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
					id := display.String(a.ID)
					fmt.Fprintf(sio.stderr, "moat: waiting for approval %s (%s; until %s): moat approvals allow|deny %s\n",
						id, display.String(a.Reason), a.ExpiresAt.Local().Format(time.TimeOnly), id)
				case api.ApprovalAllowed:
					fmt.Fprintf(sio.stderr, "moat: approval %s allowed by %s\n", display.String(a.ID), display.String(a.AnsweredBy))
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
		setup: func(fl *pflag.FlagSet) { f.declare(fl, false) },
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
		short: "List a sandbox's background processes",
		long: `List the background processes of a sandbox, those started with
'moat sandbox start', running or ended, that the daemon still keeps.
Commands run with 'moat sandbox exec' are not kept as processes:
'moat audit --sandbox SANDBOX --kind process.exec' lists them.`,
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
					return fmt.Sprintf("%d\t%s\t%s\t%s\t%s", p.ID, display.String(p.State), ago(now, p.StartedAt), display.String(exit), display.Argv(p.Args))
				})
			})
		},
	}
}

func sbLogs(sio sandboxIO) *command {
	var follow, asJSON bool
	var after uint64
	return &command{
		name:  "logs",
		usage: "[--follow] [--after N] [--json] SANDBOX PROCESS",
		short: "Print the output of a background process",
		long: `Print the output a background process wrote (as much as the daemon still
holds) to stdout and stderr; with --follow, go on until it ends.

With --json, print the daemon's events instead, one JSON object a line
(NDJSON, as process.output sends them): seq, type (stdout, stderr, lost,
exit), process, text (or data, base64, for output that is not UTF-8),
lost_bytes, and the exit event's result. --after N resumes after the
event whose seq is N.`,
		setup: func(fl *pflag.FlagSet) {
			fl.BoolVarP(&follow, "follow", "f", false, "wait for more output until the process ends")
			fl.Uint64Var(&after, "after", 0, "start after the event with sequence number `N`")
			fl.BoolVar(&asJSON, "json", false, "print the events as JSON, one a line")
		},
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
				events := c.Sandbox(args[0]).Process(pid).Output(ctx, after, follow)
				var err error
				if asJSON {
					err = printEvents(sio.stdout, events)
				} else {
					_, err = copyOutput(sio, events, "moat: earlier output was dropped from the daemon's buffer")
				}
				if err != nil && ctx.Err() != nil {
					return &exitError{code: exitInterrupted}
				}
				return err
			})
		},
	}
}

// printEvents writes each event of events as one line of JSON, until the
// stream ends or fails.
func printEvents(w io.Writer, events iter.Seq2[api.Event, error]) error {
	for ev, err := range events {
		if err != nil {
			return err
		}
		if err := printJSONLine(w, ev); err != nil {
			return err
		}
	}
	return nil
}

func sbRemove(sio sandboxIO) *command {
	var asJSON bool
	return &command{
		name:  "rm",
		usage: "[--json] SANDBOX...",
		short: "Delete sandboxes",
		long: `Kill every process of each sandbox named and remove it; print each id
deleted. With --json, print one object instead: {"removed": [ids],
"failed": [{"id", "code", "error"}]} (the reasons are on stderr too).`,
		setup: func(fl *pflag.FlagSet) {
			fl.BoolVar(&asJSON, "json", false, "print what was removed and what was not as one JSON object")
		},
		run: func(ctx context.Context, args []string) error {
			if len(args) == 0 {
				return usageError("rm takes one or more sandbox ids")
			}
			return withClient(func(c *client.Client) error {
				failed := false
				r := newRemoval()
				for _, id := range args {
					err := c.Sandbox(id).Delete(ctx)
					r.done(sio.stdout, asJSON, id, client.Code(err), err)
					if err != nil {
						fmt.Fprintf(sio.stderr, "moat sandbox rm: %s: %s\n", display.String(id), display.String(err.Error()))
						failed = true
					}
				}
				if err := r.print(sio.stdout, asJSON); err != nil {
					return err
				}
				if failed {
					return &exitError{code: sandbox.ExitSetupFailed}
				}
				return nil
			})
		},
	}
}
