package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/display"
	"github.com/moat-sandbox/moat/sandbox"
)

const snapshotLong = `List, delete and fork the snapshots of a running moat daemon ('moat
serve'). A snapshot is an immutable capture of a sandbox's filesystem
('moat sandbox snapshot SANDBOX'): only what changed since the template or
the previous snapshot is stored, layered on it. Processes are not
captured: a sandbox restored or forked from a snapshot starts with none
running.

Commands:
  ls     List your snapshots
  rm     Delete snapshots
  fork   Create sandboxes that start from a snapshot and print their ids

Run 'moat snapshot COMMAND --help' for a command's flags. Roll a sandbox
back with 'moat sandbox restore SANDBOX SNAPSHOT'; start one sandbox from a
snapshot with 'moat sandbox create --snapshot ID'.

Connection: as for 'moat sandbox': MOAT_URL (default
http://127.0.0.1:7070) and the API token MOAT_TOKEN, else the file
MOAT_TOKEN_FILE, else <MOAT_DATA>/token, else /var/lib/moat/token.

Exit codes: 0 done; 1 no such snapshot, or it is in use (another snapshot
is layered on it, or a live sandbox runs from it); 125 when the daemon
cannot be reached or refuses the request, or the command line is wrong.`

// snapshotCommand is `moat snapshot`: a client of a running daemon.
func snapshotCommand() *command {
	return &command{
		name:  "snapshot",
		usage: "COMMAND [flags] [ARGS...]",
		short: "List, delete and fork the snapshots of a running daemon",
		long:  snapshotLong,
		setup: func(*pflag.FlagSet) {},
		// The rest, flags included, is the subcommand's.
		flagsFirst: true,
		run: func(ctx context.Context, args []string) error {
			return runSnapshot(ctx, args, sandboxIO{os.Stdin, os.Stdout, os.Stderr})
		},
	}
}

func snapshotSubcommands(sio sandboxIO) []*command {
	return []*command{snapList(sio), snapRemove(sio), snapFork(sio)}
}

// runSnapshot dispatches `moat snapshot COMMAND ARGS...`.
func runSnapshot(ctx context.Context, args []string, sio sandboxIO) error {
	sub, err := dispatch(ctx, "snapshot", snapshotLong, snapshotSubcommands(sio), args, sio)
	if sub != nil && snapshotRefused(err) {
		fmt.Fprintf(sio.stderr, "moat snapshot %s: %s\n", sub.name, display.String(err.Error()))
		return &exitError{code: 1}
	}
	return withSub(sub, daemonHint(err))
}

// snapshotRefused reports whether the daemon refused a request for the
// snapshot's sake (missing, in use): exit 1.
func snapshotRefused(err error) bool {
	switch client.Code(err) {
	case api.CodeNotFound, api.CodeConflict:
		return true
	}
	return false
}

// snapshotLine is a snapshot's summary: size, changes, chain.
func snapshotLine(sn *api.Snapshot) string {
	s := fmt.Sprintf("%s in %d entries", formatBytes(sn.Bytes), sn.Entries)
	if sn.Whiteouts > 0 {
		s += fmt.Sprintf(" (%d deleted)", sn.Whiteouts)
	}
	s += fmt.Sprintf(", depth %d", sn.Depth)
	if sn.PausedMs > 0 {
		s += fmt.Sprintf(", sandbox paused %d ms", sn.PausedMs)
	}
	return s
}

func sbSnapshot(sio sandboxIO) *command {
	var asJSON bool
	return &command{
		name:  "snapshot",
		usage: "[--json] SANDBOX",
		short: "Capture a sandbox's filesystem into a snapshot and print its id",
		long: `Pause the sandbox, capture its filesystem into an immutable snapshot,
resume it, and print the snapshot's id on stdout (its size and what it
holds on stderr; with --json, its whole description on stdout).

Only what changed since the sandbox's template, or since the snapshot it
started from or was last snapshotted to, is stored. Processes are not
captured. A sandbox whose workspace is a host directory, or with a
writable bind, is refused: the snapshot would miss those files.`,
		setup: func(fl *pflag.FlagSet) {
			fl.BoolVar(&asJSON, "json", false, "print the snapshot's description as JSON")
		},
		run: func(ctx context.Context, args []string) error {
			if len(args) != 1 {
				return usageError("snapshot takes one sandbox id")
			}
			return withClient(func(c *client.Client) error {
				sn, err := c.Sandbox(args[0]).TakeSnapshot(ctx)
				if err != nil {
					return err
				}
				if asJSON {
					return printJSONTo(sio.stdout, sn)
				}
				fmt.Fprintf(sio.stderr, "moat: snapshot %s of %s: %s\n", display.String(sn.ID), display.String(args[0]), snapshotLine(sn))
				_, err = fmt.Fprintln(sio.stdout, sn.ID)
				return err
			})
		},
	}
}

