package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/moat-sandbox/moat/agent/model"
	"github.com/moat-sandbox/moat/api"
)

// errMaxTurns ends an agent that made max_turns model calls for one task
// without an answer.
var errMaxTurns = errors.New("max_turns reached")

// interrupted is what the model is told of a tool call that was running
// when the daemon stopped.
const interrupted = "interrupted by a daemon restart; re-run it if still needed"

// final is an agent's answer: resp, when set, is the model's response not
// yet in the conversation (the caller journals it with what the answer
// ends: the run, or the handoff).
type final struct {
	text string
	resp *model.Response
	msg  model.Message
	took int64
}

// loop is the run's goroutine.
func (r *run) loop() {
	defer r.e.wg.Done()
	defer r.e.finished(r)
	fin, err := r.work(r.ctx, r.stack[0], 0)
	r.end(fin, err)
}

// pending returns the tool calls of conv's last assistant message that no
// tool message after it answers, in order.
func pending(conv []model.Message) []model.ToolCall {
	i := len(conv) - 1
	for i >= 0 && conv[i].Role == model.RoleTool {
		i--
	}
	if i < 0 || conv[i].Role != model.RoleAssistant || len(conv[i].ToolCalls) == 0 {
		return nil
	}
	answered := map[string]bool{}
	for _, m := range conv[i+1:] {
		answered[m.ToolCallID] = true
	}
	var out []model.ToolCall
	for _, c := range conv[i].ToolCalls {
		if !answered[c.ID] {
			out = append(out, c)
		}
	}
	return out
}

// answered reports whether conv ends with an answer: an assistant message
// without tool calls.
func answered(conv []model.Message) (model.Message, bool) {
	if len(conv) == 0 {
		return model.Message{}, false
	}
	m := conv[len(conv)-1]
	return m, m.Role == model.RoleAssistant && len(m.ToolCalls) == 0
}

// normalize makes a model's message fit conv, the conversation it ends:
// the assistant's role, every tool call with an id used nowhere else in
// the conversation (a provider may give none, or repeat one; a
// provider such as Anthropic refuses a conversation whose tool call ids
// repeat) and JSON arguments (text that is not JSON becomes a JSON
// string).
func normalize(m model.Message, conv []model.Message) model.Message {
	m.Role = model.RoleAssistant
	m.ToolCallID, m.IsError = "", false
	m.ToolCalls = slices.Clone(m.ToolCalls)
	seen := map[string]bool{}
	for _, prev := range conv {
		for _, c := range prev.ToolCalls {
			seen[c.ID] = true
		}
	}
	for i := range m.ToolCalls {
		c := &m.ToolCalls[i]
		for n := 0; c.ID == "" || seen[c.ID]; n++ {
			c.ID = fmt.Sprintf("call_%d_%d", len(conv), i)
			if n > 0 {
				c.ID += fmt.Sprintf("_%d", n)
			}
		}
		seen[c.ID] = true
		switch {
		case len(c.Arguments) == 0:
			c.Arguments = []byte("{}")
		case !json.Valid(c.Arguments):
			// Kept as the text it is (a JSON string), which the tool
			// refuses: the record stays JSON.
			c.Arguments, _ = json.Marshal(strings.ToValidUTF8(string(c.Arguments), "\uFFFD"))
		}
	}
	return m
}

