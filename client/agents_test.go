package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
)

// TestAgentRunsHTTP: every agent method travels as api.Ops says (method,
// path, query, body), the events stream reaches fn in order and ends with
// the run (asked for after the stream, which over HTTP carries events
// only), an error fn returns ends it, and a 404 is IsNotFound.
func TestAgentRunsHTTP(t *testing.T) {
	c, mux := newFakeHTTP(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run := api.AgentRun{ID: "ar-1", Agent: "coder", Task: "t", State: api.AgentSucceeded, Answer: "42", Turns: 2}
	create := api.CreateAgentRun{Document: "agents: []", Agent: "coder", Task: "t", Labels: map[string]string{"k": "v"}}
	mux.HandleFunc("POST /v1/agents/runs", func(w http.ResponseWriter, r *http.Request) {
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		var got api.CreateAgentRun
		if err := dec.Decode(&got); err != nil || !reflect.DeepEqual(got, create) {
			t.Errorf("create body %+v, %v", got, err)
		}
		pending := run
		pending.State = api.AgentPending
		writeJSON(w, http.StatusOK, pending)
	})
	mux.HandleFunc("GET /v1/agents/runs", func(w http.ResponseWriter, r *http.Request) {
		if q := r.URL.Query(); q.Get("state") != "failed" || q.Get("limit") != "5" {
			t.Errorf("list query %q", r.URL.RawQuery)
		}
		writeJSON(w, http.StatusOK, api.AgentRunList{Runs: []api.AgentRun{run}})
	})
	mux.HandleFunc("GET /v1/agents/runs/{run}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("run") != "ar-1" {
			writeJSON(w, http.StatusNotFound, api.Error{Code: api.CodeNotFound, Message: "no agent run"})
			return
		}
		writeJSON(w, http.StatusOK, run)
	})
	mux.HandleFunc("GET /v1/agents/runs/{run}/events", func(w http.ResponseWriter, r *http.Request) {
		if q := r.URL.Query(); r.PathValue("run") != "ar-1" || q.Get("after") != "3" || q.Get("follow") != "true" {
			t.Errorf("events %s ?%s", r.PathValue("run"), r.URL.RawQuery)
		}
		writeNDJSON(w,
			api.Event{Seq: 4, Type: api.EventAgent, Agent: &api.AgentEvent{Seq: 4, Type: api.AgentEvToolCall, Agent: "coder",
				Tool: &api.AgentToolCall{ID: "c1", Name: "shell_exec", Decision: "allow"}}},
			api.Event{Seq: 5, Type: api.EventAgent, Agent: &api.AgentEvent{Seq: 5, Type: api.AgentEvRunSucceeded, Text: "42"}})
	})
	mux.HandleFunc("POST /v1/agents/runs/{run}/cancel", func(w http.ResponseWriter, r *http.Request) {
		var ref api.AgentRunRef
		json.NewDecoder(r.Body).Decode(&ref)
		cancelled := run
		cancelled.State = api.AgentCancelled
		writeJSON(w, http.StatusOK, cancelled)
	})
	mux.HandleFunc("POST /v1/agents/runs/{run}/resume", func(w http.ResponseWriter, r *http.Request) {
		var req api.ResumeAgentRun
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Task != "more" || r.PathValue("run") != "ar-1" {
			t.Errorf("resume %s %+v %v", r.PathValue("run"), req, err)
		}
		resumed := run
		resumed.State, resumed.Resumes = api.AgentRunning, 1
		writeJSON(w, http.StatusOK, resumed)
	})

	got, err := c.AgentRun(ctx, create)
	if err != nil || got.ID != "ar-1" || got.State != api.AgentPending {
		t.Fatalf("AgentRun: %+v, %v", got, err)
	}
	list, err := c.AgentRuns(ctx, api.ListAgentRuns{State: api.AgentFailed, Limit: 5})
	if err != nil || len(list) != 1 || list[0].ID != "ar-1" {
		t.Fatalf("AgentRuns: %+v, %v", list, err)
	}
	if got, err := c.AgentRunGet(ctx, "ar-1"); err != nil || got.Answer != "42" {
		t.Fatalf("AgentRunGet: %+v, %v", got, err)
	}
	if _, err := c.AgentRunGet(ctx, "ar-none"); !IsNotFound(err) {
		t.Fatalf("AgentRunGet of a missing run: %v", err)
	}
	var types []string
	final, err := c.AgentEvents(ctx, api.AgentEvents{Run: "ar-1", After: 3, Follow: true}, func(ev api.AgentEvent) error {
		types = append(types, ev.Type)
		return nil
	})
	if err != nil || final.State != api.AgentSucceeded || !reflect.DeepEqual(types, []string{api.AgentEvToolCall, api.AgentEvRunSucceeded}) {
		t.Fatalf("AgentEvents: %+v, %v, %q", final, err, types)
	}
	stop := errors.New("stop")
	if _, err := c.AgentEvents(ctx, api.AgentEvents{Run: "ar-1", After: 3, Follow: true}, func(api.AgentEvent) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("fn's error: %v", err)
	}
	if got, err := c.CancelAgentRun(ctx, "ar-1"); err != nil || got.State != api.AgentCancelled {
		t.Fatalf("CancelAgentRun: %+v, %v", got, err)
	}
	if got, err := c.ResumeAgentRun(ctx, api.ResumeAgentRun{Run: "ar-1", Task: "more"}); err != nil || got.Resumes != 1 {
		t.Fatalf("ResumeAgentRun: %+v, %v", got, err)
	}
}
