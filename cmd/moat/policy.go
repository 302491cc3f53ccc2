package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/moat-sandbox/moat/display"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/policy/compile"
	"github.com/moat-sandbox/moat/sandbox"
)

const policyLong = `Check policy files and explain what a policy decides.

  moat policy check FILE...
      Validate policy files (TOML: version, profile, allow/ask/deny lists of
      rules such as Exec(npm run *), Read(~/.ssh/**), Write(src/**),
      Net(domain:*.github.com)). Every problem is printed with its file and
      line. Exit 0 when every file is valid, 1 when one is not.

  moat policy explain [flags] [REQUEST...]
      Load the policy layers (managed /etc/moat/policy.toml, project
      <workspace>/.moat/policy.toml, user ~/.config/moat/policy.toml, and
      per-call --allow/--ask/--deny rules), print the effective profile, the
      filesystem roots, the protected paths and the warnings, and decide each
      REQUEST, written like a rule: 'Exec(git push origin)' (a shell string,
      every command in it is checked, wrappers such as env, nice, timeout,
      xargs and git's global options such as -C and -c normalized; $VAR in
      an argument stands for any text, a dynamic command word gets the
      strictest Exec rule), 'Read(~/.ssh/id_rsa)',
      'Write(src/main.go)', 'Net(github.com:443)'. Each decision names the
      rule that made it. Exit 0 when the policy loads (whatever it decides).

Layers: managed > project > user > per-call. Rules are evaluated deny, then
ask, then allow; a lower layer can only narrow. The effective profile is the
strictest one declared (untrusted when none is): untrusted reads the
workspace and the system directories and writes the workspace; trusted reads
the host but credentials and writes the workspace and the targets of allow
Write rules. Every .git (whole), shell rc files and policy files stay
read-only whatever the rules say. moat run (and moat serve) decide every
command with this policy and compile it into the sandbox: explain ends with
what a sandbox of the workspace gets from the kernel (binds, hidden and
read-only paths) and what only the policy engine enforces.

Exit codes: 0 as above; 1 an invalid policy file (check); 125 bad usage, or a
policy that cannot be loaded (explain).`

type policyFlags struct {
	json                   bool
	workspace, home        string
	managed, project, user string
	noManaged, noUser      bool
	allow, ask, deny       []string
	profile                string
}

func policyCommand() *command {
	f := &policyFlags{}
	return &command{
		name:  "policy",
		usage: "check FILE... | explain [flags] [REQUEST...]",
		short: "Check policy files; explain what a policy decides",
		long:  policyLong,
		setup: func(fl *pflag.FlagSet) {
			fl.BoolVar(&f.json, "json", false, "explain: print the explanation as JSON")
			fl.StringVarP(&f.workspace, "workspace", "w", "", "explain: the project root `DIR` (default: the current directory)")
			fl.StringVar(&f.home, "home", "", "explain: what ~ means, `DIR` (default: $HOME)")
			fl.StringVar(&f.managed, "managed", "", "explain: the managed layer's `FILE` (default /etc/moat/policy.toml)")
			fl.StringVar(&f.project, "project", "", "explain: the project layer's `FILE` (default <workspace>/.moat/policy.toml)")
			fl.StringVar(&f.user, "user", "", "explain: the user layer's `FILE` (default ~/.config/moat/policy.toml)")
			fl.BoolVar(&f.noManaged, "no-managed", false, "explain: leave the managed layer out")
			fl.BoolVar(&f.noUser, "no-user", false, "explain: leave the user layer out")
			fl.StringArrayVar(&f.allow, "allow", nil, "explain: a per-call allow `RULE` (repeatable; can only narrow)")
			fl.StringArrayVar(&f.ask, "ask", nil, "explain: a per-call ask `RULE` (repeatable)")
			fl.StringArrayVar(&f.deny, "deny", nil, "explain: a per-call deny `RULE` (repeatable)")
			fl.StringVar(&f.profile, "profile", "", "explain: a per-call profile (only \"untrusted\" narrows)")
		},
		run: func(ctx context.Context, args []string) error {
			if len(args) == 0 {
				return usageError("want 'check FILE...' or 'explain [REQUEST...]' (see 'moat policy --help')")
			}
			switch args[0] {
			case "check":
				return policyCheck(os.Stdout, args[1:])
			case "explain":
				return policyExplain(os.Stdout, f, args[1:])
			}
			return usageError("unknown policy command %q (want check or explain)", args[0])
		},
	}
}

// policyCheck validates files and prints one line per file (and one per
// problem).
func policyCheck(w io.Writer, files []string) error {
	if len(files) == 0 {
		return usageError("check needs at least one FILE")
	}
	bad := false
	for _, name := range files {
		abs, err := filepath.Abs(name)
		if err != nil {
			return usageError("%v", err)
		}
		// A regular file within the size cap, opened without blocking.
		data, err := policy.ReadFile(abs)
		if err != nil {
			return usageError("%v", err)
		}
		pf, err := policy.Parse(policy.Project, name, data)
		if err != nil {
			bad = true
			var list policy.ErrorList
			if errors.As(err, &list) {
				for _, e := range list {
					fmt.Fprintln(w, display.String(e.Error()))
				}
			} else {
				fmt.Fprintf(w, "%s: %s\n", display.String(name), display.String(err.Error()))
			}
			continue
		}
		profile := string(pf.Profile)
		if profile == "" {
			profile = "none declared"
		}
		fmt.Fprintf(w, "%s: ok (version %d, profile %s, %d rules)\n", display.String(name), pf.Version, display.String(profile), len(pf.Rules))
	}
	if bad {
		return &exitError{code: 1}
	}
	return nil
}

