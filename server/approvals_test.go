package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
)

// within bounds every wait of these tests: a failure, not a pace.
const within = 30 * time.Second

// followStream is an open approvals.list follow stream.
type followStream struct {
	t   *testing.T
	evs chan api.Event
}

// follow opens GET /v1/approvals?follow=true&query with token; it is
// closed when the test ends.
func (h *harness) follow(token, query string) *followStream {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", h.srv.URL+"/v1/approvals?follow=true&"+query, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		b, _ := io.ReadAll(resp.Body)
		h.t.Fatalf("follow: %d %s", resp.StatusCode, b)
	}
	f := &followStream{t: h.t, evs: make(chan api.Event, 64)}
	go func() {
		defer close(f.evs)
		dec := json.NewDecoder(resp.Body)
		for {
			var ev api.Event
			if dec.Decode(&ev) != nil {
				return
			}
			f.evs <- ev
		}
	}()
	h.t.Cleanup(func() {
		cancel()
		resp.Body.Close()
	})
	return f
}

// next returns the next approval event in state.
func (f *followStream) next(state string) api.Approval {
	f.t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-f.evs:
			if !ok {
				f.t.Fatalf("the follow stream ended while waiting for a %s approval", state)
			}
			if ev.Type != api.EventApproval || ev.Approval == nil {
				f.t.Fatalf("follow: event %+v", ev)
			}
			if ev.Approval.State == state {
				return *ev.Approval
			}
		case <-timer.C:
			f.t.Fatalf("no %s approval within %v", state, within)
		}
	}
}

// async sends a request in the background; the reply arrives on the
// channel (status 0 if the request failed, e.g. cancelled).
func (h *harness) async(ctx context.Context, method, path, token string, body any) <-chan reply {
	j, err := json.Marshal(body)
	if err != nil {
		h.t.Fatal(err)
	}
	out := make(chan reply, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, method, h.srv.URL+path, bytes.NewReader(j))
		if err != nil {
			out <- reply{}
			return
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := h.srv.Client().Do(req)
		if err != nil {
			out <- reply{}
			return
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		out <- reply{status: resp.StatusCode, header: resp.Header, body: data}
	}()
	return out
}

func await(t *testing.T, c <-chan reply) reply {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(within):
		t.Fatalf("no answer within %v", within)
	}
	return reply{}
}

// answer answers an approval.
func (h *harness) answer(token, id string, a api.AnswerApproval) reply {
	h.t.Helper()
	return h.do("POST", "/v1/approvals/"+id, token, a)
}

const askTouch = "version = 1\nask = [\"Exec(touch *)\"]\n"

