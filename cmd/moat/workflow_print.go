package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/display"
	"github.com/moat-sandbox/moat/sandbox"
)

// Every string below that a run carries (ids, names, messages, output)
// may have been chosen by a sandbox or by whoever wrote the document: it
// goes through package display before it reaches a terminal.

// tailLines is how many lines of a failed step's standard error run and
// wait show.
const tailLines = 20

// eventLine is one event as a line: "12:00:01 step build started (attempt 1)".
func eventLine(ev api.WorkflowEvent) string {
	d := display.String
	step, msg := d(ev.Step), ""
	if ev.Message != "" {
		msg = ": " + d(ev.Message)
	}
	var s string
	switch ev.Type {
	case api.WfRunStarted:
		s = "run " + d(ev.Run) + " started"
	case api.WfRunResumed:
		s = "run " + d(ev.Run) + " resumed" + msg
	case api.WfRunInterrupted:
		s = "run " + d(ev.Run) + " interrupted" + msg
	case api.WfRunSucceeded:
		s = "run " + d(ev.Run) + " succeeded"
	case api.WfRunFailed:
		s = "run " + d(ev.Run) + " failed" + msg
	case api.WfRunCancelled:
		s = "run " + d(ev.Run) + " cancelled" + msg
	case api.WfStepAdded:
		s = "step " + step + " added"
		if ev.Group != "" {
			s += " to group " + d(ev.Group)
		}
	case api.WfStepStarted:
		s = fmt.Sprintf("step %s started (attempt %d)", step, ev.Attempt)
	case api.WfStepSandbox:
		s = fmt.Sprintf("step %s attempt %d: sandbox %s", step, ev.Attempt, d(ev.Sandbox))
	case api.WfStepRetrying:
		s = fmt.Sprintf("step %s attempt %d failed%s; retrying%s", step, ev.Attempt, resultWords(ev.Result), msg)
	case api.WfStepSucceeded:
		s = fmt.Sprintf("step %s succeeded (attempt %d%s)", step, ev.Attempt, resultWords(ev.Result))
	case api.WfStepFailed:
		s = fmt.Sprintf("step %s failed (attempt %d%s)%s", step, ev.Attempt, resultWords(ev.Result), msg)
	case api.WfStepSkipped:
		s = "step " + step + " skipped" + msg
	case api.WfStepCancelled:
		s = "step " + step + " cancelled" + msg
	case api.WfStepSnapshot:
		s = "step " + step + " snapshot " + d(ev.Snapshot)
	case api.WfStepArtifacts:
		var n int64
		for _, a := range ev.Artifacts {
			n += a.Bytes
		}
		s = fmt.Sprintf("step %s collected %d files (%s)", step, len(ev.Artifacts), formatBytes(n))
	case api.WfGroupBudget:
		s = "group " + d(ev.Group) + " budget" + msg
	default:
		s = d(ev.Type)
		if ev.Step != "" {
			s += " step " + step
		}
		s += msg
	}
	return ev.Time.Local().Format(time.TimeOnly) + " " + s
}

// resultWords is ", exit 0, 1.25s" for a result ("" for none).
func resultWords(r *sandbox.Result) string {
	if r == nil {
		return ""
	}
	s := ", exit " + strconv.Itoa(r.ExitCode)
	if r.ExitReason != "" && r.ExitReason != sandbox.ReasonExited {
		s += " (" + display.String(string(r.ExitReason)) + ")"
	}
	return s + ", " + fmtDuration(time.Duration(r.DurationMs)*time.Millisecond)
}

// fmtDuration is d rounded for a table: "0.42s", "12.3s", "4m5s".
func fmtDuration(d time.Duration) string {
	switch {
	case d < 10*time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + "s"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	}
	return d.Round(time.Second).String()
}

// span is how long from start to end took, or has taken by now when end
// is nil ("-" when it has not started).
func span(start time.Time, end *time.Time, now time.Time) string {
	if start.IsZero() {
		return "-"
	}
	if end == nil {
		return fmtDuration(now.Sub(start)) + "+"
	}
	return fmtDuration(end.Sub(start))
}

