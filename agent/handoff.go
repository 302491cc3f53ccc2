package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/moat-sandbox/moat/agent/model"
	"github.com/moat-sandbox/moat/api"
)

// handoff runs call c of agent ag, a handoff: the other agent gets the
// task as a new user message of its own conversation (kept across
// handoffs: its persistent context), works on it, and its answer is the
// call's result. A chain deeper than MaxHandoffDepth, or a handoff to an
// agent of the chain (it waits for an answer already), is refused as a
// tool error.
func (r *run) handoff(ctx context.Context, ag *Agent, c model.ToolCall, h *handoffArgs, depth int) error {
	switch {
	case depth+1 > MaxHandoffDepth:
		return r.refuse(ag.Name, c, fmt.Sprintf("refused: a handoff chain may be at most %d deep", MaxHandoffDepth))
	case slices.Contains(r.stack, h.To):
		return r.refuse(ag.Name, c, fmt.Sprintf("refused: agent %s is waiting for an answer in this chain and cannot take a task now", h.To))
	}
	r.mu.Lock()
	r.progress(ag.Name).Call = c.ID
	r.state(h.To)
	r.add(h.To, model.Message{Role: model.RoleUser, Text: h.Task})
	r.progress(h.To).Turns = 0
	r.emit(api.AgentEvent{Type: api.AgentEvHandoff, Agent: ag.Name, Tool: &api.AgentToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments}})
	r.emit(api.AgentEvent{Type: api.AgentEvMessage, Agent: h.To, Text: h.Task})
	err := r.commit()
	r.mu.Unlock()
	if err != nil {
		return err
	}
	return r.awaitHandoff(ctx, ag, c, h.To, depth)
}

// resumeHandoff takes up a handoff that was under way when the daemon
// stopped: the other agent carries on with its conversation.
func (r *run) resumeHandoff(ctx context.Context, ag *Agent, c model.ToolCall, depth int) error {
	var h handoffArgs
	if err := json.Unmarshal(c.Arguments, &h); err != nil || r.doc.Agent(h.To) == nil || slices.Contains(r.stack, h.To) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.progress(ag.Name).Call = ""
		r.answer(ag.Name, c, toolResult{Text: interrupted, IsError: true}, api.AgentEvHandoffResult, "", 0)
		return r.commit()
	}
	return r.awaitHandoff(ctx, ag, c, h.To, depth)
}

// awaitHandoff runs agent to for call c of ag and answers c with its
// answer, or with its failure as a tool error. A journal error, a
// cancel or the engine's close end the caller too.
func (r *run) awaitHandoff(ctx context.Context, ag *Agent, c model.ToolCall, to string, depth int) error {
	r.stack = append(r.stack, to)
	start := r.e.now()
	fin, err := r.work(ctx, to, depth+1)
	r.stack = r.stack[:len(r.stack)-1]
	took := r.e.now().Sub(start).Milliseconds()
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if errors.Is(err, errJournal) {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.progress(ag.Name).Call = ""
	var res toolResult
	if err != nil {
		res = toolResult{Text: fmt.Sprintf("agent %s failed: %v", to, err), IsError: true}
	} else {
		if fin.resp != nil {
			r.respond(to, fin.resp, fin.msg, fin.took)
		}
		res = toolResult{Text: fin.text}
	}
	r.answer(ag.Name, c, res, api.AgentEvHandoffResult, "", took)
	return r.commit()
}
