package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/store"
)

// record appends an audit event. An event the tape cannot take for want
// of its disk is kept in the backlog and written when space returns (see
// durable.go); other failures (an event too large, a bad redaction) are
// logged loudly and counted. The call it describes has already happened.
func (s *Service) record(e audit.Event) {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	if err := s.appendEvent(e); err != nil {
		s.keep(pendingWrite{ev: &e, what: e.Kind}, err)
	}
}

// appendEvent appends e to the tape and waits for its fsync.
func (s *Service) appendEvent(e audit.Event) error {
	defer s.slow("audit append", time.Now())
	_, err := s.cfg.Tape.Append(e)
	return err
}

// slowOp is how long a store or audit write may take before it is logged.
const slowOp = 250 * time.Millisecond

// slow logs what took longer than slowOp since start (a disk stall shows
// up in every call's latency; this says where).
func (s *Service) slow(what string, start time.Time) {
	if d := time.Since(start); d > slowOp {
		s.metrics.slow(what)
		s.log.Warn("slow write", "what", what, "took", d.String())
	}
}

// decisionOf is the audit decision of a refused call: deny for what the
// caller may not do, "" for failures.
func decisionOf(err error) string {
	switch apiError(err).(*api.Error).Code {
	case api.CodePermissionDenied, api.CodePolicyDenied, api.CodeTooMany, api.CodeUnauthenticated, api.CodeStorage:
		return audit.DecisionDeny
	}
	return ""
}

func (s *Service) auditQuery(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decode[api.AuditQuery](in)
	if err != nil {
		return nil, err
	}
	if req.Limit < 0 || req.Limit > audit.MaxLimit {
		return nil, api.Errorf(api.CodeInvalidArgument, "limit must be between 0 and %d", audit.MaxLimit)
	}
	q := audit.Query{Tenant: c.Tenant, Sandbox: req.Sandbox, Call: req.Call, Kind: req.Kind, Decision: req.Decision,
		Since: req.Since, Until: req.Until, AfterSeq: req.AfterSeq, BeforeSeq: req.BeforeSeq, Actor: req.Actor,
		Limit: req.Limit, Newest: req.Newest}
	// The tenant filter is exact, and "" means every tenant: a caller
	// without a tenant must not get that.
	if c.Tenant == "" {
		return nil, api.Errorf(api.CodePermissionDenied, "no tenant")
	}
	page, err := s.cfg.Tape.QueryPage(ctx, q)
	if err != nil {
		return nil, err
	}
	return &api.AuditPage{Events: auditEvents(page.Events), More: page.More}, nil
}

// auditEvents converts the audit log's events to their wire form (package
// api keeps plain structs, apart from the audit log); never nil, so that an
// empty page has "events": [].
func auditEvents(evs []audit.Event) []api.AuditEvent {
	out := make([]api.AuditEvent, len(evs))
	for i, e := range evs {
		// A conversion, not a copy field by field: it stops compiling if
		// the two types stop having the same fields.
		out[i] = api.AuditEvent(e)
	}
	return out
}

// fromRecord describes a stopped sandbox from its store record.
func fromRecord(r *store.Sandbox) api.Sandbox {
	out := api.Sandbox{ID: r.ID, Tenant: r.Tenant, State: r.State, EndReason: r.EndReason, CreatedAt: r.CreatedAt,
		LastActiveAt: r.LastActiveAt, EndedAt: r.EndedAt, TimeoutMs: r.TimeoutMs, IdleTimeoutMs: r.IdleTimeoutMs}
	var spec api.CreateSandbox
	if json.Unmarshal(r.Spec, &spec) == nil {
		out.Workspace, out.Hostname, out.Labels = spec.Workspace, spec.Hostname, spec.Labels
	}
	return out
}

// sortSandboxes orders newest first.
func sortSandboxes(l []api.Sandbox) {
	slices.SortStableFunc(l, func(a, b api.Sandbox) int { return b.CreatedAt.Compare(a.CreatedAt) })
}

func isMaxBytesError(err error) bool {
	var mb *http.MaxBytesError
	return errors.As(err, &mb)
}