// stepSpan is span for a step.
func stepSpan(s api.WorkflowStep, now time.Time) string {
	if s.Started == nil {
		return "-"
	}
	return span(*s.Started, s.Ended, now)
}

// printEnd prints an ended run as o says: the steps' table and the end of
// failed steps' standard error on stderr, or JSON.
func printEnd(sio sandboxIO, run *api.WorkflowRun, o followOpts) error {
	switch {
	case o.json && o.follow:
		return printJSONLine(sio.stdout, run)
	case o.json:
		return printJSONTo(sio.stdout, run)
	}
	if o.follow {
		fmt.Fprintln(sio.stdout)
	}
	if err := printSteps(sio.stdout, run, time.Now()); err != nil {
		return err
	}
	printFailures(sio.stderr, run)
	return nil
}

// printSteps writes the table of a run's steps.
func printSteps(w io.Writer, run *api.WorkflowRun, now time.Time) error {
	d := display.String
	return printList(w, false, run.Steps, "STEP\tGROUP\tSTATE\tATTEMPTS\tEXIT\tDURATION\tSNAPSHOT", func(s api.WorkflowStep) string {
		exit := "-"
		if s.Result != nil {
			exit = strconv.Itoa(s.Result.ExitCode)
		}
		return fmt.Sprintf("%s\t%s\t%s\t%d\t%s\t%s\t%s", d(s.ID), d(orDash(s.Group)), d(s.State), s.Attempt, exit, stepSpan(s, now), d(orDash(s.Snapshot)))
	})
}

// printFailures writes why the run did not succeed and, for each failed
// step, the last lines of its last attempt's standard error.
func printFailures(w io.Writer, run *api.WorkflowRun) {
	if run.State == api.RunSucceeded {
		return
	}
	line := "moat: run " + display.String(run.ID) + " " + display.String(run.State)
	if run.Error != "" && run.Error != run.State {
		line += ": " + display.String(run.Error)
	}
	fmt.Fprintln(w, line)
	for _, s := range run.Steps {
		if s.State != api.StepFailed {
			continue
		}
		why := resultWords(s.Result)
		if s.Error != "" {
			why += ": " + display.String(s.Error)
		}
		fmt.Fprintf(w, "moat: step %s failed (attempt %d%s)\n", display.String(s.ID), s.Attempt, why)
		if s.Result == nil || s.Result.Stderr == "" {
			continue
		}
		lines := strings.Split(strings.TrimRight(s.Result.Stderr, "\n"), "\n")
		if len(lines) > tailLines {
			fmt.Fprintf(w, "  … (%d lines before)\n", len(lines)-tailLines)
			lines = lines[len(lines)-tailLines:]
		}
		for _, l := range lines {
			fmt.Fprintf(w, "  %s\n", display.String(l))
		}
	}
}