// TestApprovalAllowOnce: an ask rule holds the call in a pending approval
// that the list, the follow stream and the streamed exec show; only an
// approver of the tenant answers it; allow once runs it and the next
// identical call asks again; a deny refuses with the approver's reason.
func TestApprovalAllowOnce(t *testing.T) {
	h := newFakeHarness(t, nil)
	writePolicy(t, h.user, askTouch)
	id := h.create(tokenA, api.CreateSandbox{})
	base := "/v1/sandboxes/" + id
	fol := h.follow(tokenA, "")

	call := h.async(context.Background(), "POST", base+"/exec", tokenA, api.Exec{Args: []string{"touch", "/workspace/m1"}, Stream: true})
	ap := fol.next(api.ApprovalPending)
	if !strings.HasPrefix(ap.ID, "ap_") || ap.Sandbox != id || ap.Tenant != "a" || ap.Kind != "Exec" || ap.Op != api.OpExec ||
		ap.Request != "Exec(touch /workspace/m1)" || ap.Rule != "ask Exec(touch *)" || ap.Source != "user ~/.config/moat/policy.toml:2" ||
		!strings.HasPrefix(ap.Reason, "needs approval: ") || !ap.ExpiresAt.After(ap.CreatedAt) {
		t.Fatalf("approval: %+v", ap)
	}
	var l api.ApprovalList
	h.do("GET", "/v1/approvals", tokenA, nil).decode(t, &l)
	if len(l.Approvals) != 1 || l.Approvals[0].ID != ap.ID {
		t.Fatalf("list: %+v", l)
	}
	h.do("GET", "/v1/approvals?sandbox=other", tokenA, nil).decode(t, &l)
	if len(l.Approvals) != 0 {
		t.Fatalf("list of another sandbox: %+v", l)
	}
	if r := h.do("GET", "/v1/approvals/"+ap.ID, tokenA, nil); r.status != 200 {
		t.Fatalf("get: %d %s", r.status, r.body)
	}
	// Another tenant neither sees nor answers it; the agent's own token
	// cannot answer it.
	if r := h.do("GET", "/v1/approvals/"+ap.ID, tokenB, nil); r.status != http.StatusNotFound {
		t.Fatalf("get by b: %d %s", r.status, r.body)
	}
	h.do("GET", "/v1/approvals", tokenB, nil).decode(t, &l)
	if len(l.Approvals) != 0 {
		t.Fatalf("b lists a's approvals: %+v", l)
	}
	if r := h.answer(approverB, ap.ID, api.AnswerApproval{Decision: "allow"}); r.status != http.StatusNotFound {
		t.Fatalf("answer by b: %d %s", r.status, r.body)
	}
	if r := h.answer(tokenA, ap.ID, api.AnswerApproval{Decision: "allow"}); r.status != http.StatusForbidden || r.apiErr(t).Code != api.CodePermissionDenied {
		t.Fatalf("answer by the agent's token: %d %s", r.status, r.body)
	}
	if r := h.answer(approverA, ap.ID, api.AnswerApproval{Decision: "maybe"}); r.status != http.StatusBadRequest {
		t.Fatalf("bad decision: %d %s", r.status, r.body)
	}
	var got api.Approval
	r := h.answer(approverA, ap.ID, api.AnswerApproval{Decision: "allow", Scope: "once"})
	r.decode(t, &got)
	if r.status != 200 || got.State != api.ApprovalAllowed || got.Scope != api.ScopeOnce || !strings.HasPrefix(got.AnsweredBy, "token:") {
		t.Fatalf("answer: %d %s", r.status, r.body)
	}
	if r := h.answer(approverA, ap.ID, api.AnswerApproval{Decision: "deny"}); r.status != http.StatusConflict {
		t.Fatalf("second answer: %d %s", r.status, r.body)
	}
	if a := fol.next(api.ApprovalAllowed); a.ID != ap.ID {
		t.Fatalf("follow: %+v", a)
	}
	// The streamed exec showed the approval, then ran.
	res := await(t, call)
	evs := events(t, res.body)
	if len(evs) < 3 || evs[0].Type != api.EventApproval || evs[0].Approval.State != api.ApprovalPending ||
		evs[1].Type != api.EventApproval || evs[1].Approval.State != api.ApprovalAllowed || evs[len(evs)-1].Type != api.EventExit ||
		evs[len(evs)-1].Result.ExitCode != 0 {
		t.Fatalf("streamed exec: %s", res.body)
	}
	if r := h.do("GET", base+"/files/stat?path=/workspace/m1", tokenA, nil); r.status != 200 {
		t.Fatalf("m1 was not made: %d %s", r.status, r.body)
	}

	// Once means once: the same call asks again; a deny tells the reason.
	call = h.async(context.Background(), "POST", base+"/exec", tokenA, api.Exec{Args: []string{"touch", "/workspace/m1"}})
	ap2 := fol.next(api.ApprovalPending)
	if ap2.ID == ap.ID {
		t.Fatal("the same approval twice")
	}
	if r := h.answer(approverA, ap2.ID, api.AnswerApproval{Decision: "deny", Reason: "not on a Friday"}); r.status != 200 {
		t.Fatalf("deny: %d %s", r.status, r.body)
	}
	e := wantDenied(t, await(t, call), "ask Exec(touch *)", "user")
	if e.Approval != ap2.ID || !strings.Contains(e.Message, "not on a Friday") || !strings.Contains(e.Message, "was denied by token:") {
		t.Fatalf("denial: %+v", e)
	}
	h.do("GET", "/v1/approvals?state=all", tokenA, nil).decode(t, &l)
	if len(l.Approvals) != 2 || l.Approvals[1].State != api.ApprovalDenied || l.Approvals[1].Comment != "not on a Friday" {
		t.Fatalf("list all: %+v", l)
	}

	// The audit: request and answer events with the rule; the exec that
	// ran names its approval.
	for kind, n := range map[string]int{"approval.request": 2, "approval.answer": 2} {
		evs := h.auditEvents(tokenA, kind)
		if len(evs) != n {
			t.Fatalf("%d %s events, want %d", len(evs), kind, n)
		}
		for _, ev := range evs {
			if ev.Rule != "ask Exec(touch *) (user ~/.config/moat/policy.toml:2)" || ev.Sandbox != id {
				t.Fatalf("%s: %+v", kind, ev)
			}
		}
	}
	var ran bool
	for _, ev := range h.auditEvents(tokenA, "process.exec") {
		ran = ran || ev.Decision == audit.DecisionAllow && bytes.Contains(ev.Result, []byte(`"approval":"`+ap.ID+`"`)) &&
			bytes.Contains(ev.Result, []byte(`"decided":"ask"`))
	}
	if !ran {
		t.Fatal("the exec that ran does not name its approval")
	}
}

