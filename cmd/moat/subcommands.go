package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/templates"
)

// dispatch runs `moat GROUP COMMAND ARGS...` for a command made of
// subcommands (moat sandbox, moat snapshot, moat template, moat
// approvals): help, flag parsing (parseFlags), then the subcommand. It
// returns the subcommand that ran (nil for help or bad usage) and its
// error.
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
	rest, ok, err := parseFlags(group+" "+sub.name, sub, args[1:], sio.stdout)
	if err != nil {
		return nil, usageError("%s: %v", sub.name, err)
	}
	if !ok {
		return nil, nil
	}
	return sub, sub.run(ctx, rest)
}

// parseFlags parses the flags of c, named "moat "+path, from args and
// returns the positional arguments. Flags may come before, between or
// after them (pflag's interspersed parsing) for every command but those
// with flagsFirst (moat run); "--" ends the flags, and what follows it is
// positional whatever it looks like (the command line of exec and start).
// With --help it prints c's help on stdout and returns ok false and no
// error; a bad flag is a usage error.
func parseFlags(path string, c *command, args []string, stdout io.Writer) (rest []string, ok bool, err error) {
	fl := pflag.NewFlagSet("moat "+path, pflag.ContinueOnError)
	fl.SetInterspersed(!c.flagsFirst)
	fl.SetOutput(io.Discard)
	c.setup(fl)
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprintf(stdout, "%s\n\nUsage:\n  moat %s %s\n", strings.TrimSpace(c.long), path, c.usage)
			if u := fl.FlagUsages(); u != "" {
				fmt.Fprintf(stdout, "\nFlags:\n%s", u)
			}
			return nil, false, nil
		}
		hint := ""
		if strings.Contains(c.usage, " -- ") {
			hint = "; a command line with flags of its own goes after --"
		}
		return nil, false, usageError("%v (see 'moat %s --help'%s)", err, path, hint)
	}
	return fl.Args(), true, nil
}

// withSub names the subcommand sub in a failure that is not an exit code
// or a usage error (those say what they are about already).
func withSub(sub *command, err error) error {
	var ee *exitError
	var named subNamed
	if sub == nil || err == nil || errors.As(err, &ee) || errors.Is(err, errUsage) || errors.As(err, &named) {
		return err
	}
	return fmt.Errorf("%s: %w", sub.name, err)
}

// subNamed is a subcommand's failure whose message names what the
// subcommand did already ("import SRC: …"): withSub adds nothing.
type subNamed struct{ error }

func (e subNamed) Unwrap() error { return e.error }

// daemonHint adds to a failure to dial the daemon where moat looked for
// it.
func daemonHint(err error) error {
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return fmt.Errorf("%w (is 'moat serve' running at %s? set MOAT_URL)", err, daemonURL())
	}
	return err
}

// daemonClient is how every command that talks to a running daemon
// (moat sandbox, snapshot, approvals, audit) finds it: the address
// daemonURL and the API token apiToken.
func daemonClient() (*client.Client, error) {
	tok, err := apiToken()
	if err != nil {
		return nil, err
	}
	return client.New(client.WithHTTP(daemonURL(), tok))
}

// daemonURL is MOAT_URL, or client.DefaultURL.
func daemonURL() string {
	if u := os.Getenv("MOAT_URL"); u != "" {
		return u
	}
	return client.DefaultURL
}

// dataDirEnv is the daemon's data directory as the environment names it:
// MOAT_DATA, or /var/lib/moat.
func dataDirEnv() string {
	if d := os.Getenv("MOAT_DATA"); d != "" {
		return d
	}
	return defaultDataDir
}

// apiToken finds the API token: MOAT_TOKEN, else the file
// MOAT_TOKEN_FILE, else <MOAT_DATA>/token, else /var/lib/moat/token.
func apiToken() (string, error) {
	if tok := strings.TrimSpace(os.Getenv("MOAT_TOKEN")); tok != "" {
		return tok, nil
	}
	file := os.Getenv("MOAT_TOKEN_FILE")
	if file == "" {
		file = filepath.Join(dataDirEnv(), "token")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("no API token: MOAT_TOKEN is empty and the token file cannot be read (%w; set MOAT_TOKEN, MOAT_TOKEN_FILE or MOAT_DATA)", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("no API token: MOAT_TOKEN is empty and the token file %s is empty", file)
	}
	return tok, nil
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

// removal is what rm --json prints (moat sandbox rm, moat snapshot rm,
// moat template rm): the ids or names removed, and those that were not
// with why. Both lists are always present.
type removal struct {
	Removed []string        `json:"removed"`
	Failed  []removeFailure `json:"failed"`
}

// removeFailure is one id or name rm could not remove: the API error code
// when the daemon refused (not_found, conflict…) and the message.
type removeFailure struct {
	ID    string `json:"id"`
	Code  string `json:"code,omitempty"`
	Error string `json:"error"`
}

func newRemoval() *removal {
	return &removal{Removed: []string{}, Failed: []removeFailure{}}
}

// done records what rm did with id (err nil: removed) and, without
// asJSON, prints a removed id on w.
func (r *removal) done(w io.Writer, asJSON bool, id, code string, err error) {
	if err == nil {
		r.Removed = append(r.Removed, id)
		if !asJSON {
			fmt.Fprintln(w, id)
		}
		return
	}
	r.Failed = append(r.Failed, removeFailure{ID: id, Code: code, Error: err.Error()})
}

// print writes the object with asJSON.
func (r *removal) print(w io.Writer, asJSON bool) error {
	if !asJSON {
		return nil
	}
	return printJSONTo(w, r)
}

// storeCode is the API error code that names a refusal of the template
// store ("" for another failure).
func storeCode(err error) string {
	switch {
	case errors.Is(err, templates.ErrNotFound):
		return api.CodeNotFound
	case errors.Is(err, templates.ErrExists), errors.Is(err, templates.ErrInUse):
		return api.CodeConflict
	}
	return ""
}
