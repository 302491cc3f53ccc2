package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/display"
)

const approvalsLong = `List, follow and answer the approvals of a running moat daemon ('moat
serve'): calls of agents that a policy's ask rule holds until a person
answers. An approval nobody answers within the daemon's --approval-timeout
is denied.

Commands:
  ls      List approvals (pending ones by default), or follow them
  allow   Allow a pending approval, once or always
  deny    Deny a pending approval, with a reason the agent reads

Allow --always lets the same request (same kind, same command or path,
same deciding rule) of the same sandbox run without asking again, for the
sandbox's life.

Connection: MOAT_URL (default http://127.0.0.1:7070). Listing takes the
API token as 'moat sandbox' finds it (MOAT_TOKEN, else the file
MOAT_TOKEN_FILE, else <MOAT_DATA>/token, else /var/lib/moat/token), or
else the approver token. Answering takes an approver token: MOAT_APPROVER_TOKEN,
or the file MOAT_APPROVER_TOKEN_FILE (default <data>/approver-token, <data>
being MOAT_DATA or /var/lib/moat). An agent's token cannot answer.

Exit codes: 0 done; 1 no such approval, or it is no longer pending; 125
when the daemon cannot be reached or refuses the request, or the command
line is wrong.`

// approvalsCommand is `moat approvals`.
func approvalsCommand() *command {
	return &command{
		name:  "approvals",
		usage: "COMMAND [flags] [ARGS...]",
		short: "List and answer the approvals of a running daemon",
		long:  approvalsLong,
		setup: func(*pflag.FlagSet) {},
		// The rest, flags included, is the subcommand's.
		flagsFirst: true,
		run: func(ctx context.Context, args []string) error {
			return runApprovals(ctx, args, sandboxIO{os.Stdin, os.Stdout, os.Stderr})
		},
	}
}

func approvalsSubcommands(sio sandboxIO) []*command {
	return []*command{apList(sio), apAnswer(sio, true), apAnswer(sio, false)}
}

// runApprovals dispatches `moat approvals COMMAND ARGS...`.
func runApprovals(ctx context.Context, args []string, sio sandboxIO) error {
	sub, err := dispatch(ctx, "approvals", approvalsLong, approvalsSubcommands(sio), args, sio)
	switch client.Code(err) {
	case api.CodeNotFound, api.CodeConflict:
		fmt.Fprintf(sio.stderr, "moat approvals %s: %s\n", sub.name, display.String(err.Error()))
		return &exitError{code: 1}
	}
	return err
}

