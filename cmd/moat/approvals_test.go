package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
)

// apRun runs `moat approvals ARGS...` and returns its stdout, stderr and
// exit code as execute would map them.
func apRun(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return cliRun("approvals", runApprovals, "", args...)
}

func TestApprovalsCLI(t *testing.T) {
	mux := fakeDaemon(t)
	t.Setenv("MOAT_APPROVER_TOKEN", "tok")
	now := time.Now()
	pending := api.Approval{ID: "ap_1", Tenant: "default", Sandbox: "sb-1", Op: api.OpExec, Kind: "Exec", Request: "Exec(git push)",
		Rule: "ask Exec(git push*)", Source: "user ~/.config/moat/policy.toml:3", State: api.ApprovalPending, CreatedAt: now, ExpiresAt: now.Add(time.Minute)}
	mux.HandleFunc("GET /v1/approvals", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("follow") == "true" {
			replyEvents(w, api.Event{Seq: 1, Type: api.EventApproval, Approval: &pending})
			return
		}
		if q.Get("state") != "all" || q.Get("sandbox") != "sb-1" {
			replyJSON(w, 200, api.ApprovalList{Approvals: []api.Approval{}})
			return
		}
		replyJSON(w, 200, api.ApprovalList{Approvals: []api.Approval{pending}})
	})
	mux.HandleFunc("POST /v1/approvals/{id}", func(w http.ResponseWriter, r *http.Request) {
		var req api.AnswerApproval
		json.NewDecoder(r.Body).Decode(&req)
		switch r.PathValue("id") {
		case "ap_gone":
			replyJSON(w, 404, api.Error{Code: api.CodeNotFound, Message: `no approval "ap_gone"`})
			return
		case "ap_done":
			replyJSON(w, 409, api.Error{Code: api.CodeConflict, Message: "approval ap_done is allowed, not pending"})
			return
		case "ap_agent":
			replyJSON(w, 403, api.Error{Code: api.CodePermissionDenied, Message: "only an approver may answer approvals"})
			return
		}
		a := pending
		a.AnsweredBy, a.Scope, a.Comment = "token:abcd", req.Scope, req.Reason
		a.State = api.ApprovalAllowed
		if req.Decision == api.DecisionDeny {
			a.State = api.ApprovalDenied
		}
		replyJSON(w, 200, a)
	})

	out, _, code := apRun(t, "ls", "--all", "--sandbox", "sb-1")
	if code != 0 || !strings.HasPrefix(out, "ID") || !strings.Contains(out, "ap_1") || !strings.Contains(out, "Exec(git push)") ||
		!strings.Contains(out, "ask Exec(git push*) (user ~/.config/moat/policy.toml:3)") || !strings.Contains(out, "pending (") {
		t.Fatalf("ls: %d\n%s", code, out)
	}
	out, _, code = apRun(t, "ls", "--json")
	if code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("ls --json: %d %q", code, out)
	}
	out, _, code = apRun(t, "ls", "--follow", "--json")
	var a api.Approval
	if code != 0 || json.Unmarshal([]byte(out), &a) != nil || a.ID != "ap_1" {
		t.Fatalf("ls --follow --json: %d %q", code, out)
	}
	out, _, code = apRun(t, "allow", "ap_1", "--always")
	if code != 0 || out != "ap_1 allowed (always): Exec(git push) in sb-1\n" {
		t.Fatalf("allow: %d %q", code, out)
	}
	out, _, code = apRun(t, "deny", "--reason", "not today", "ap_1", "--json")
	if code != 0 || json.Unmarshal([]byte(out), &a) != nil || a.State != api.ApprovalDenied || a.Comment != "not today" {
		t.Fatalf("deny: %d %q", code, out)
	}
	for _, id := range []string{"ap_gone", "ap_done"} {
		if _, errOut, code := apRun(t, "allow", id); code != 1 || !strings.Contains(errOut, id) {
			t.Fatalf("allow %s: %d %q", id, code, errOut)
		}
	}
	if _, errOut, code := apRun(t, "allow", "ap_agent"); code != 125 || !strings.Contains(errOut, "MOAT_APPROVER_TOKEN") {
		t.Fatalf("allow by a non-approver: %d %q", code, errOut)
	}
	// Usage.
	for _, args := range [][]string{{}, {"nope"}, {"allow"}, {"deny", "a", "b"}, {"ls", "x"}, {"allow", "--bogus", "ap_1"}} {
		if _, _, code := apRun(t, args...); code != 125 {
			t.Errorf("%q: exit %d, want 125", args, code)
		}
	}
	if out, _, code := apRun(t, "allow", "--help"); code != 0 || !strings.Contains(out, "--always") {
		t.Fatalf("allow --help: %d %q", code, out)
	}
	// The approver token comes from a file, else answering fails.
	t.Setenv("MOAT_APPROVER_TOKEN", "")
	file := filepath.Join(t.TempDir(), "approver-token")
	os.WriteFile(file, []byte("tok\n"), 0o600)
	t.Setenv("MOAT_APPROVER_TOKEN_FILE", file)
	if _, _, code := apRun(t, "allow", "ap_1"); code != 0 {
		t.Fatalf("allow with a token file: %d", code)
	}
	t.Setenv("MOAT_APPROVER_TOKEN_FILE", file+".missing")
	if _, errOut, code := apRun(t, "allow", "ap_1"); code != 125 || !strings.Contains(errOut, "no approver token") {
		t.Fatalf("allow without a token: %d %q", code, errOut)
	}
}

// TestServePolicyFlags: the policy flags of moat serve are validated
// before anything starts, and documented in its help.
func TestServePolicyFlags(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := execute(context.Background(), []string{"serve", "--help"}, &out, &errOut); code != 0 {
		t.Fatalf("serve --help: %d", code)
	}
	for _, want := range []string{"--home DIR", "--policy-managed FILE", "--policy-user FILE", "--approval-timeout duration", "approver-token"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("serve --help lacks %q", want)
		}
	}
	for _, args := range [][]string{{"--approval-timeout", "0s"}, {"--approval-timeout", "100h"}, {"--home", filepath.Join(t.TempDir(), "missing")}} {
		errOut.Reset()
		code := execute(context.Background(), append([]string{"serve", "--stdio", "--data", t.TempDir()}, args...), &out, &errOut)
		if code != 125 || !strings.Contains(errOut.String(), strings.TrimPrefix(args[0], "--")) {
			t.Errorf("serve %q: %d %q", args, code, errOut.String())
		}
	}
}
