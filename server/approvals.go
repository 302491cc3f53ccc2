package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/policy"
)

// Approvals.
//
// A call whose request a policy's ask rule matches opens an approval and
// waits (see judge) until an approver answers it, its context ends (the
// approval is withdrawn), its sandbox ends (withdrawn) or
// Config.ApprovalTimeout passes (expired: denied). Approvals live in the
// daemon's memory, like the calls that wait for them: pending ones, and
// the newest maxAnswered answered ones per tenant for listing.
//
// An allow with scope always is a grant: later requests of the same
// sandbox with the same kind, the same request text (as the engine
// normalized it) and the same deciding rule (text and source) are allowed
// without asking, for the sandbox's life.

// DefaultApprovalTimeout is how long an approval waits for an answer.
const DefaultApprovalTimeout = 2 * time.Minute

// maxAnswered bounds the answered approvals kept per tenant; maxFollowLag
// the approval events a follower may have unread before it is dropped.
const (
	maxAnswered  = 1000
	maxFollowLag = 256
	maxComment   = 1024
)

// approval is one approval and what its waiter waits on.
type approval struct {
	key   grantKey
	mu    sync.Mutex
	info  api.Approval
	timer *time.Timer
	done  chan struct{} // closed when it is no longer pending
}

func (a *approval) view() api.Approval {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.info
}

// grantKey identifies the requests an allow-always covers.
type grantKey struct {
	tenant, sandbox, kind, request, rule string
}

// follower receives the approval events of a tenant (and sandbox).
type follower struct {
	tenant, sandbox string
	ch              chan api.Approval
	dropped         bool
}

// approvals is the daemon's registry.
type approvals struct {
	s       *Service
	timeout time.Duration

	mu        sync.Mutex
	byID      map[string]*approval
	order     []*approval // oldest first
	grants    map[grantKey]bool
	followers map[*follower]bool
	pending   int
}

func newApprovals(s *Service, timeout time.Duration) *approvals {
	return &approvals{s: s, timeout: timeout, byID: map[string]*approval{}, grants: map[grantKey]bool{}, followers: map[*follower]bool{}}
}

// pendingCount is the number of pending approvals (the gauge).
func (r *approvals) pendingCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pending
}

func newApprovalID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "ap_" + hex.EncodeToString(b[:])
}

// open starts an approval for decision d of a call of op, or reports that
// an allow-always already grants it.
func (r *approvals) open(c Caller, m *managed, op string, d policy.Decision, text string) (a *approval, granted bool) {
	rule, source := "", ""
	if d.Rule != nil {
		rule, source = d.Rule.String(), d.Rule.Source()
	}
	key := grantKey{tenant: c.Tenant, sandbox: m.info.ID, kind: d.Request.Kind.String(), request: text, rule: rule + "\x00" + source}
	now := time.Now()
	a = &approval{key: key, done: make(chan struct{}), info: api.Approval{
		ID: newApprovalID(), Tenant: c.Tenant, Sandbox: m.info.ID, Op: op, Actor: c.Actor, Kind: key.kind, Request: text,
		Rule: rule, Source: source, Reason: d.Reason, State: api.ApprovalPending, CreatedAt: now, ExpiresAt: now.Add(r.timeout),
	}}
	r.mu.Lock()
	if r.grants[key] {
		r.mu.Unlock()
		return nil, true
	}
	r.byID[a.info.ID] = a
	r.order = append(r.order, a)
	r.pending++
	r.notify(a.info)
	// Under r.mu, so that the timer cannot fire before it is set.
	a.timer = time.AfterFunc(r.timeout, func() { r.expire(a) })
	r.mu.Unlock()
	return a, false
}

// finish moves a pending approval to state; false if it was not pending.
// r.mu must be held.
func (r *approvals) finish(a *approval, state, by, scope, comment string) bool {
	a.mu.Lock()
	if a.info.State != api.ApprovalPending {
		a.mu.Unlock()
		return false
	}
	now := time.Now()
	a.info.State, a.info.AnsweredAt, a.info.AnsweredBy, a.info.Scope, a.info.Comment = state, &now, by, scope, comment
	info := a.info
	a.mu.Unlock()
	if a.timer != nil {
		a.timer.Stop()
	}
	r.pending--
	if state == api.ApprovalAllowed && scope == api.ScopeAlways {
		r.grants[a.key] = true
	}
	close(a.done)
	r.notify(info)
	r.prune(info.Tenant)
	return true
}