// TestApprovalAlways: allow always lets the same request of the same
// sandbox run without asking again, but not another request, nor the
// same request in another sandbox.
func TestApprovalAlways(t *testing.T) {
	h := newFakeHarness(t, nil)
	writePolicy(t, h.user, askTouch)
	id := h.create(tokenA, api.CreateSandbox{})
	fol := h.follow(approverA, "sandbox="+id)
	touch := func(sb, name string) <-chan reply {
		return h.async(context.Background(), "POST", "/v1/sandboxes/"+sb+"/exec", tokenA, api.Exec{Args: []string{"touch", "/workspace/" + name}})
	}
	call := touch(id, "a")
	ap := fol.next(api.ApprovalPending)
	if r := h.answer(approverA, ap.ID, api.AnswerApproval{Decision: "allow", Scope: "always"}); r.status != 200 {
		t.Fatalf("allow always: %d %s", r.status, r.body)
	}
	if r := await(t, call); r.status != 200 {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	fol.next(api.ApprovalAllowed)
	// The same request runs at once (were it asked, it would wait).
	if r := await(t, touch(id, "a")); r.status != 200 {
		t.Fatalf("granted: %d %s", r.status, r.body)
	}
	var l api.ApprovalList
	h.do("GET", "/v1/approvals?state=all", tokenA, nil).decode(t, &l)
	if len(l.Approvals) != 1 {
		t.Fatalf("a second approval was made: %+v", l)
	}
	// Another request asks.
	call = touch(id, "b")
	ap2 := fol.next(api.ApprovalPending)
	if ap2.Request != "Exec(touch /workspace/b)" {
		t.Fatalf("other request: %+v", ap2)
	}
	h.answer(approverA, ap2.ID, api.AnswerApproval{Decision: "deny"})
	wantDenied(t, await(t, call), "ask Exec(touch *)", "user")
	// The same request in another sandbox asks too.
	id2 := h.create(tokenA, api.CreateSandbox{})
	fol2 := h.follow(approverA, "sandbox="+id2)
	call = touch(id2, "a")
	ap3 := fol2.next(api.ApprovalPending)
	h.answer(approverA, ap3.ID, api.AnswerApproval{Decision: "deny"})
	wantDenied(t, await(t, call), "ask Exec(touch *)", "user")
	if r := h.answer(approverA, ap3.ID, api.AnswerApproval{Decision: "deny", Scope: "always"}); r.status != http.StatusBadRequest {
		t.Fatalf("deny always: %d %s", r.status, r.body)
	}
}

// TestApprovalTimeout: an approval nobody answers expires and the call is
// denied with a reason that says so.
func TestApprovalTimeout(t *testing.T) {
	h := newFakeHarness(t, func(c *Config) { c.ApprovalTimeout = 200 * time.Millisecond })
	writePolicy(t, h.user, askTouch)
	id := h.create(tokenA, api.CreateSandbox{})
	e := wantDenied(t, h.do("POST", "/v1/sandboxes/"+id+"/exec", tokenA, api.Exec{Args: []string{"touch", "/workspace/late"}}), "ask Exec(touch *)", "user")
	if !strings.Contains(e.Message, "nobody answered approval "+e.Approval+" within 200ms") {
		t.Fatalf("timeout: %+v", e)
	}
	r := h.do("GET", "/v1/approvals/"+e.Approval, tokenA, nil)
	var ap api.Approval
	r.decode(t, &ap)
	if ap.State != api.ApprovalExpired || ap.AnsweredBy != "system" {
		t.Fatalf("expired approval: %s", r.body)
	}
	if r := h.answer(approverA, ap.ID, api.AnswerApproval{Decision: "allow"}); r.status != http.StatusConflict {
		t.Fatalf("answering an expired approval: %d %s", r.status, r.body)
	}
	if evs := h.auditEvents(tokenA, "approval.expire"); len(evs) != 1 || evs[0].Decision != audit.DecisionDeny || !strings.Contains(evs[0].Rule, "ask Exec(touch *)") {
		t.Fatalf("audit: %+v", evs)
	}
	if r := h.do("GET", "/v1/sandboxes/"+id+"/files/stat?path=/workspace/late", tokenA, nil); r.status != http.StatusNotFound {
		t.Fatalf("the refused command ran: %d %s", r.status, r.body)
	}
}

// TestApprovalWithdraw: a call that goes away while it waits withdraws its
// approval, which can then no longer be answered; so does a sandbox that
// ends.
func TestApprovalWithdraw(t *testing.T) {
	h := newFakeHarness(t, nil)
	writePolicy(t, h.user, askTouch+"deny = [\"Read(/workspace/secret)\"]\n")
	id := h.create(tokenA, api.CreateSandbox{})
	fol := h.follow(tokenA, "")
	ctx, cancel := context.WithCancel(context.Background())
	call := h.async(ctx, "POST", "/v1/sandboxes/"+id+"/exec", tokenA, api.Exec{Args: []string{"touch", "/workspace/x"}})
	ap := fol.next(api.ApprovalPending)
	cancel()
	if w := fol.next(api.ApprovalWithdrawn); w.ID != ap.ID || w.Comment != "the call was cancelled" {
		t.Fatalf("withdrawn: %+v", w)
	}
	await(t, call)
	if r := h.answer(approverA, ap.ID, api.AnswerApproval{Decision: "allow"}); r.status != http.StatusConflict {
		t.Fatalf("answering a withdrawn approval: %d %s", r.status, r.body)
	}
	call = h.async(context.Background(), "POST", "/v1/sandboxes/"+id+"/processes", tokenA, api.Exec{Args: []string{"touch", "/workspace/y"}})
	ap = fol.next(api.ApprovalPending)
	if ap.Op != api.OpStart {
		t.Fatalf("start's approval: %+v", ap)
	}
	if r := h.do("DELETE", "/v1/sandboxes/"+id, tokenA, nil); r.status != 200 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if w := fol.next(api.ApprovalWithdrawn); w.ID != ap.ID || w.Comment != "the sandbox ended" {
		t.Fatalf("withdrawn by the end: %+v", w)
	}
	if r := await(t, call); r.status != http.StatusConflict {
		t.Fatalf("start in an ended sandbox: %d %s", r.status, r.body)
	}
}

// TestApprovalRPC: over JSON-RPC a streamed exec's approval arrives as a
// process.event notification, and the stdio peer (the harness that
// started moat) answers it.
func TestApprovalRPC(t *testing.T) {
	h := newFakeHarness(t, nil)
	writePolicy(t, h.user, askTouch)
	p := newRPCPeer(t, h)
	p.send(`{"jsonrpc":"2.0","id":1,"method":"sandbox.create","params":{}}`)
	id, _ := p.next()["result"].(map[string]any)["id"].(string)
	p.send(`{"jsonrpc":"2.0","id":2,"method":"process.exec","params":{"sandbox":"` + id + `","args":["touch","/workspace/r"],"stream":true}}`)
	m := p.next()
	ev, _ := m["params"].(map[string]any)["event"].(map[string]any)
	ap, _ := ev["approval"].(map[string]any)
	if m["method"] != api.NotifyEvent || ev["type"] != api.EventApproval || ap["state"] != api.ApprovalPending {
		t.Fatalf("notification: %v", m)
	}
	p.send(`{"jsonrpc":"2.0","id":3,"method":"approvals.answer","params":{"id":"` + ap["id"].(string) + `","decision":"allow"}}`)
	var exit map[string]any
	for exit == nil {
		m := p.next()
		switch {
		case m["id"] == float64(3):
			if m["error"] != nil {
				t.Fatalf("answer: %v", m)
			}
		case m["id"] == float64(2):
			exit = m
		}
	}
	if res, _ := exit["result"].(map[string]any); res == nil || res["exit_code"] != float64(0) {
		t.Fatalf("exec: %v", exit)
	}
}
