package client

import (
	"errors"
	"net/http"
	"testing"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
)

// TestCreateSandboxExec: the exec travels in the create's body, and the
// answer gives the sandbox's handle with the exec's result, or with the
// error that refused the exec (the sandbox exists all the same).
func TestCreateSandboxExec(t *testing.T) {
	c, mux := newFakeHTTP(t)
	ctx := testCtx(t)
	mux.HandleFunc("POST /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		var req api.CreateSandbox
		decodeBody(t, r, &req)
		if req.Labels["team"] != "a" || req.Exec == nil || req.Exec.Sandbox != "" || req.Exec.Stream || len(req.Exec.Args) != 2 {
			t.Errorf("create body %+v exec %+v", req, req.Exec)
		}
		sb := api.Sandbox{ID: "sb-1", State: api.StateRunning}
		if req.Exec.Args[1] == "denied" {
			sb.ID = "sb-2"
			sb.Exec = &api.ExecOutcome{Error: &api.Error{Code: api.CodePolicyDenied, Message: "sandbox sb-2 was created; its exec failed: denied"}}
		} else {
			sb.Exec = &api.ExecOutcome{Result: &sandbox.Result{ExitCode: 0, Stdout: "hi\n"}}
		}
		writeJSON(w, http.StatusCreated, sb)
	})
	sb, res, err := c.CreateSandboxExec(ctx, api.CreateSandbox{Labels: map[string]string{"team": "a"}}, api.Exec{Args: []string{"echo", "hi"}, Stream: true})
	if err != nil || sb.ID() != "sb-1" || res == nil || res.Stdout != "hi\n" || sb.Snapshot().State != api.StateRunning {
		t.Fatalf("create+exec: %v %+v %v", sb, res, err)
	}
	sb, res, err = c.CreateSandboxExec(ctx, api.CreateSandbox{Labels: map[string]string{"team": "a"}}, api.Exec{Args: []string{"echo", "denied"}})
	var ae *api.Error
	if sb == nil || sb.ID() != "sb-2" || res != nil || !errors.As(err, &ae) || ae.Code != api.CodePolicyDenied {
		t.Fatalf("refused exec: %v %+v %v", sb, res, err)
	}
}
