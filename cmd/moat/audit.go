package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/display"
)

const auditLong = `List the audit events of a running moat daemon ('moat serve'): every call
made to it (creates, execs, background processes and their stdin and
signals, file operations, snapshots, reads too), each policy decision,
approvals and the egress proxy's decisions, with who made the call and
what it decided. The daemon answers with the events of the token's
tenant only (audit.query); choose the tenant with its token.

Filters (all optional, combined): --sandbox, --call, --kind (a prefix:
"process." matches process.exec and process.exit), --decision (allow,
deny, ask), --actor, --since and --until (a duration back from now, such
as 10m or 2h, or an RFC 3339 time). Without --limit the last 100 matching
events are printed, oldest first; --limit N prints the last N.

The table is SEQ TIME SANDBOX ACTOR KIND DECISION DETAIL, where DETAIL is
the call's error, else its deciding rule, else its request (as JSON);
what a sandbox chose is shown escaped. --json prints the events as a JSON
array (seq, time, tenant, actor, sandbox, call, kind, decision, rule,
request, result, duration_ms, error; docs/API.md, "Audit events").
Every query is an audit event itself (kind audit.query).

Connection: as for 'moat sandbox': MOAT_URL (default
http://127.0.0.1:7070) and the API token MOAT_TOKEN, else the file
MOAT_TOKEN_FILE, else <MOAT_DATA>/token, else /var/lib/moat/token.

Exit codes: 0 done; 125 when the daemon cannot be reached or refuses the
request, or the command line is wrong.

Examples:
  moat audit --sandbox sb-123
  moat audit --kind process. --since 1h --json
  moat audit --decision deny --limit 20`

// auditDefaultLimit is how many events moat audit prints without --limit.
const auditDefaultLimit = 100

func auditCommand() *command {
	var (
		q            api.AuditQuery
		since, until string
		limit        int
		asJSON       bool
	)
	sio := sandboxIO{os.Stdin, os.Stdout, os.Stderr}
	return &command{
		name:  "audit",
		usage: "[--sandbox ID] [--kind PREFIX] [--since D|TIME] [--limit N] [--json] [filters]",
		short: "List the audit events of a running daemon (calls and decisions)",
		long:  auditLong,
		setup: func(fl *pflag.FlagSet) {
			fl.StringVar(&q.Sandbox, "sandbox", "", "only the events of sandbox `ID`")
			fl.StringVar(&q.Call, "call", "", "only the events of call or process `ID`")
			fl.StringVar(&q.Kind, "kind", "", "only the events whose kind starts with `PREFIX` (process., file.write)")
			fl.StringVar(&q.Decision, "decision", "", "only the events with `DECISION` allow, deny or ask")
			fl.StringVar(&q.Actor, "actor", "", "only the events of `ACTOR` (token:xxxxxxxx, stdio, system, pruner)")
			fl.StringVar(&since, "since", "", "only the events at or after `WHEN`: a duration back from now (10m) or an RFC 3339 time")
			fl.StringVar(&until, "until", "", "only the events before `WHEN`: a duration back from now or an RFC 3339 time")
			fl.IntVarP(&limit, "limit", "n", auditDefaultLimit, "print the last `N` matching events")
			fl.BoolVar(&asJSON, "json", false, "print the events as a JSON array")
		},
		run: func(ctx context.Context, args []string) error {
			if len(args) > 0 {
				return usageError("audit takes no arguments (filters are flags: --sandbox ID…)")
			}
			if limit < 1 {
				return usageError("--limit %d: want 1 or more", limit)
			}
			now := time.Now()
			var err error
			if q.Since, err = parseWhen("since", since, now); err != nil {
				return err
			}
			if q.Until, err = parseWhen("until", until, now); err != nil {
				return err
			}
			return withClient(func(c *client.Client) error {
				events, more, err := lastEvents(ctx, c, q, limit)
				if err != nil {
					return err
				}
				if asJSON {
					return printJSONTo(sio.stdout, events)
				}
				if err := printList(sio.stdout, false, events, "SEQ\tTIME\tSANDBOX\tACTOR\tKIND\tDECISION\tDETAIL", auditRow); err != nil {
					return err
				}
				if more {
					fmt.Fprintf(sio.stderr, "moat audit: earlier events match too (raise --limit or narrow the filters)\n")
				}
				return nil
			})
		},
	}
}

// parseWhen reads --since or --until: "" (none), a duration back from
// now, or an RFC 3339 time.
func parseWhen(name, v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	return time.Time{}, usageError("--%s %q: want a duration back from now (10m, 2h) or an RFC 3339 time (2026-01-02T15:04:05Z)", name, v)
}

// lastEvents fetches the last limit events matching q, oldest first,
// paging backwards (audit.query with newest and before_seq) past the
// daemon's page size; more says that earlier events match too.
func lastEvents(ctx context.Context, c *client.Client, q api.AuditQuery, limit int) ([]api.AuditEvent, bool, error) {
	var events []api.AuditEvent
	q.Newest = true
	for {
		q.Limit = min(limit-len(events), audit.MaxLimit)
		page, err := c.Audit(ctx, q)
		if err != nil {
			return nil, false, err
		}
		events = append(page.Events, events...)
		if !page.More || len(page.Events) == 0 {
			return events, false, nil
		}
		if len(events) >= limit {
			return events, true, nil
		}
		q.BeforeSeq = page.Events[0].Seq
	}
}

// auditRow is one event in the table; every field a caller or a sandbox
// chose is escaped.
func auditRow(e api.AuditEvent) string {
	detail := ""
	switch {
	case e.Error != "":
		detail = "error: " + e.Error
	case e.Rule != "":
		detail = e.Rule
	case len(e.Request) > 0:
		detail = string(e.Request)
	}
	d := display.String
	return fmt.Sprintf("%d\t%s\t%s\t%s\t%s\t%s\t%s", e.Seq, e.Time.Local().Format("2006-01-02 15:04:05"), d(orDash(e.Sandbox)), d(orDash(e.Actor)),
		d(e.Kind), d(orDash(e.Decision)), display.StringN(strings.TrimSpace(detail), 256))
}