// printRun writes what `moat workflow get` shows: the run, its steps'
// table, then each step's attempts and artifacts.
func printRun(w io.Writer, run *api.WorkflowRun, now time.Time) error {
	d := display.String
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	state := d(run.State)
	if run.Error != "" {
		state += ": " + d(run.Error)
	}
	fmt.Fprintf(tw, "run\t%s\n", d(run.ID))
	fmt.Fprintf(tw, "name\t%s\n", d(orDash(run.Name)))
	fmt.Fprintf(tw, "state\t%s\n", state)
	fmt.Fprintf(tw, "created\t%s (%s)\n", run.Created.Local().Format(time.DateTime), ago(now, run.Created))
	fmt.Fprintf(tw, "duration\t%s\n", span(run.Created, run.Ended, now))
	if run.Resumes > 0 {
		fmt.Fprintf(tw, "resumes\t%d\n", run.Resumes)
	}
	if len(run.Labels) > 0 {
		fmt.Fprintf(tw, "labels\t%s\n", formatLabels(run.Labels))
	}
	for _, g := range run.Groups {
		fmt.Fprintf(tw, "group\t%s\n", groupLine(g))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if err := printSteps(w, run, now); err != nil {
		return err
	}
	for _, s := range run.Steps {
		fmt.Fprintf(w, "\n%s:", d(s.ID))
		if s.From != "" {
			fmt.Fprintf(w, " from %s", d(s.From))
		}
		if len(s.Needs) > 0 {
			needs := slices.Clone(s.Needs)
			for i := range needs {
				needs[i] = d(needs[i])
			}
			fmt.Fprintf(w, " needs %s", strings.Join(needs, ","))
		}
		if s.Error != "" {
			fmt.Fprintf(w, " (%s)", d(s.Error))
		}
		fmt.Fprintln(w)
		for _, a := range s.Attempts {
			fmt.Fprintf(w, "  %s\n", attemptLine(a, now))
		}
		for _, a := range s.Outputs {
			fmt.Fprintf(w, "  output %s  %s  sha256:%s\n", d(a.Path), formatBytes(a.Bytes), d(a.SHA256))
		}
	}
	return nil
}

// groupLine describes a group: "tests parallel, max 3, budget 1.5 cpus 1.0 GiB, succeeded".
func groupLine(g api.WorkflowGroup) string {
	s := display.String(g.ID) + " " + display.String(g.Mode)
	if g.MaxParallel > 0 {
		s += fmt.Sprintf(", max %d", g.MaxParallel)
	}
	if b := g.Budget; b != nil {
		var parts []string
		if b.CPUs > 0 {
			parts = append(parts, strconv.FormatFloat(b.CPUs, 'f', -1, 64)+" cpus")
		}
		if b.MemoryBytes > 0 {
			parts = append(parts, formatBytes(b.MemoryBytes))
		}
		if b.Pids > 0 {
			parts = append(parts, fmt.Sprintf("%d pids", b.Pids))
		}
		if len(parts) > 0 {
			s += ", budget " + strings.Join(parts, " ")
		}
	}
	if g.State != "" {
		s += ", " + display.String(g.State)
	}
	return s
}

// attemptLine describes one attempt: "attempt 1 failed, exit 1, 0.31s;
// sandbox sb-…; from snapshot snap-…".
func attemptLine(a api.WorkflowAttempt, now time.Time) string {
	d := display.String
	s := fmt.Sprintf("attempt %d %s", a.Attempt, d(a.State))
	if a.Result != nil {
		s += resultWords(a.Result)
	} else {
		s += ", " + span(a.Started, a.Ended, now)
	}
	if a.Sandbox != "" {
		s += "; sandbox " + d(a.Sandbox)
	}
	if a.Build != "" {
		s += "; build " + d(a.Build)
	}
	switch {
	case a.StartSnapshot != "":
		s += "; from snapshot " + d(a.StartSnapshot)
	case a.Template != "":
		s += "; template " + d(a.Template)
	}
	if a.Error != "" {
		s += "; " + d(a.Error)
	}
	return s
}

// printOutput writes a result's captured output, each line under the
// prefix "  STEP#N stdout| " (or stderr), escaped.
func printOutput(w io.Writer, step string, attempt int, r *sandbox.Result) {
	for _, stream := range []struct{ name, text string }{{"stdout", r.Stdout}, {"stderr", r.Stderr}} {
		if stream.text == "" {
			continue
		}
		prefix := fmt.Sprintf("  %s#%d %s| ", display.String(step), attempt, stream.name)
		for _, l := range strings.Split(strings.TrimRight(stream.text, "\n"), "\n") {
			fmt.Fprintln(w, prefix+display.String(l))
		}
	}
	if r.Truncated {
		fmt.Fprintf(w, "  %s#%d (output cut: %d bytes of stdout, %d of stderr in all)\n", display.String(step), attempt, r.StdoutBytes, r.StderrBytes)
	}
}

// lockedWriter serialises writes to w: a followed run's events and the
// messages of ^C come from different goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