func sbRestore(sio sandboxIO) *command {
	var asJSON bool
	return &command{
		name:  "restore",
		usage: "[--json] SANDBOX SNAPSHOT",
		short: "Roll a sandbox back to a snapshot",
		long: `Roll the sandbox's filesystem back to the snapshot (one of yours, taken
from this sandbox or another): every process of the sandbox ends and it
starts afresh from the snapshot, keeping its id, limits, policy, network
and timeouts. Prints the sandbox's id (with --json, its description).`,
		setup: func(fl *pflag.FlagSet) {
			fl.BoolVar(&asJSON, "json", false, "print the sandbox's description as JSON")
		},
		run: func(ctx context.Context, args []string) error {
			if len(args) != 2 {
				return usageError("restore takes a sandbox id and a snapshot id")
			}
			return withClient(func(c *client.Client) error {
				sb := c.Sandbox(args[0])
				info, err := sb.Restore(ctx, args[1])
				if err != nil {
					return err
				}
				return printMade(sio.stdout, asJSON, info.ID, info)
			})
		},
	}
}

func snapList(sio sandboxIO) *command {
	var asJSON bool
	return &command{
		name:  "ls",
		usage: "[--json]",
		short: "List your snapshots",
		long:  "List your snapshots, oldest first.",
		setup: func(fl *pflag.FlagSet) {
			fl.BoolVar(&asJSON, "json", false, "print the list as JSON")
		},
		run: func(ctx context.Context, args []string) error {
			if len(args) > 0 {
				return usageError("ls takes no arguments")
			}
			return withClient(func(c *client.Client) error {
				list, err := c.Snapshots(ctx)
				if err != nil {
					return err
				}
				now := time.Now()
				return printList(sio.stdout, asJSON, list, "ID\tTEMPLATE\tPARENT\tSANDBOX\tSIZE\tENTRIES\tDEPTH\tCREATED", func(s api.Snapshot) string {
					d := display.String
					return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s", d(s.ID), d(orDash(s.Template)), d(orDash(s.Parent)), d(orDash(s.Sandbox)),
						formatBytes(s.Bytes), s.Entries, s.Depth, ago(now, s.Created))
				})
			})
		},
	}
}

// orDash is s, or "-" when it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func snapRemove(sio sandboxIO) *command {
	var asJSON bool
	return &command{
		name:  "rm",
		usage: "[--json] SNAPSHOT...",
		short: "Delete snapshots",
		long: `Delete each snapshot named; print each id deleted. A snapshot another
snapshot is layered on, or that a live sandbox runs from, is kept (exit
1): delete the later snapshots or end the sandboxes first. With --json,
print one object instead: {"removed": [ids], "failed": [{"id", "code",
"error"}]} (the reasons are on stderr too).`,
		setup: func(fl *pflag.FlagSet) {
			fl.BoolVar(&asJSON, "json", false, "print what was removed and what was not as one JSON object")
		},
		run: func(ctx context.Context, args []string) error {
			if len(args) == 0 {
				return usageError("rm takes one or more snapshot ids")
			}
			return withClient(func(c *client.Client) error {
				code := 0
				r := newRemoval()
				for _, id := range args {
					err := c.DeleteSnapshot(ctx, id)
					r.done(sio.stdout, asJSON, id, client.Code(err), err)
					if err == nil {
						continue
					}
					if snapshotRefused(err) {
						code = max(code, 1)
					} else {
						code = sandbox.ExitSetupFailed
					}
					fmt.Fprintf(sio.stderr, "moat snapshot rm: %s: %s\n", display.String(id), display.String(daemonHint(err).Error()))
				}
				if err := r.print(sio.stdout, asJSON); err != nil {
					return err
				}
				if code != 0 {
					return &exitError{code: code}
				}
				return nil
			})
		},
	}
}

func snapFork(sio sandboxIO) *command {
	var (
		cf     createFlags
		count  int
		asJSON bool
	)
	return &command{
		name:  "fork",
		usage: "[--count N] [flags] SNAPSHOT",
		short: "Create sandboxes that start from a snapshot and print their ids",
		long: `Create --count sandboxes (1 to 64) that start from the snapshot, each
with its own copy of the snapshot's filesystem, and print their ids, one
a line (with --json, their descriptions). The other flags are those of
'moat sandbox create' and apply to each. All or nothing: when one
sandbox cannot be created, those made are deleted.`,
		setup: func(fl *pflag.FlagSet) {
			fl.IntVarP(&count, "count", "n", 1, "how many sandboxes `N` to create")
			cf.declare(fl)
			fl.BoolVar(&asJSON, "json", false, "print the sandboxes' descriptions as a JSON array")
		},
		run: func(ctx context.Context, args []string) error {
			if len(args) != 1 {
				return usageError("fork takes one snapshot id")
			}
			if count < 1 || count > 64 {
				return usageError("--count %d: want 1 to 64", count)
			}
			req, err := cf.request()
			if err != nil {
				return err
			}
			return withClient(func(c *client.Client) error {
				sbs, err := c.Fork(ctx, args[0], count, req)
				if err != nil {
					return err
				}
				if asJSON {
					list := make([]*api.Sandbox, len(sbs))
					for i, sb := range sbs {
						list[i] = sb.Snapshot()
					}
					return printJSONTo(sio.stdout, list)
				}
				for _, sb := range sbs {
					fmt.Fprintln(sio.stdout, sb.ID())
				}
				return nil
			})
		},
	}
}
