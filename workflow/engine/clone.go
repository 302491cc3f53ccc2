package engine

import (
	"maps"
	"slices"
	"time"

	"github.com/moat-sandbox/moat/api"
)

// cloneRecord returns a copy of r that shares nothing mutable with it:
// the engine hands copies to the journal and to callers while it keeps
// changing its own.
func cloneRecord(r *Record) *Record {
	c := *r
	c.Run = cloneRun(&r.Run)
	c.Added = slices.Clone(r.Added)
	c.Tries = maps.Clone(r.Tries)
	return &c
}

// cloneRun returns a deep copy of a run's state. Results are shared: the
// engine replaces a *sandbox.Result, it never changes one.
func cloneRun(r *api.WorkflowRun) api.WorkflowRun {
	c := *r
	c.Labels = maps.Clone(r.Labels)
	c.Ended = cloneTime(r.Ended)
	c.Steps = make([]api.WorkflowStep, len(r.Steps))
	for i := range r.Steps {
		c.Steps[i] = cloneStep(&r.Steps[i])
	}
	c.Groups = make([]api.WorkflowGroup, len(r.Groups))
	for i, g := range r.Groups {
		if g.Budget != nil {
			b := *g.Budget
			g.Budget = &b
		}
		c.Groups[i] = g
	}
	return c
}

func cloneStep(s *api.WorkflowStep) api.WorkflowStep {
	c := *s
	c.Attempts = make([]api.WorkflowAttempt, len(s.Attempts))
	for i, a := range s.Attempts {
		a.Ended = cloneTime(a.Ended)
		c.Attempts[i] = a
	}
	if s.Attempts == nil {
		c.Attempts = nil
	}
	c.Outputs = slices.Clone(s.Outputs)
	c.Started = cloneTime(s.Started)
	c.Ended = cloneTime(s.Ended)
	c.Needs = slices.Clone(s.Needs)
	c.Inputs = maps.Clone(s.Inputs)
	return c
}

// briefRun is a run as workflow.list shows it: its steps with their
// state only (no attempts, results or artifacts).
func briefRun(r *api.WorkflowRun) api.WorkflowRun {
	c := *r
	c.Steps = make([]api.WorkflowStep, len(r.Steps))
	for i, s := range r.Steps {
		c.Steps[i] = api.WorkflowStep{ID: s.ID, Group: s.Group, Kind: s.Kind, State: s.State, Priority: s.Priority, Attempt: s.Attempt}
	}
	return c
}

func cloneTime(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	c := *t
	return &c
}
