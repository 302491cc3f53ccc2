package main

import (
	"context"
	"fmt"
	"io"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/display"
	"github.com/moat-sandbox/moat/workflow"
)

// dropLightSnapshots deletes, once a private daemon's run is over, the
// snapshots of its steps that the document did not ask to keep (every
// kind but full): nothing can resume the run after its daemon has ended,
// while the store it wrote them to outlives it. doc is the run's document
// (it says each step's kind). A snapshot still in use (a second ^C left
// steps running) is reported on stderr and left.
func dropLightSnapshots(ctx context.Context, c *client.Client, id, doc string, stderr io.Writer) {
	plan, err := workflow.Compile([]byte(doc), workflow.Options{})
	if err != nil {
		return // the daemon ran it, so it compiles; keep everything if not
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
	defer cancel()
	run, err := c.Workflow(ctx, id)
	if err != nil {
		return
	}
	var left []api.WorkflowStep
	for _, s := range run.Steps {
		if ps := plan.Step(s.ID); s.Snapshot != "" && ps != nil && ps.Snapshot != workflow.SnapshotFull {
			left = append(left, s)
		}
	}
	// A snapshot another is layered on is deleted after it: go round
	// until a round deletes nothing more.
	for len(left) > 0 {
		var next []api.WorkflowStep
		var errs []error
		for _, s := range left {
			err := c.DeleteSnapshot(ctx, s.Snapshot)
			if err == nil || client.IsNotFound(err) {
				continue
			}
			next = append(next, s)
			errs = append(errs, err)
		}
		if len(next) == len(left) {
			for i, s := range next {
				fmt.Fprintf(stderr, "moat: snapshot %s of step %s is left in the store: %s\n",
					display.String(s.Snapshot), display.String(s.ID), display.String(errs[i].Error()))
			}
			return
		}
		left = next
	}
}
