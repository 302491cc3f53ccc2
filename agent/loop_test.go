package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/moat-sandbox/moat/agent/model"
	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
)

// TestToolCallIDsUnique: a provider that repeats a tool call id from turn
// to turn (or gives none) still leaves every tool call of the
// conversation with an id of its own, so that a provider refusing
// repeated ids (Anthropic) can take the conversation.
func TestToolCallIDsUnique(t *testing.T) {
	m, b, j := newFakeModel(), newFakeBackend(), newFakeJournal()
	b.exec = func(ctx context.Context, x api.Exec) (*sandbox.Result, error) {
		return &sandbox.Result{ExitReason: sandbox.ReasonExited}, nil
	}
	same := func(id string) turn {
		return func(context.Context, model.Request) (*model.Response, error) {
			return &model.Response{Message: model.Message{Role: model.RoleAssistant,
				ToolCalls: []model.ToolCall{{ID: id, Name: ToolShellExec, Arguments: json.RawMessage(`{"command": "true"}`)}}}}, nil
		}
	}
	m.add("small", same("call"), same("call"), same(""), same(""), check(t, func(req model.Request) {
		seen := map[string]bool{}
		for _, msg := range req.Messages {
			for _, c := range msg.ToolCalls {
				if c.ID == "" || seen[c.ID] {
					t.Errorf("tool call id %q empty or repeated in %+v", c.ID, req.Messages)
				}
				seen[c.ID] = true
			}
		}
		if len(seen) != 4 {
			t.Errorf("%d tool call ids, want 4", len(seen))
		}
	}, say("done")))
	e := New(m, b, j)
	defer e.Close()
	v, err := e.Start(context.Background(), owner, coderDoc, "coder", "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	if run := wait(t, e, v.ID); run.State != api.AgentSucceeded {
		t.Errorf("run %+v", run)
	}
}

// TestModelErrorOnce: a model call that fails after a failover reports
// each failed attempt once: the attempt that failed over, then the
// call's own error (its last attempt is not reported twice).
func TestModelErrorOnce(t *testing.T) {
	m, b, j := newFakeModel(), newFakeBackend(), newFakeJournal()
	m.add("small", func(_ context.Context, req model.Request) (*model.Response, error) {
		first := &model.ProviderError{Provider: "a", Status: 500, Class: model.ClassServer, Retryable: true}
		last := &model.ProviderError{Provider: "b", Status: 400, Class: model.ClassClient}
		req.OnAttempt(model.Attempt{Provider: "a", N: 1, Err: first})
		req.OnAttempt(model.Attempt{Provider: "b", N: 2, Err: last})
		return nil, fmt.Errorf("model: alias %q: %w", req.Alias, last)
	})
	e := New(m, b, j)
	defer e.Close()
	v, err := e.Start(context.Background(), owner, coderDoc, "coder", "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	if run := wait(t, e, v.ID); run.State != api.AgentFailed {
		t.Errorf("run %+v", run)
	}
	if n := count(j.types(v.ID), api.AgentEvModelError); n != 2 {
		t.Errorf("%d model.error events, want 2: %v", n, j.types(v.ID))
	}
}