// prune forgets the oldest answered approvals of tenant past maxAnswered.
// r.mu must be held.
func (r *approvals) prune(tenant string) {
	n := 0
	for _, a := range r.order {
		if a.info.Tenant == tenant && a.info.State != api.ApprovalPending {
			n++
		}
	}
	if n <= maxAnswered {
		return
	}
	r.order = slices.DeleteFunc(r.order, func(a *approval) bool {
		if n > maxAnswered && a.info.Tenant == tenant && a.info.State != api.ApprovalPending {
			n--
			delete(r.byID, a.info.ID)
			return true
		}
		return false
	})
}

// expire denies an approval nobody answered in time.
func (r *approvals) expire(a *approval) {
	r.mu.Lock()
	ok := r.finish(a, api.ApprovalExpired, "system", "", "")
	r.mu.Unlock()
	if ok {
		info := a.view()
		r.s.record(audit.Event{Kind: "approval.expire", Tenant: info.Tenant, Actor: "system", Sandbox: info.Sandbox, Decision: audit.DecisionDeny,
			Rule: ruleWithSource(info.Rule, info.Source), Request: mustJSON(map[string]string{"approval": info.ID, "request": info.Request}),
			Result: mustJSON(map[string]string{"state": info.State})})
	}
}

// withdraw ends an approval whose call went away.
func (r *approvals) withdraw(a *approval, why string) {
	r.mu.Lock()
	ok := r.finish(a, api.ApprovalWithdrawn, "system", "", why)
	r.mu.Unlock()
	if ok {
		info := a.view()
		r.s.record(audit.Event{Kind: "approval.withdraw", Tenant: info.Tenant, Actor: "system", Sandbox: info.Sandbox,
			Rule: ruleWithSource(info.Rule, info.Source), Request: mustJSON(map[string]string{"approval": info.ID, "request": info.Request}),
			Result: mustJSON(map[string]string{"state": info.State, "why": why})})
	}
}

// forgetSandbox drops the grants of a sandbox that ended.
func (r *approvals) forgetSandbox(tenant, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.grants {
		if k.tenant == tenant && k.sandbox == id {
			delete(r.grants, k)
		}
	}
}

// get finds an approval of the caller's tenant.
func (r *approvals) get(c Caller, id string) (*approval, error) {
	r.mu.Lock()
	a := r.byID[id]
	r.mu.Unlock()
	if a == nil || a.info.Tenant != c.Tenant {
		return nil, api.Errorf(api.CodeNotFound, "no approval %q", id)
	}
	return a, nil
}

// list returns the caller's approvals that match, oldest first.
func (r *approvals) list(c Caller, state, sandbox string) []api.Approval {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.listLocked(c.Tenant, state, sandbox)
}

func (r *approvals) listLocked(tenant, state, sandbox string) []api.Approval {
	out := []api.Approval{}
	for _, a := range r.order {
		info := a.view()
		if info.Tenant == tenant && (sandbox == "" || info.Sandbox == sandbox) && (state == "all" || info.State == state) {
			out = append(out, info)
		}
	}
	return out
}

// follow registers a follower and returns the approvals that match now.
func (r *approvals) follow(c Caller, state, sandbox string) (*follower, []api.Approval) {
	f := &follower{tenant: c.Tenant, sandbox: sandbox, ch: make(chan api.Approval, maxFollowLag)}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.followers[f] = true
	return f, r.listLocked(c.Tenant, state, sandbox)
}

func (r *approvals) unfollow(f *follower) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.followers[f] {
		delete(r.followers, f)
		close(f.ch)
	}
}

// notify sends an approval to its followers; one that lags too far is
// dropped (its stream ends with an error). r.mu must be held.
func (r *approvals) notify(info api.Approval) {
	for f := range r.followers {
		if f.tenant != info.Tenant || f.sandbox != "" && f.sandbox != info.Sandbox {
			continue
		}
		select {
		case f.ch <- info:
		default:
			f.dropped = true
			delete(r.followers, f)
			close(f.ch)
		}
	}
}

// answer records an approver's answer.
func (r *approvals) answer(c Caller, id, state, scope, comment string) (api.Approval, error) {
	a, err := r.get(c, id)
	if err != nil {
		return api.Approval{}, err
	}
	r.mu.Lock()
	ok := r.finish(a, state, c.Actor, scope, comment)
	r.mu.Unlock()
	info := a.view()
	if !ok {
		return info, api.Errorf(api.CodeConflict, "approval %s is %s, not pending", id, info.State)
	}
	return info, nil
}

