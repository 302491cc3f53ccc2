package main

// moat sandbox stdin, signal, wait and kill: the background processes of a
// long-lived sandbox (moat sandbox start), through the API's
// process.stdin, process.signal and process.wait.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/display"
	"github.com/moat-sandbox/moat/sandbox"
)

// exitWaitTimeout is the exit code of wait when --timeout passes with the
// process still running (as timeout(1)).
const exitWaitTimeout = 124

// procArgs reads SANDBOX PROCESS from the first two of args.
func procArgs(name string, args []string, want int, what string) (string, uint64, error) {
	if len(args) != want {
		return "", 0, usageError("%s takes %s", name, what)
	}
	pid, err := strconv.ParseUint(args[1], 10, 64)
	if err != nil {
		return "", 0, usageError("%s: process id %q is not a number", name, args[1])
	}
	return args[0], pid, nil
}

// stdinChunk is the most one process.stdin call sends; the daemon holds
// at most 1 MiB unread by the process.
const stdinChunk = 64 << 10

func sbStdin(sio sandboxIO) *command {
	var closeIt bool
	return &command{
		name:  "stdin",
		usage: "[--close] SANDBOX PROCESS [FILE|-]",
		short: "Send data to a background process's standard input, or close it",
		long: `Send data to the standard input of a background process ('moat sandbox
start'): the content of FILE, or with - or no FILE this command's standard
input, sent as it is read (to its end). --close then closes the process's
standard input (it reads end of file); --close with no FILE sends no data
and only closes it ('... --close -' sends standard input, then closes).

The daemon holds at most 1 MiB the process has not read yet; past it this
command waits for the process to read. Writing to a process that has
ended fails (gone), as does writing after --close.`,
		setup: func(fl *pflag.FlagSet) {
			fl.BoolVar(&closeIt, "close", false, "close the process's standard input after the data (it reads end of file)")
		},
		run: func(ctx context.Context, args []string) error {
			if len(args) < 2 || len(args) > 3 {
				return usageError("stdin takes a sandbox id, a process id and at most one FILE or -")
			}
			id, pid, err := procArgs("stdin", args[:2], 2, "")
			if err != nil {
				return err
			}
			var in io.Reader
			switch {
			case len(args) == 3 && args[2] != "-":
				f, err := os.Open(args[2])
				if err != nil {
					return usageError("stdin: %v", err)
				}
				defer f.Close()
				in = f
			case len(args) == 3 || !closeIt:
				in = sio.stdin
			}
			return withClient(func(c *client.Client) error {
				ctx, stop := interruptible(ctx)
				defer stop()
				p := c.Sandbox(id).Process(pid)
				err := sendStdin(ctx, p, in)
				if err == nil && closeIt {
					err = p.CloseStdin(ctx)
				}
				if err != nil && ctx.Err() != nil {
					return &exitError{code: exitInterrupted}
				}
				return err
			})
		},
	}
}

