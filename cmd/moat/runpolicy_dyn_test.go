package main

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/moat-sandbox/moat/internal/testutil"
)

// TestRunPolicyDynamicWords (issue 18): an expansion in an argument does
// not make a command unknowable; git's global options are skipped before
// matching; a dynamic command word gets the strictest Exec rule, named.
func TestRunPolicyDynamicWords(t *testing.T) {
	testutil.RequireRoot(t)
	home := t.TempDir()
	for _, s := range []string{`echo $HOME`, `for f in a b; do echo $f; done`, `x=$(ls); ls "$TMPDIR"`} {
		if o := moatEnv(t, home, "run", "--deny", "Exec(curl *)", "--sh", s); o.Code != 0 {
			t.Errorf("%q under deny Exec(curl *): exit %d %q", s, o.Code, o.Stderr)
		}
	}
	// The command word is dynamic: denied, the reason says why and names the rule.
	o := moatEnv(t, home, "run", "--deny", "Exec(curl *)", "--sh", `c=curl; $c x`)
	if o.Code != 126 || !strings.Contains(o.Stderr, "the command word is only known at run time (`$c`)") ||
		!strings.Contains(o.Stderr, "deny Exec(curl *)") {
		t.Errorf("$c x: exit %d %q", o.Code, o.Stderr)
	}
	// git -C . push is git push: the ask rule applies (denied without a terminal).
	for _, s := range []string{`git -C . push`, `nice -n 5 git --no-pager -c x.y=z push origin`} {
		cmd := exec.Command(testutil.Moat(t), "run", "--json", "--ask", "Exec(git push*)", "--sh", s)
		cmd.Env = append(os.Environ(), "HOME="+home)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		out, _ := cmd.Output()
		r := decodeResult(t, testutil.Output{Code: cmd.ProcessState.ExitCode(), Stdout: string(out)})
		if r.ExitCode != 126 || r.Policy.Decided != "ask" || r.Policy.Approval != "no terminal" ||
			!strings.Contains(r.Policy.Rule, "Exec(git push*)") {
			t.Errorf("%q: %+v %+v", s, r.Result, r.Policy)
		}
	}
}