// Handlers.

var approvalListStates = map[string]bool{"all": true, api.ApprovalPending: true, api.ApprovalAllowed: true,
	api.ApprovalDenied: true, api.ApprovalExpired: true, api.ApprovalWithdrawn: true}

func (s *Service) listApprovals(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decode[api.ListApprovals](in)
	if err != nil {
		return nil, err
	}
	if req.State == "" {
		req.State = api.ApprovalPending
	}
	if !approvalListStates[req.State] {
		return nil, api.Errorf(api.CodeInvalidArgument, "state must be pending, allowed, denied, expired, withdrawn or all")
	}
	if !req.Follow {
		return &api.ApprovalList{Approvals: s.approvals.list(c, req.State, req.Sandbox)}, nil
	}
	if in.emit == nil {
		return nil, api.Errorf(api.CodeInvalidArgument, "follow is a stream, which this transport cannot carry")
	}
	f, now := s.approvals.follow(c, req.State, req.Sandbox)
	defer s.approvals.unfollow(f)
	if in.open != nil {
		in.open()
	}
	var seq uint64
	send := func(a api.Approval) error {
		seq++
		return in.emit(api.Event{Seq: seq, Type: api.EventApproval, Approval: &a})
	}
	for _, a := range now {
		if err := send(a); err != nil {
			return nil, err
		}
	}
	for {
		select {
		case <-ctx.Done():
			return &api.ApprovalList{Approvals: now}, nil
		case <-s.stop:
			return nil, api.Errorf(api.CodeUnavailable, "the server is shutting down")
		case a, ok := <-f.ch:
			if !ok {
				return nil, api.Errorf(api.CodeUnavailable, "the follower fell more than %d events behind; list again and follow anew", maxFollowLag)
			}
			if err := send(a); err != nil {
				return nil, err
			}
		}
	}
}

func (s *Service) getApproval(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decode[api.ApprovalRef](in)
	if err != nil {
		return nil, err
	}
	a, err := s.approvals.get(c, req.ID)
	if err != nil {
		return nil, err
	}
	info := a.view()
	return &info, nil
}

func (s *Service) answerApproval(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decode[api.AnswerApproval](in)
	if err != nil {
		return nil, err
	}
	if !c.Approver {
		return nil, api.Errorf(api.CodePermissionDenied, "only an approver may answer approvals (a token with the role approver in the tokens file, or the stdio peer); this token has no such role")
	}
	var state string
	switch req.Decision {
	case api.DecisionAllow:
		state = api.ApprovalAllowed
	case api.DecisionDeny:
		state = api.ApprovalDenied
	default:
		return nil, api.Errorf(api.CodeInvalidArgument, "decision must be %q or %q", api.DecisionAllow, api.DecisionDeny)
	}
	switch req.Scope {
	case "":
		if state == api.ApprovalAllowed {
			req.Scope = api.ScopeOnce
		}
	case api.ScopeOnce:
	case api.ScopeAlways:
		if state != api.ApprovalAllowed {
			return nil, api.Errorf(api.CodeInvalidArgument, "scope always is for an allow")
		}
	default:
		return nil, api.Errorf(api.CodeInvalidArgument, "scope must be %q or %q", api.ScopeOnce, api.ScopeAlways)
	}
	if len(req.Reason) > maxComment {
		return nil, api.Errorf(api.CodeInvalidArgument, "reason is at most %d bytes", maxComment)
	}
	if req.ID == "" {
		return nil, api.Errorf(api.CodeInvalidArgument, "approval id is required")
	}
	info, err := s.approvals.answer(c, req.ID, state, req.Scope, req.Reason)
	if err != nil {
		return nil, err
	}
	// An answer is recorded as approval.answer, with the approver's
	// decision (a failed call as approvals.answer).
	in.rec.ev = audit.Event{Kind: "approval.answer", Sandbox: info.Sandbox, Decision: req.Decision,
		Rule: ruleWithSource(info.Rule, info.Source), Request: mustJSON(map[string]string{"approval": info.ID, "request": info.Request}),
		Result: mustJSON(map[string]string{"state": info.State, "scope": info.Scope, "comment": info.Comment})}
	return &info, nil
}
