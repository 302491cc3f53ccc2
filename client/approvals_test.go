package client_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// policyFlags writes a user policy file with rules and returns the serve
// flags that use it (and nothing of the real /etc or home).
func policyFlags(t *testing.T, rules string) []string {
	dir := t.TempDir()
	user := filepath.Join(dir, "user.toml")
	if err := os.WriteFile(user, []byte("version = 1\n"+rules), 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"--home", dir, "--policy-user", user, "--policy-managed", filepath.Join(dir, "managed.toml")}
}

// TestApprovalsAgainstDaemon: a streamed exec held by an ask rule shows
// its approval; an approver follows and answers it (over HTTP with the
// approver token, over stdio as the peer); the agent's own token cannot;
// a denial is IsPolicyDenied with the reason.
func TestApprovalsAgainstDaemon(t *testing.T) {
	testutil.RequireRoot(t)
	flags := policyFlags(t, "ask = [\"Exec(touch *)\"]\ndeny = [\"Exec(rm *)\"]\n")
	d := testutil.StartDaemon(t, t.TempDir(), append([]string{"--listen", "127.0.0.1:0"}, flags...)...)
	if d.ApproverToken == "" {
		t.Fatal("no approver token")
	}
	t.Run("http", func(t *testing.T) {
		agent, err := client.New(client.WithHTTP(d.URL, d.Token))
		if err != nil {
			t.Fatal(err)
		}
		defer agent.Close()
		approver, err := client.New(client.WithHTTP(d.URL, d.ApproverToken))
		if err != nil {
			t.Fatal(err)
		}
		defer approver.Close()
		exerciseApprovals(t, agent, approver, true)
	})
	t.Run("stdio", func(t *testing.T) {
		c, err := client.New(client.WithStdio(testutil.Moat(t), append([]string{"serve", "--stdio", "--data", t.TempDir()}, flags...)...))
		if err != nil {
			t.Fatal(err)
		}
		exerciseApprovals(t, c, c, false)
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

func exerciseApprovals(t *testing.T, agent, approver *client.Client, separate bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := agent.CreateSandbox(ctx, api.CreateSandbox{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = sb.Exec(ctx, api.Exec{Args: []string{"rm", "-f", "/workspace/x"}})
	if !client.IsPolicyDenied(err) || !strings.Contains(err.Error(), "deny Exec(rm *)") {
		t.Fatalf("rm: %v", err)
	}

	// The approver follows the approvals of the sandbox.
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	pending := make(chan api.Approval, 4)
	go func() {
		for a, err := range approver.FollowApprovals(fctx, api.ListApprovals{Sandbox: sb.ID()}) {
			if err != nil {
				return
			}
			if a.State == api.ApprovalPending {
				pending <- a
			}
		}
	}()
	answered := make(chan struct{}, 2)
	answer := func(decision, reason string) {
		defer func() { answered <- struct{}{} }()
		a := <-pending
		if separate {
			if _, err := agent.AnswerApproval(ctx, api.AnswerApproval{ID: a.ID, Decision: decision}); client.Code(err) != api.CodePermissionDenied {
				t.Errorf("the agent answered its own approval: %v", err)
			}
		}
		list, err := approver.Approvals(ctx, api.ListApprovals{Sandbox: sb.ID()})
		if err != nil || len(list) != 1 || list[0].ID != a.ID {
			t.Errorf("list: %+v %v", list, err)
		}
		if got, err := approver.Approval(ctx, a.ID); err != nil || got.State != api.ApprovalPending {
			t.Errorf("get: %+v %v", got, err)
		}
		if _, err := approver.AnswerApproval(ctx, api.AnswerApproval{ID: a.ID, Decision: decision, Reason: reason}); err != nil {
			t.Errorf("answer: %v", err)
		}
	}
	go answer("allow", "")
	var approvals []string
	var last api.Event
	for ev, err := range sb.ExecStream(ctx, api.Exec{Args: []string{"touch", "/workspace/ok"}}) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == api.EventApproval {
			approvals = append(approvals, ev.Approval.State)
		}
		last = ev
	}
	<-answered
	if strings.Join(approvals, ",") != "pending,allowed" || last.Type != api.EventExit || last.Result.ExitCode != 0 {
		t.Fatalf("approved exec: approvals %v, last %+v", approvals, last)
	}
	go answer("deny", "use the build script")
	_, err = sb.Exec(ctx, api.Exec{Args: []string{"touch", "/workspace/no"}})
	<-answered
	if !client.IsPolicyDenied(err) || !strings.Contains(err.Error(), "use the build script") {
		t.Fatalf("denied exec: %v", err)
	}
}