// work runs agent name on its conversation until it answers (depth is
// how many handoffs deep it is). It takes up the conversation where it is:
// a model call when the last message asks for one, the tool calls the
// last assistant message asked for that have no answer yet, or the
// answer that is already there.
func (r *run) work(ctx context.Context, name string, depth int) (*final, error) {
	ag := r.doc.Agent(name)
	if ag == nil {
		return nil, fmt.Errorf("no agent %q in the run's document", name)
	}
	tools := schemas(ag)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		r.mu.Lock()
		conv := r.rec.Conversations[name]
		prog := r.progress(name)
		if m, ok := answered(conv); ok {
			r.mu.Unlock()
			return &final{text: m.Text}, nil
		}
		if calls := pending(conv); len(calls) > 0 {
			c, inFlight := calls[0], prog.Call == calls[0].ID
			r.mu.Unlock()
			if err := r.tool(ctx, ag, c, depth, inFlight); err != nil {
				return nil, err
			}
			continue
		}
		if prog.Turns >= ag.MaxTurns {
			r.mu.Unlock()
			return nil, fmt.Errorf("%w (%d)", errMaxTurns, ag.MaxTurns)
		}
		req := model.Request{
			Alias: ag.Model, Tags: slices.Clone(ag.Tags), System: ag.System,
			Messages: slices.Clone(conv), Tools: tools,
		}
		if r.asked[name] {
			delete(r.asked, name) // its model.request is journalled already
			r.mu.Unlock()
		} else {
			r.emit(api.AgentEvent{Type: api.AgentEvModelRequest, Agent: name})
			err := r.commit()
			r.mu.Unlock()
			if err != nil {
				return nil, err
			}
		}
		// The attempts the answer hides (a provider that failed before
		// another answered, a retry) become model.error events.
		var failedAttempts []model.Attempt
		req.OnAttempt = func(a model.Attempt) {
			if a.Err != nil {
				failedAttempts = append(failedAttempts, a)
			}
		}
		start := r.e.now()
		resp, err := r.e.m.Complete(ctx, req)
		took := r.e.now().Sub(start).Milliseconds()
		r.mu.Lock()
		for _, a := range failedAttempts {
			if err != nil && errors.Is(err, a.Err) {
				continue // the call's own error, below
			}
			r.emit(api.AgentEvent{Type: api.AgentEvModelError, Agent: name, Provider: a.Provider, Model: a.Model,
				Text: a.Err.Error(), DurationMs: a.Latency.Milliseconds()})
		}
		r.mu.Unlock()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			r.mu.Lock()
			r.emit(api.AgentEvent{Type: api.AgentEvModelError, Agent: name, Text: err.Error(), DurationMs: took})
			cerr := r.commit()
			r.mu.Unlock()
			return nil, errors.Join(fmt.Errorf("model: %w", err), cerr)
		}
		msg := normalize(resp.Message, conv)
		if len(msg.ToolCalls) == 0 {
			return &final{text: msg.Text, resp: resp, msg: msg, took: took}, nil
		}
		r.mu.Lock()
		r.respond(name, resp, msg, took)
		err = r.commit()
		r.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
}

// respond adds the model's message to agent name's conversation and
// counts the turn and its usage. Called with mu held.
func (r *run) respond(name string, resp *model.Response, msg model.Message, took int64) {
	r.add(name, msg)
	r.progress(name).Turns++
	r.rec.Run.Turns++
	u := api.AgentUsage{InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens}
	st := r.state(name)
	st.Usage.InputTokens += u.InputTokens
	st.Usage.OutputTokens += u.OutputTokens
	r.rec.Run.Usage.InputTokens += u.InputTokens
	r.rec.Run.Usage.OutputTokens += u.OutputTokens
	r.emit(api.AgentEvent{
		Type: api.AgentEvModelResponse, Agent: name, Text: msg.Text,
		Provider: resp.Provider, Model: resp.Model, Usage: &u, DurationMs: took,
	})
}

// answer adds a tool call's result to agent name's conversation and emits
// evType (tool.result or handoff.result). Called with mu held.
func (r *run) answer(name string, c model.ToolCall, res toolResult, evType, sandboxID string, took int64) {
	r.add(name, model.Message{Role: model.RoleTool, Text: res.Text, ToolCallID: c.ID, IsError: res.IsError})
	r.state(name).ToolCalls++
	tc := &api.AgentToolCall{
		ID: c.ID, Name: c.Name, Decision: res.Decision, Rule: res.Rule,
		ExitCode: res.ExitCode, Sandbox: sandboxID,
	}
	if res.IsError {
		tc.Error = res.Text
	} else {
		tc.Result = res.Text
	}
	r.emit(api.AgentEvent{Type: evType, Agent: name, Tool: tc, DurationMs: took})
}

// refuse answers call c of agent name, refused before anything ran: its
// tool.call (or handoff) and its result in one write.
func (r *run) refuse(name string, c model.ToolCall, why string) error {
	callEv, resEv := api.AgentEvToolCall, api.AgentEvToolResult
	if c.Name == ToolHandoff {
		callEv, resEv = api.AgentEvHandoff, api.AgentEvHandoffResult
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.emit(api.AgentEvent{Type: callEv, Agent: name, Tool: &api.AgentToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments}})
	r.answer(name, c, toolResult{Text: why, IsError: true}, resEv, "", 0)
	return r.commit()
}

