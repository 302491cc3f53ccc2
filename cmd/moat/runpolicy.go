package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/admit"
	"github.com/moat-sandbox/moat/display"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/policy/compile"
	"github.com/moat-sandbox/moat/sandbox"
)

// runPolicy is what the policy decided for one moat run; it is printed as
// the "policy" object of the --json result.
type runPolicy struct {
	Profile policy.Profile `json:"profile"`
	// Effect of the command's decision after any approval: allow or deny.
	Effect policy.Effect `json:"effect"`
	// Decided is the policy's own answer: allow, ask or deny.
	Decided policy.Effect `json:"decided"`
	Rule    string        `json:"rule"`
	Source  string        `json:"source,omitempty"`
	Reason  string        `json:"reason"`
	// Approval says how an ask was answered: "terminal" (allowed on the
	// terminal), "refused", "timeout", "no terminal".
	Approval string `json:"approval,omitempty"`
	// Kernel is what the policy compiled into the sandbox.
	Kernel *compile.Report `json:"kernel,omitempty"`

	eff *policy.Effective // the policy the run's egress proxy decides with
}

// runResult is moat run's --json output: the sandbox's result and the
// policy's decision.
type runResult struct {
	*sandbox.Result
	// Template is the template of the sandbox's root (--template).
	Template string     `json:"template,omitempty"`
	Policy   *runPolicy `json:"policy,omitempty"`
	// Network is the mode and what the egress proxy did.
	Network *runNetwork `json:"network,omitempty"`
}

// applyPolicy admits this run (package admit): it loads the policy layers
// (managed /etc/moat/policy.toml, the workspace's .moat/policy.toml, the
// user's ~/.config/moat/policy.toml, and the per-call flags), decides the
// command (asking on the terminal for an ask rule) and, when it is
// allowed, compiles the policy into the spec. A denied command returns
// the spec unchanged and rp.Effect deny; a spec the policy refuses (a
// bind of credentials) is an error.
func applyPolicy(f *runFlags, spec *sandbox.Spec, args []string, rio *runIO) (*sandbox.Spec, *runPolicy, error) {
	home, err := rio.homeDir()
	if err != nil {
		return nil, nil, err
	}
	if spec.Workspace != "" {
		if spec.Workspace, err = filepath.Abs(spec.Workspace); err != nil {
			return nil, nil, fmt.Errorf("%w: workspace: %v", sandbox.ErrInvalidSpec, err)
		}
	}
	for i := range spec.Binds {
		if spec.Binds[i].Source, err = filepath.Abs(spec.Binds[i].Source); err != nil {
			return nil, nil, fmt.Errorf("%w: bind: %v", sandbox.ErrInvalidSpec, err)
		}
	}
	if err := spec.Validate(); err != nil {
		return nil, nil, err
	}
	denyNet, err := netDenyRules(f.denyDomains)
	if err != nil {
		return nil, nil, err
	}
	ap, err := admit.DefaultLayers(home).Load(spec, f.allowDomains)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: policy: %v", sandbox.ErrInvalidSpec, err)
	}
	eff := ap.Current()
	if f.profile == string(policy.Trusted) && eff.Profile() != policy.Trusted {
		return nil, nil, fmt.Errorf("%w: --profile trusted: no policy file grants it (declare profile = \"trusted\" in %s or %s)",
			sandbox.ErrInvalidSpec, filepath.Join(home, policy.UserPath), policy.ManagedPath)
	}
	if len(f.allow)+len(f.ask)+len(f.deny)+len(denyNet) > 0 || f.profile == string(policy.Untrusted) {
		prof := policy.Profile("")
		if f.profile == string(policy.Untrusted) {
			prof = policy.Untrusted
		}
		call, err := admit.Rules(policy.CallRules{Profile: prof, Allow: f.allow, Ask: f.ask, Deny: append(append([]string(nil), f.deny...), denyNet...)}, "")
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %v", sandbox.ErrInvalidSpec, err)
		}
		if eff, err = admit.Narrow(eff, call); err != nil {
			return nil, nil, fmt.Errorf("%w: %v", sandbox.ErrInvalidSpec, err)
		}
	}
	req := admit.Exec(args, f.sh)
	d, err := admit.Decide(eff, nil, req)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", sandbox.ErrInvalidSpec, err)
	}
	rp := &runPolicy{eff: eff, Profile: eff.Profile(), Effect: d.Effect, Decided: d.Effect, Rule: d.Rule.String(), Source: d.Rule.Source(), Reason: d.Reason}
	if d.Effect == policy.Ask {
		rp.Effect, rp.Approval = askTerminal(rio.openTTY, req, d, f.approvalTimeout)
	}
	if rp.Effect != policy.Allow {
		return spec, rp, nil
	}
	out, rep, err := admit.Compile(eff, spec, nil)
	if err != nil {
		var de *compile.DeniedError
		if errors.As(err, &de) {
			return nil, nil, fmt.Errorf("%w: %v", sandbox.ErrInvalidSpec, err)
		}
		return nil, nil, err
	}
	rp.Kernel = rep
	return out, rp, nil
}

// askTerminal asks the user on the controlling terminal whether a call the
// policy wants approved may run. No terminal, no answer within timeout,
// or anything but y/yes is a denial.
func askTerminal(openTTY func() (*os.File, error), req policy.Request, d policy.Decision, timeout time.Duration) (policy.Effect, string) {
	tty, err := openTTY()
	if err != nil {
		return policy.Deny, "no terminal"
	}
	defer tty.Close()
	fmt.Fprint(tty, askPrompt(req, d, timeout))
	answer := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(tty).ReadString('\n')
		answer <- strings.ToLower(strings.TrimSpace(line))
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case a := <-answer:
		if a == "y" || a == "yes" {
			return policy.Allow, "terminal"
		}
		return policy.Deny, "refused"
	case <-timer.C:
		fmt.Fprintln(tty, "\nmoat: no answer: denied")
		return policy.Deny, "timeout"
	}
}

// askPrompt is the question askTerminal asks. Everything in it that the
// agent or a policy file chose is escaped (display.String): the request is
// shown whole up to display.PromptMax, with a warning when it is longer.
func askPrompt(req policy.Request, d policy.Decision, timeout time.Duration) string {
	shown := display.StringN(req.String(), display.PromptMax)
	var b strings.Builder
	fmt.Fprintf(&b, "moat: approval needed: %s\n  request: %s\n", display.String(d.Reason), shown)
	if display.IsCut(shown) {
		b.WriteString("  (the request is longer than shown: the rest is not displayed; deny it unless you know what it is)\n")
	}
	fmt.Fprintf(&b, "  rule: %s (%s)\nAllow once? [y/N] (denied in %s) ", display.String(d.Rule.String()), display.String(d.Rule.Source()), timeout)
	return b.String()
}

// deniedReason is the one line a denied moat run prints.
func deniedReason(rp *runPolicy) string {
	switch rp.Approval {
	case "no terminal":
		return rp.Reason + "; there is no terminal to ask on"
	case "refused":
		return rp.Reason + "; refused on the terminal"
	case "timeout":
		return rp.Reason + "; no answer on the terminal in time"
	}
	return rp.Reason
}