// approverToken finds the approver token: MOAT_APPROVER_TOKEN, the file
// MOAT_APPROVER_TOKEN_FILE, or <data>/approver-token.
func approverToken() (string, error) {
	if tok := strings.TrimSpace(os.Getenv("MOAT_APPROVER_TOKEN")); tok != "" {
		return tok, nil
	}
	file := os.Getenv("MOAT_APPROVER_TOKEN_FILE")
	if file == "" {
		file = filepath.Join(dataDirEnv(), "approver-token")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("no approver token: MOAT_APPROVER_TOKEN is empty and the token file cannot be read (%w)", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("no approver token: the token file %s is empty", file)
	}
	return tok, nil
}

// withApprovalsClient calls fn with a client of the daemon: with the
// approver token when approver is set, else with the API token of the
// environment, or the approver token when there is none.
func withApprovalsClient(approver bool, fn func(c *client.Client) error) error {
	if m := os.Getenv("MOAT_MODE"); m != "" && m != client.ModeHTTP {
		return usageError("MOAT_MODE=%s: 'moat approvals' talks to a running daemon over HTTP (MOAT_URL)", m)
	}
	var c *client.Client
	var err error
	if !approver {
		c, err = daemonClient()
	}
	if approver || err != nil {
		tok, terr := approverToken()
		if terr != nil {
			if err != nil {
				return err
			}
			return terr
		}
		if c, err = client.New(client.WithHTTP(daemonURL(), tok)); err != nil {
			return err
		}
	}
	defer c.Close()
	err = fn(c)
	if client.Code(err) == api.CodePermissionDenied && approver {
		return fmt.Errorf("%w (answering needs an approver token: MOAT_APPROVER_TOKEN or MOAT_APPROVER_TOKEN_FILE)", err)
	}
	return err
}

func apList(sio sandboxIO) *command {
	var (
		all, asJSON, follow bool
		sandboxID           string
	)
	return &command{
		name:  "ls",
		usage: "[--all] [--sandbox ID] [--json] [--follow]",
		short: "List approvals (pending ones by default), or follow them",
		long: `List the pending approvals of the tenant (with --all, the answered ones
the daemon still keeps too), oldest first. With --follow, print them and
then every approval as it is created and answered, until interrupted (one
JSON object per line with --json).`,
		setup: func(fl *pflag.FlagSet) {
			fl.BoolVarP(&all, "all", "a", false, "include approvals that were answered, expired or withdrawn")
			fl.StringVar(&sandboxID, "sandbox", "", "only the approvals of sandbox `ID`")
			fl.BoolVar(&asJSON, "json", false, "print JSON (with --follow, one approval per line)")
			fl.BoolVarP(&follow, "follow", "f", false, "keep printing approvals as they are created and answered")
		},
		run: func(ctx context.Context, args []string) error {
			if len(args) > 0 {
				return usageError("ls takes no arguments")
			}
			req := api.ListApprovals{Sandbox: sandboxID}
			if all {
				req.State = "all"
			}
			return withApprovalsClient(false, func(c *client.Client) error {
				if !follow {
					list, err := c.Approvals(ctx, req)
					if err != nil {
						return err
					}
					now := time.Now()
					return printList(sio.stdout, asJSON, list, "ID\tSANDBOX\tSTATE\tAGE\tREQUEST\tRULE", func(a api.Approval) string {
						return approvalRow(now, a)
					})
				}
				ctx, stop := interruptible(ctx)
				defer stop()
				for a, err := range c.FollowApprovals(ctx, req) {
					if err != nil {
						return err
					}
					if asJSON {
						if err := printJSONLine(sio.stdout, a); err != nil {
							return err
						}
						continue
					}
					fmt.Fprintln(sio.stdout, strings.ReplaceAll(approvalRow(time.Now(), a), "\t", "  "))
				}
				return nil
			})
		},
	}
}

// approvalRow is one approval in the table of ls. Each field is escaped
// (display.String): the request, the rule and its source come from the
// sandbox, and a tab or newline in them would also break the table.
func approvalRow(now time.Time, a api.Approval) string {
	state := a.State
	switch {
	case a.State == api.ApprovalPending:
		state += fmt.Sprintf(" (%ds left)", max(0, int(a.ExpiresAt.Sub(now).Seconds())))
	case a.State == api.ApprovalAllowed && a.Scope != "":
		state += " " + a.Scope + " by " + a.AnsweredBy
	case a.AnsweredBy != "":
		state += " by " + a.AnsweredBy
	}
	d := display.String
	return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s (%s)", d(a.ID), d(a.Sandbox), d(state), ago(now, a.CreatedAt), d(a.Request), d(a.Rule), d(a.Source))
}

// printJSONLine writes v as one line of JSON (with no raw invisible
// character: display.JSON).
func printJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(display.JSON(b), '\n'))
	return err
}

func apAnswer(sio sandboxIO, allow bool) *command {
	var (
		always, asJSON bool
		reason         string
	)
	c := &command{
		name:  "deny",
		usage: "ID [--reason TEXT] [--json]",
		short: "Deny a pending approval, with a reason the agent reads",
		long:  "Deny a pending approval: the call that waits for it fails (policy_denied), with --reason told to the agent.",
		setup: func(fl *pflag.FlagSet) {
			fl.StringVar(&reason, "reason", "", "why, in `TEXT` the agent reads")
			fl.BoolVar(&asJSON, "json", false, "print the answered approval as JSON")
		},
	}
	decision := api.DecisionDeny
	if allow {
		decision = api.DecisionAllow
		c.name, c.usage = "allow", "ID [--always] [--json]"
		c.short = "Allow a pending approval, once or always"
		c.long = `Allow a pending approval: the call that waits for it runs. With --always,
later identical requests of the same sandbox (same kind, same command or
path, same deciding rule) run without asking, for the sandbox's life.`
		c.setup = func(fl *pflag.FlagSet) {
			fl.BoolVar(&always, "always", false, "also allow the same request of this sandbox from now on")
			fl.BoolVar(&asJSON, "json", false, "print the answered approval as JSON")
		}
	}
	c.run = func(ctx context.Context, args []string) error {
		if len(args) != 1 {
			return usageError("%s takes one approval id", c.name)
		}
		req := api.AnswerApproval{ID: args[0], Decision: decision, Reason: reason}
		if always {
			req.Scope = api.ScopeAlways
		}
		return withApprovalsClient(true, func(cl *client.Client) error {
			a, err := cl.AnswerApproval(ctx, req)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSONTo(sio.stdout, a)
			}
			what := a.State
			if a.Scope != "" {
				what += " (" + a.Scope + ")"
			}
			d := display.String
			_, err = fmt.Fprintf(sio.stdout, "%s %s: %s in %s\n", d(a.ID), d(what), d(a.Request), d(a.Sandbox))
			return err
		})
	}
	return c
}
