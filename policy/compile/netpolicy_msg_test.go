package compile

import (
	"context"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/sandbox"
)

// TestNetPolicyApprovalReason: the reason of an asked connection says
// how the approval went once, in the words of whoever answered it
// ("approval ap_1 expired", not "approval approval ap_1 expired").
func TestNetPolicyApprovalReason(t *testing.T) {
	pc := Context(&sandbox.Spec{Workspace: t.TempDir()}, t.TempDir())
	pc.NetAllow = []string{"example.com"}
	eff, err := policy.Compile(pc)
	if err != nil {
		t.Fatal(err)
	}
	call, err := policy.ParseCall(policy.CallRules{Ask: []string{"Net(domain:example.com)"}})
	if err != nil {
		t.Fatal(err)
	}
	if eff, err = eff.With(call); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ok        bool
		how, want string
	}{
		{false, "approval ap_1 expired: denied", "; approval ap_1 expired: denied"},
		{false, "approval ap_1 withdrawn", "; approval ap_1 withdrawn: denied"},
		{true, "approval ap_1 allowed by alice", "; approval ap_1 allowed by alice"},
	} {
		p := &NetPolicy{
			Current: func() *policy.Effective { return eff },
			Ask:     func(context.Context, policy.Decision) (bool, string) { return c.ok, c.how },
		}
		v := p.Decide(context.Background(), "example.com", 443)
		if v.Allow != c.ok || !strings.HasSuffix(v.Reason, c.want) || strings.Contains(v.Reason, "approval approval") ||
			strings.Contains(v.Reason, "approval: approval") || strings.Contains(v.Reason, "denied: denied") {
			t.Errorf("Ask answering (%v, %q): allow %v, reason %q", c.ok, c.how, v.Allow, v.Reason)
		}
	}
}
