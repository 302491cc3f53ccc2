//go:build linux

package network

import (
	"os"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/sandbox"
)

// TestRunNetFlags: moat run refuses what its network flags cannot mean
// before anything runs (exit 125): --net open without the managed
// policy's open_network = true (the host's network is the operator's to
// give), and an allowlist or denylist without --net proxy (it would
// filter nothing). The control is the same run in --net proxy, which
// starts.
func TestRunNetFlags(t *testing.T) {
	fx := newFixture(t)
	if _, err := os.Stat(policy.ManagedPath); err == nil {
		t.Skipf("%s exists on this host: the refusal of --net open depends on it", policy.ManagedPath)
	}

	res := fx.moatRun(t, []string{"--config", fx.config, "--net", "open"}, "/bin/true")
	if res.ExitCode != sandbox.ExitSetupFailed || !strings.Contains(res.Error, "open_network") {
		t.Errorf("ESCAPE: --net open without a managed permission: exit %d %q, want 125 naming open_network", res.ExitCode, res.Error)
	}
	// Without --json the message is on stderr.
	o := fx.moatExec(t, "run", "--config", fx.config, "--net", "open", "--", "/bin/true")
	if o.Code != sandbox.ExitSetupFailed || !strings.Contains(o.Stderr, "open_network") {
		t.Errorf("--net open (no --json): exit %d, stderr %q", o.Code, o.Stderr)
	}

	for _, flags := range [][]string{
		{"--allow-domain", "pkg.moat.test"},
		{"--net", "none", "--allow-domain", "pkg.moat.test"},
		{"--deny-domain", "pkg.moat.test"},
		{"--net", "open", "--allow-domain", "pkg.moat.test"},
	} {
		res := fx.moatRun(t, append([]string{"--config", fx.config}, flags...), "/bin/true")
		if res.ExitCode != sandbox.ExitSetupFailed {
			t.Errorf("%v: exit %d (%s), want 125", flags, res.ExitCode, res.Error)
		}
	}
	// Control: the same lists with --net proxy.
	res = fx.moatRun(t, []string{"--config", fx.config, "--net", "proxy", "--allow-domain", "pkg.moat.test", "--deny-domain", "other.moat.test"}, "/bin/true")
	if res.ExitCode != 0 || res.Network == nil || res.Network.Mode != "proxy" {
		t.Errorf("control: --net proxy with the lists:\n%s", res)
	}
}
