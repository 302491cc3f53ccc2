package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/moat-sandbox/moat/client"
)

// dispatch runs `moat GROUP COMMAND ARGS...` for a command made of
// subcommands (moat template, moat snapshot): help, flag parsing (flags
// may follow positional arguments), then the subcommand. It returns the
// subcommand that ran (nil for help or bad usage) and its error.
func dispatch(ctx context.Context, group, long string, subs []*command, args []string, sio sandboxIO) (*command, error) {
	if len(args) == 0 {
		return nil, usageError("no command (see 'moat %s --help')", group)
	}
	if args[0] == "help" {
		if len(args) == 1 {
			fmt.Fprintf(sio.stdout, "%s\n", long)
			return nil, nil
		}
		args = []string{args[1], "--help"}
	}
	var sub *command
	for _, s := range subs {
		if s.name == args[0] {
			sub = s
		}
	}
	if sub == nil {
		return nil, usageError("unknown command %q (see 'moat %s --help')", args[0], group)
	}
	fl := pflag.NewFlagSet("moat "+group+" "+sub.name, pflag.ContinueOnError)
	fl.SetInterspersed(true)
	fl.SetOutput(io.Discard)
	sub.setup(fl)
	if err := fl.Parse(args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprintf(sio.stdout, "%s\n\nUsage:\n  moat %s %s %s\n", strings.TrimSpace(sub.long), group, sub.name, sub.usage)
			if u := fl.FlagUsages(); u != "" {
				fmt.Fprintf(sio.stdout, "\nFlags:\n%s", u)
			}
			return nil, nil
		}
		return nil, usageError("%s: %v (see 'moat %s %s --help')", sub.name, err, group, sub.name)
	}
	return sub, sub.run(ctx, fl.Args())
}

// withSub names the subcommand sub in a failure that is not an exit code
// or a usage error (those say what they are about already).
func withSub(sub *command, err error) error {
	var ee *exitError
	if sub == nil || err == nil || errors.As(err, &ee) || errors.Is(err, errUsage) {
		return err
	}
	return fmt.Errorf("%s: %w", sub.name, err)
}

// daemonHint adds to a failure to dial the daemon where moat looked for
// it.
func daemonHint(err error) error {
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

// formatBytes writes n in binary units ("512 B", "1.5 KiB", "12.0 MiB").
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
