package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/bench/internal/stats"
	"github.com/moat-sandbox/moat/bench/schema"
)

// outcome is one workflow run as the client saw it.
type outcome struct {
	wall   time.Duration // submit → the followed event stream ended with the run's end
	run    *api.WorkflowRun
	events []api.WorkflowEvent
}

// runWorkflow submits doc and follows the run's events until it ends
// (timed), then reads the run with its steps (untimed). A run that does
// not succeed is an error naming its failed steps.
func (b *bench) runWorkflow(ctx context.Context, doc string, timeout time.Duration) (*outcome, error) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t0 := time.Now()
	started, err := b.c.CreateWorkflow(cctx, api.CreateWorkflow{Document: doc})
	if err != nil {
		return nil, fmt.Errorf("create: %w", err)
	}
	out := &outcome{}
	_, err = b.c.WorkflowEvents(cctx, api.WorkflowEvents{Run: started.ID, Follow: true}, func(ev api.WorkflowEvent) error {
		out.events = append(out.events, ev)
		if ev.Type == api.WfRunSucceeded || ev.Type == api.WfRunFailed || ev.Type == api.WfRunCancelled {
			// The run's result, as its follower learns it; the stream
			// ends after the run's clean-up (its light snapshots).
			out.wall = time.Since(t0)
		}
		return nil
	})
	if out.wall == 0 {
		out.wall = time.Since(t0)
	}
	if err != nil {
		return out, fmt.Errorf("run %s: following its events: %w", started.ID, err)
	}
	if out.run, err = b.c.Workflow(cctx, started.ID); err != nil {
		return out, fmt.Errorf("run %s: %w", started.ID, err)
	}
	if out.run.State != api.RunSucceeded {
		return out, fmt.Errorf("run %s ended %s: %s%s", started.ID, out.run.State, out.run.Error, stepErrors(out.run))
	}
	return out, nil
}

// stepErrors describes the steps of run that did not succeed.
func stepErrors(run *api.WorkflowRun) string {
	var b strings.Builder
	for _, s := range run.Steps {
		if s.State == api.StepSucceeded {
			continue
		}
		fmt.Fprintf(&b, "; step %s %s", s.ID, s.State)
		if s.Error != "" {
			b.WriteString(": " + s.Error)
		}
		if r := s.Result; r != nil {
			fmt.Fprintf(&b, " (exit %d %s; stderr %q)", r.ExitCode, r.ExitReason, firstN(r.Stderr, 200))
		}
	}
	return b.String()
}

// findStep returns the step id of run, or nil.
func findStep(run *api.WorkflowRun, id string) *api.WorkflowStep {
	for i := range run.Steps {
		if run.Steps[i].ID == id {
			return &run.Steps[i]
		}
	}
	return nil
}

// printed checks that step id of run succeeded printing want (its
// stdout, trimmed).
func printed(run *api.WorkflowRun, id, want string) error {
	s := findStep(run, id)
	switch {
	case s == nil:
		return fmt.Errorf("run %s has no step %s", run.ID, id)
	case s.State != api.StepSucceeded:
		return fmt.Errorf("step %s: %s", id, s.State)
	case s.Result == nil:
		return fmt.Errorf("step %s: no result", id)
	case strings.TrimSpace(s.Result.Stdout) != want:
		return fmt.Errorf("step %s printed %q, want %s", id, firstN(s.Result.Stdout, 100), want)
	}
	return nil
}

// chain times one run of a chain (snapshots: each step from its
// predecessor's snapshot, printing its place in the chain; without:
// each fresh, printing 1).
func (b *bench) chain(ctx context.Context, kind string, snapshots, record bool) error {
	out, err := b.runWorkflow(ctx, b.docs[kind], b.o.callTimeout)
	if err == nil {
		for i := 1; i <= b.o.steps && err == nil; i++ {
			want := "1"
			if snapshots {
				want = strconv.Itoa(i)
			}
			err = printed(out.run, stepID("s", i, b.o.steps), want)
		}
	}
	if err != nil {
		return b.failed(kind, record, err)
	}
	if record {
		r := b.rows[kind]
		r.add(stats.Ms(out.wall))
		r.Checked++
		r.addPhases(phases(out.events, nil))
	}
	return nil
}

// retry times the retry of the last step of a chain from its snapshot,
// from the run's timestamps, and the whole run's wall time.
func (b *bench) retry(ctx context.Context, record bool) error {
	out, err := b.runWorkflow(ctx, b.docs[schema.WorkflowRetry], b.o.callTimeout)
	if err != nil {
		return b.failed(schema.WorkflowRetry, record, err)
	}
	last := stepID("s", retrySteps, retrySteps)
	cost, err := retryCost(out.run, last)
	if err == nil {
		err = printed(out.run, last, strconv.Itoa(retrySteps))
	}
	if err != nil {
		return b.failed(schema.WorkflowRetry, record, err)
	}
	if record {
		r := b.rows[schema.WorkflowRetry]
		r.add(stats.Ms(cost))
		r.Checked++
		r.addPhases(phases(out.events, func(step string) bool { return step == last }))
		b.rows[schema.WorkflowRetryRun].add(stats.Ms(out.wall))
	}
	return nil
}