// policyExplain loads the layers and decides the requests.
func policyExplain(w io.Writer, f *policyFlags, args []string) error {
	c := policy.Context{Workspace: f.workspace, Home: f.home, Resolve: true}
	var err error
	if c.Workspace == "" {
		if c.Workspace, err = os.Getwd(); err != nil {
			return err
		}
	}
	if c.Workspace, err = filepath.Abs(c.Workspace); err != nil {
		return err
	}
	if c.Home == "" {
		if c.Home, err = os.UserHomeDir(); err != nil {
			return usageError("no home directory: give --home")
		}
	}
	src := policy.DefaultSources(c)
	for _, o := range []struct {
		flag string
		dst  *string
	}{{f.managed, &src.Managed}, {f.project, &src.Project}, {f.user, &src.User}} {
		if o.flag != "" {
			*o.dst = o.flag
		}
	}
	if f.noManaged {
		src.Managed = ""
	}
	if f.noUser {
		src.User = ""
	}
	reqs := make([]policy.Request, 0, len(args))
	for _, a := range args {
		r, err := policy.ParseRequest(a)
		if err != nil {
			return usageError("request %q: %v", a, err)
		}
		reqs = append(reqs, r)
	}
	eff, err := policy.Load(c, src)
	if err != nil {
		return err
	}
	if len(f.allow)+len(f.ask)+len(f.deny) > 0 || f.profile != "" {
		call, err := policy.ParseCall(policy.CallRules{Profile: policy.Profile(f.profile), Allow: f.allow, Ask: f.ask, Deny: f.deny})
		if err != nil {
			return err
		}
		if eff, err = eff.With(call); err != nil {
			return err
		}
	}
	ex := eff.Explain(reqs...)
	// What a sandbox for this workspace would get from the kernel.
	_, rep, err := compile.Policy(eff, &sandbox.Spec{Workspace: c.Workspace}, compile.Options{DryRun: true})
	if err != nil {
		return err
	}
	if f.json {
		return printJSONTo(w, struct {
			*policy.Explanation
			Sandbox *compile.Report `json:"sandbox"`
		}{ex, rep})
	}
	printExplanation(w, ex)
	printKernel(w, rep)
	return nil
}

// printKernel shows what the policy compiles into a sandbox of the
// workspace: the binds, the restricted paths and what stays unenforced.
// Paths found in the workspace are escaped (display.String).
func printKernel(w io.Writer, rep *compile.Report) {
	d := display.String
	fmt.Fprintf(w, "sandbox for this workspace (enforced by the kernel; %d entries searched):\n", rep.Walked)
	fmt.Fprintln(w, "  network: none (loopback only)")
	for _, b := range rep.Binds {
		mode := "read-only"
		if b.Writable {
			mode = "writable"
		}
		fmt.Fprintf(w, "  bind %s %s\n", d(b.Target), mode)
	}
	for _, r := range rep.Restrict {
		fmt.Fprintf(w, "  %-9s %s\n", d(string(r.Mode)), d(r.Path))
	}
	for _, c := range rep.Created {
		fmt.Fprintf(w, "  create %s\n", d(c))
	}
	for _, u := range rep.Unenforced {
		fmt.Fprintf(w, "  not enforced by the kernel: %s\n", d(u))
	}
}

// printExplanation shows ex; everything from a policy file, the
// workspace or the request is escaped (display.String).
func printExplanation(w io.Writer, ex *policy.Explanation) {
	d := display.String
	fmt.Fprintf(w, "profile: %s (workspace %s, home %s)\n", ex.Profile, d(ex.Context.Workspace), d(ex.Context.Home))
	fmt.Fprintln(w, "layers:")
	for _, l := range ex.Layers {
		where := l.Path
		if where == "" {
			where = l.Name
		}
		prof := ""
		if l.Profile != "" {
			prof = ", profile " + string(l.Profile)
		}
		fmt.Fprintf(w, "  %-8s %s (%d rules%s)\n", l.Layer, d(where), l.Rules, d(prof))
	}
	entries := func(title string, list []policy.PathEntry) {
		if len(list) == 0 {
			return
		}
		fmt.Fprintf(w, "%s:\n", title)
		for _, e := range list {
			note := ""
			if !e.Literal {
				note = " (pattern: checked by moat's file operations, not by mounts)"
			}
			fmt.Fprintf(w, "  %s%s  [%s]\n", d(e.Pattern), note, d(e.Source))
		}
	}
	entries("readable", ex.Roots.Readable)
	entries("writable", ex.Roots.Writable)
	entries("not readable", ex.Roots.DenyRead)
	entries("read-only", ex.Roots.ReadOnly)
	if len(ex.Roots.NetAllow) > 0 {
		fmt.Fprintf(w, "network allowlist (enforced by the egress proxy in --net proxy): %s\n", d(strings.Join(ex.Roots.NetAllow, ", ")))
	}
	for _, warn := range ex.Warnings {
		fmt.Fprintf(w, "warning: %s\n", d(warn))
	}
	for _, dec := range ex.Decisions {
		rule := ""
		if dec.Rule != nil {
			rule = dec.Rule.Text
			if src := dec.Rule.Source(); src != "" && dec.Rule.Layer != policy.Builtin {
				rule = src + ": " + rule
			}
		}
		fmt.Fprintf(w, "%-5s %s\n      rule: %s\n      reason: %s\n", dec.Effect, d(requestText(dec.Request)), d(rule), d(dec.Reason))
	}
}

// requestText writes a request back the way it was given.
func requestText(r policy.Request) string {
	arg := r.Command
	switch {
	case r.Argv != nil:
		arg = display.Join(r.Argv) // words stay apart; printed escaped
	case r.Path != "":
		arg = r.Path
	case r.Host != "":
		arg = r.Host
	}
	return fmt.Sprintf("%s(%s)", r.Kind, arg)
}