// tool runs call c of agent ag (inFlight: its tool.call was journalled by
// a daemon that stopped before its result).
func (r *run) tool(ctx context.Context, ag *Agent, c model.ToolCall, depth int, inFlight bool) error {
	if inFlight {
		if c.Name == ToolHandoff {
			return r.resumeHandoff(ctx, ag, c, depth)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		p := r.progress(ag.Name)
		p.Call, p.CallSandbox = "", ""
		r.answer(ag.Name, c, toolResult{Text: interrupted, IsError: true}, api.AgentEvToolResult, "", 0)
		return r.commit()
	}
	p, err := prepare(ag, c)
	if err != nil {
		return r.refuse(ag.Name, c, err.Error())
	}
	if p.handoff != nil {
		return r.handoff(ctx, ag, c, p.handoff, depth)
	}
	sb, perCall, err := r.sandboxFor(ctx, ag)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		res := failed(err)
		res.Text = "could not make the agent's sandbox: " + res.Text
		r.mu.Lock()
		defer r.mu.Unlock()
		r.emit(api.AgentEvent{Type: api.AgentEvToolCall, Agent: ag.Name, Tool: &api.AgentToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments}})
		r.answer(ag.Name, c, res, api.AgentEvToolResult, "", 0)
		return r.commit()
	}
	r.mu.Lock()
	prog := r.progress(ag.Name)
	prog.Call = c.ID
	if perCall {
		prog.CallSandbox = sb
	}
	r.emit(api.AgentEvent{Type: api.AgentEvToolCall, Agent: ag.Name, Tool: &api.AgentToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments, Sandbox: sb}})
	err = r.commit()
	r.mu.Unlock()
	if err != nil {
		if perCall {
			r.deleteSandbox(sb)
		}
		return err
	}
	start := r.e.now()
	res := p.run(ctx, toolEnv{b: r.e.b, o: r.rec.Owner, sandbox: sb})
	if res.gone && p.retryable && !perCall && ctx.Err() == nil {
		if nsb, ok := r.replaceSandbox(ctx, ag, sb); ok {
			sb = nsb
			res = p.run(ctx, toolEnv{b: r.e.b, o: r.rec.Owner, sandbox: sb})
		}
	}
	took := r.e.now().Sub(start).Milliseconds()
	if perCall {
		r.deleteSandbox(sb)
	}
	if err := ctx.Err(); err != nil {
		return err // the run's end answers the call
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	prog = r.progress(ag.Name)
	prog.Call, prog.CallSandbox = "", ""
	r.answer(ag.Name, c, res, api.AgentEvToolResult, sb, took)
	r.askWithResult(ag)
	return r.commit()
}

// askWithResult emits, with the last tool result of agent ag's turn, the
// model.request of its next model call (which work then makes without a
// journal write of its own): one durable write where there were two.
// Called with mu held, before the commit.
func (r *run) askWithResult(ag *Agent) {
	if len(pending(r.rec.Conversations[ag.Name])) > 0 || r.progress(ag.Name).Turns >= ag.MaxTurns || r.ctx.Err() != nil {
		return
	}
	if r.asked == nil {
		r.asked = map[string]bool{}
	}
	r.asked[ag.Name] = true
	r.emit(api.AgentEvent{Type: api.AgentEvModelRequest, Agent: ag.Name})
}

// end journals the run's end: its answer, its failure, or its cancel.
// Its sandboxes are deleted first. When the engine is closing, nothing is
// journalled: the run stays running for Recover.
func (r *run) end(fin *final, err error) {
	r.mu.Lock()
	if r.closing() {
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	r.deleteAll()
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.e.now()
	run := &r.rec.Run
	switch {
	case r.cancelled:
		r.seal("the run was cancelled")
		run.State, run.Error = api.AgentCancelled, "cancelled"
		r.emit(api.AgentEvent{Type: api.AgentEvRunCancelled, Agent: run.Agent})
	case err != nil:
		r.seal("the run failed")
		run.State, run.Error = api.AgentFailed, err.Error()
		r.emit(api.AgentEvent{Type: api.AgentEvRunFailed, Agent: run.Agent, Text: err.Error()})
	default:
		if fin.resp != nil {
			r.respond(run.Agent, fin.resp, fin.msg, fin.took)
		}
		run.State, run.Answer, run.Error = api.AgentSucceeded, fin.text, ""
		r.emit(api.AgentEvent{Type: api.AgentEvRunSucceeded, Agent: run.Agent, Text: fin.text})
	}
	run.Ended = &now
	if err := r.commit(); err != nil {
		r.e.log.Error("agent run end not journalled", "run", r.id, "err", err)
	}
}

// seal answers every tool call of every conversation that has no answer
// (why says why it did not run), so that each conversation can go on when
// the run is resumed. Called with mu held.
func (r *run) seal(why string) {
	for _, name := range slices.Sorted(maps.Keys(r.rec.Conversations)) {
		p := r.progress(name)
		for _, c := range pending(r.rec.Conversations[name]) {
			text, ev := "not run: "+why, api.AgentEvToolResult
			if c.ID == p.Call {
				text = "stopped while it ran: " + why
			}
			if c.Name == ToolHandoff {
				ev = api.AgentEvHandoffResult
			}
			r.answer(name, c, toolResult{Text: text, IsError: true}, ev, "", 0)
		}
		p.Call, p.CallSandbox = "", ""
	}
}