// sendStdin sends what in holds (nothing when it is nil) to p's standard
// input, a chunk as it is read; while the daemon holds as much as it
// may (busy), it retries with a growing pause.
func sendStdin(ctx context.Context, p *client.Process, in io.Reader) error {
	if in == nil {
		return nil
	}
	buf := make([]byte, stdinChunk)
	for {
		n, rerr := in.Read(buf)
		if n > 0 {
			pause := 10 * time.Millisecond
			for {
				err := p.WriteStdin(ctx, buf[:n])
				if err == nil {
					break
				}
				if !client.IsBusy(err) {
					return err
				}
				select {
				case <-time.After(pause):
				case <-ctx.Done():
					return ctx.Err()
				}
				pause = min(2*pause, time.Second)
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return fmt.Errorf("reading the data: %w", rerr)
		}
	}
}

func sbSignal(sio sandboxIO) *command {
	return &command{
		name:  "signal",
		usage: "SANDBOX PROCESS SIGNAL",
		short: "Send a signal to a background process",
		long: `Send a signal to a background process ('moat sandbox start') and its
process group: a name (TERM, SIGTERM, int, HUP, USR1…) or a number (15,
1 to 64). The process's exit code says how it ended ('moat sandbox wait':
128+N when signal N ended it). A process that has ended is gone (exit
125); so is an unknown signal.

Examples:
  moat sandbox signal sb-123 3 TERM
  moat sandbox signal sb-123 3 9`,
		setup: func(*pflag.FlagSet) {},
		run: func(ctx context.Context, args []string) error {
			id, pid, err := procArgs("signal", args, 3, "a sandbox id, a process id and a signal (name or number)")
			if err != nil {
				return err
			}
			return withClient(func(c *client.Client) error {
				return c.Sandbox(id).Process(pid).Signal(ctx, args[2])
			})
		},
	}
}

func sbKill(sio sandboxIO) *command {
	return &command{
		name:  "kill",
		usage: "SANDBOX PROCESS",
		short: "Kill a background process (SIGKILL)",
		long: `Kill a background process ('moat sandbox start'): SIGKILL to it and its
process group, as 'moat sandbox signal SANDBOX PROCESS KILL' (the API's
process.signal). It cannot be caught or ignored; 'moat sandbox wait' then
exits 137. Once the process has died, whatever it left running in its
call's cgroup (descendants that left the group with setsid too) is killed
as well.`,
		setup: func(*pflag.FlagSet) {},
		run: func(ctx context.Context, args []string) error {
			id, pid, err := procArgs("kill", args, 2, "a sandbox id and a process id")
			if err != nil {
				return err
			}
			return withClient(func(c *client.Client) error {
				return c.Sandbox(id).Process(pid).Signal(ctx, "KILL")
			})
		},
	}
}

func sbWait(sio sandboxIO) *command {
	var (
		timeout time.Duration
		asJSON  bool
	)
	return &command{
		name:  "wait",
		usage: "[--timeout DURATION] [--json] SANDBOX PROCESS",
		short: "Wait for a background process to end and exit with its code",
		long: `Wait until a background process ('moat sandbox start') has ended and exit
with its exit code (128+N when signal N ended it, 124 when its own
--timeout killed it, 137 with exit_reason oom…); with --json, print its
description (id, args, state, started_at, ended_at, result) too. Its
output is read with 'moat sandbox logs'.

With --timeout, give up after DURATION: the process keeps running, this
command exits 124 and --json prints it with state "running". ^C stops
waiting (130) and leaves the process running.`,
		setup: func(fl *pflag.FlagSet) {
			fl.DurationVar(&timeout, "timeout", 0, "stop waiting after `DURATION` (exit 124; the process keeps running); 0 waits as long as it runs")
			fl.BoolVar(&asJSON, "json", false, "print the process's description as JSON")
		},
		run: func(ctx context.Context, args []string) error {
			id, pid, err := procArgs("wait", args, 2, "a sandbox id and a process id")
			if err != nil {
				return err
			}
			if timeout < 0 {
				return usageError("--timeout must not be negative")
			}
			return withClient(func(c *client.Client) error {
				ctx, stop := interruptible(ctx)
				defer stop()
				wctx := ctx
				if timeout > 0 {
					var cancel context.CancelFunc
					wctx, cancel = context.WithTimeout(ctx, timeout)
					defer cancel()
				}
				p := c.Sandbox(id).Process(pid)
				info, err := p.Wait(wctx)
				switch {
				case err != nil && ctx.Err() != nil:
					return &exitError{code: exitInterrupted}
				case err != nil && errors.Is(wctx.Err(), context.DeadlineExceeded):
					if asJSON {
						info, err := p.Get(ctx)
						if err != nil {
							return err
						}
						if err := printJSONTo(sio.stdout, info); err != nil {
							return err
						}
					}
					fmt.Fprintf(sio.stderr, "moat: process %d is still running after %s\n", pid, timeout)
					return &exitError{code: exitWaitTimeout}
				case err != nil:
					return err
				}
				if asJSON {
					if err := printJSONTo(sio.stdout, info); err != nil {
						return err
					}
				}
				res := info.Result
				if res == nil {
					return errors.New("the daemon sent no result")
				}
				if !asJSON {
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
			})
		},
	}
}
