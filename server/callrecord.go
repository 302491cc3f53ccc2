package server

import (
	"time"

	"github.com/moat-sandbox/moat/audit"
)

// callRecord is the audit record of one call, which the dispatcher
// (Service.call) alone writes, once, after the handler has returned or
// panicked, whatever the outcome. Handlers never call Service.record for
// their call; they describe the record here (input.rec):
//
//   - By default the record is one event: the operation's name as its
//     kind, the caller's tenant and actor, the sandbox the request names,
//     the request as auditRequest keeps it, the call's duration, its
//     decision (allow; deny for a refusal of what the caller may not do,
//     decisionOf) and error, and the policy's verdicts (in.verdicts).
//   - A handler sets in ev what only it knows (a result, the sandbox it
//     created, a call id, another kind or request shape): fields it set
//     are kept, the others filled in as above. A Decision it set stands
//     unless the call fails with a refusal; an Error it set stands.
//   - A call whose record is other events says so with instead: a fork's
//     record is the sandbox.create of each sandbox it tried to make, a
//     delete's the sandbox.end that Service.end writes when the delete
//     is what ended the sandbox.
//   - A call whose answer depends on its record being on disk (exec,
//     start: the record goes with the call's store row, and a record the
//     disk refuses turns the answer into 507) writes it itself, through
//     durable, before it answers.
//
// Events that are not a call's record keep their own path, apart from
// this one: a background process's exit, a sandbox's end (pruner,
// shutdown), approval requests, expiries and withdrawals, the egress
// proxy's connections, authentication failures.
type callRecord struct {
	ev       audit.Event   // what the handler set; see above
	replaced bool          // instead was called: events are the record
	events   []audit.Event // the record, when replaced
	written  bool          // durable wrote the record
}

// instead makes evs the call's record in place of its own event (none:
// another path writes it, named in a comment at the call). Tenant and
// Actor are filled in where empty.
func (r *callRecord) instead(evs ...audit.Event) {
	r.replaced, r.events = true, evs
}

// durable writes the call's record now, before the call is answered, with
// write (recordEnd or recordNow: a record the disk refuses is kept in the
// backlog and the error returned, for notDurable), and tells the
// dispatcher that the record is written. It returns write's error.
func (r *callRecord) durable(write func() error) error {
	r.written = true
	return write()
}

// recordCall writes the record of the call of operation name by c, which
// ended with err (an API error, or nil) after took: see callRecord.
func (s *Service) recordCall(c Caller, name string, in *input, err error, took time.Duration) {
	r := &in.rec
	switch {
	case r.written:
		return
	case r.replaced:
		for _, ev := range r.events {
			if ev.Tenant == "" {
				ev.Tenant = c.Tenant
			}
			if ev.Actor == "" {
				ev.Actor = c.Actor
			}
			s.record(ev)
		}
		return
	}
	ev := r.ev
	if ev.Kind == "" {
		ev.Kind = name
	}
	ev.Tenant, ev.Actor = c.Tenant, c.Actor
	if ev.Sandbox == "" {
		ev.Sandbox = sandboxOf(in.req)
	}
	if ev.Request == nil {
		ev.Request = mustJSON(auditRequest(in.req))
	}
	if ev.DurationMs == 0 {
		ev.DurationMs = took.Milliseconds()
	}
	switch {
	case err != nil:
		if ev.Error == "" {
			ev.Error = err.Error()
		}
		if d := decisionOf(err); d != "" || ev.Decision == "" {
			ev.Decision = d
		}
	case ev.Decision == "":
		ev.Decision = audit.DecisionAllow
	}
	withVerdicts(&ev, in.verdicts)
	s.record(ev)
}