// retryCost checks that step id of run failed once and succeeded on a
// second attempt started from the same snapshot as the first, and
// returns the time from the failed attempt's end to the step's success.
func retryCost(run *api.WorkflowRun, id string) (time.Duration, error) {
	s := findStep(run, id)
	if s == nil {
		return 0, fmt.Errorf("run %s has no step %s", run.ID, id)
	}
	if len(s.Attempts) != 2 {
		return 0, fmt.Errorf("step %s: %d attempt(s), want 2", id, len(s.Attempts))
	}
	a1, a2 := s.Attempts[0], s.Attempts[1]
	switch {
	case a1.Result == nil || a1.Result.ExitCode == 0:
		return 0, fmt.Errorf("step %s: the first attempt did not fail (%s)", id, a1.State)
	case a2.Result == nil || a2.Result.ExitCode != 0 || s.State != api.StepSucceeded:
		return 0, fmt.Errorf("step %s: the second attempt did not succeed (%s, step %s)", id, a2.State, s.State)
	case a1.StartSnapshot == "":
		return 0, fmt.Errorf("step %s: the first attempt started from no snapshot", id)
	case a2.StartSnapshot != a1.StartSnapshot:
		return 0, fmt.Errorf("step %s: the retry started from snapshot %q, the first attempt from %q", id, a2.StartSnapshot, a1.StartSnapshot)
	case a1.Ended == nil:
		return 0, fmt.Errorf("step %s: the failed attempt has no end", id)
	}
	end := a2.Ended
	if s.Ended != nil {
		end = s.Ended
	}
	if end == nil {
		return 0, fmt.Errorf("step %s: no end of its success", id)
	}
	d := end.Sub(*a1.Ended)
	if d <= 0 {
		return 0, fmt.Errorf("step %s: its success (%s) is not after the failed attempt's end (%s)", id, end, a1.Ended)
	}
	return d, nil
}

// scratch times the same chain run afresh, every step passing.
func (b *bench) scratch(ctx context.Context, record bool) error {
	out, err := b.runWorkflow(ctx, b.docs[schema.WorkflowScratch], b.o.callTimeout)
	if err == nil {
		for i := 1; i <= retrySteps && err == nil; i++ {
			err = printed(out.run, stepID("s", i, retrySteps), strconv.Itoa(i))
		}
	}
	if err != nil {
		return b.failed(schema.WorkflowScratch, record, err)
	}
	if record {
		r := b.rows[schema.WorkflowScratch]
		r.add(stats.Ms(out.wall))
		r.Checked++
	}
	return nil
}

// phases returns the times between a run's consecutive events: within a
// step ("step.started → step.sandbox"), from one step's success to the
// next step's first event ("handoff: step.succeeded → step.started"),
// and from the run's start to its first step and from the last step to
// the run's end. keep selects the steps (nil: all).
func phases(evs []api.WorkflowEvent, keep func(step string) bool) []phase {
	evs = slices.Clone(evs)
	slices.SortStableFunc(evs, func(x, y api.WorkflowEvent) int { return cmp.Compare(x.Seq, y.Seq) })
	var out []phase
	add := func(from, to api.WorkflowEvent, name string) {
		out = append(out, phase{name: name, ms: stats.Ms(to.Time.Sub(from.Time))})
	}
	last := map[string]api.WorkflowEvent{}
	var runStart, lastDone *api.WorkflowEvent
	for i := range evs {
		ev := evs[i]
		switch {
		case ev.Type == api.WfRunStarted:
			runStart = &evs[i]
		case ev.Type == api.WfRunSucceeded:
			if lastDone != nil && keep == nil {
				add(*lastDone, ev, lastDone.Type+" (last step) → "+ev.Type)
			}
		case ev.Step != "":
			prev, seen := last[ev.Step]
			last[ev.Step] = ev
			if keep != nil && !keep(ev.Step) {
				if ev.Type == api.WfStepSucceeded {
					lastDone = &evs[i]
				}
				continue
			}
			switch {
			case seen:
				add(prev, ev, prev.Type+" → "+ev.Type)
			case lastDone != nil:
				add(*lastDone, ev, "handoff: "+lastDone.Type+" (previous step) → "+ev.Type)
			case runStart != nil:
				add(*runStart, ev, runStart.Type+" → "+ev.Type+" (first step)")
			}
			if ev.Type == api.WfStepSucceeded {
				lastDone = &evs[i]
			}
		}
	}
	return out
}

// firstN returns s cut to n bytes, "…" marking a cut.
func firstN(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
