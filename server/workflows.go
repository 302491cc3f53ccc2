package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/workflow/engine"
)

// Workflows. The daemon runs workflow documents with the engine of
// package workflow/engine, which it gives:
//
//   - a Backend (workflows_backend.go): each step's sandbox, process,
//     snapshot and collected outputs are calls of the run's owner through
//     the dispatcher, admitted, judged, counted, recorded and audited as
//     the same calls made through the API;
//   - a Journal (workflows_journal.go): every run and its events are
//     kept in the store, so that a run in flight when the daemon stopped
//     goes on in the next one (Start: recover), and every step's and
//     run's end is audited (workflow.step, workflow.run);
//   - an artifact directory, "workflows" beside the store (mode 0700),
//     where the engine keeps the outputs steps pass to one another.
//
// The handlers below serve the workflow operations of api.Ops for the
// caller's tenant: another tenant's run is not_found.

// workflowsDir is the name of the artifact directory beside the store.
const workflowsDir = "workflows"

// workflows is the Service's workflow engine and what its Backend keeps.
type workflows struct {
	eng *engine.Engine
	// dir is the engine's artifact directory (absolute, clean).
	dir string

	mu sync.Mutex
	// budgets are the live budgets the engine made (NewBudget), by id.
	budgets map[string]*liveBudget

	// agentSteps are the agent steps whose runs are under way
	// (workflows_agent.go).
	agentSteps agentSteps
}

// newWorkflows makes the artifact directory and the engine of s.
func newWorkflows(s *Service) (*workflows, error) {
	dir := filepath.Join(s.cfg.Store.Dir(), workflowsDir)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("server: workflow artifact directory: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Errorf("server: workflow artifact directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("server: workflow artifact directory %s is not a directory", dir)
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return nil, fmt.Errorf("server: workflow artifact directory: %w", err)
		}
	}
	w := &workflows{dir: dir, budgets: map[string]*liveBudget{}}
	w.eng = engine.New(wfBackend{s: s}, newWFJournal(s), engine.Options{
		ArtifactDir: dir, CPUs: runtime.NumCPU(), Logger: s.log})
	return w, nil
}

// recover takes up the runs a previous daemon left unfinished.
func (w *workflows) recover(ctx context.Context) error {
	return w.eng.Recover(ctx)
}

// close stops the engine: its steps end, their runs stay unfinished in the
// store. It may be called more than once.
func (w *workflows) close(ctx context.Context) {
	_ = w.eng.Close(ctx)
}

// owner is the engine's Owner of the runs c makes.
func owner(c Caller) engine.Owner { return engine.Owner{Tenant: c.Tenant, Actor: c.Actor} }

// workflowError maps the engine's errors to the API's: an unknown run (or
// another tenant's) is not_found, a call the run's state does not allow is
// conflict, an invalid document or step invalid_argument with the
// document's line, a stopping engine unavailable.
func workflowError(err error) error {
	return runnerError(err, runnerSentinels{notFound: engine.ErrNotFound, conflict: engine.ErrConflict,
		invalid: engine.ErrInvalid, closed: engine.ErrClosed})
}

func (s *Service) createWorkflow(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decode[api.CreateWorkflow](in)
	if err != nil {
		return nil, err
	}
	if req.Document == "" {
		return nil, api.Errorf(api.CodeInvalidArgument, "document is required")
	}
	if err := validLabels(req.Labels); err != nil {
		return nil, err
	}
	run, err := s.wf.eng.Submit(ctx, owner(c), *req)
	if err != nil {
		return nil, workflowError(err)
	}
	in.rec.ev.Result = mustJSON(map[string]any{"run": run.ID, "name": run.Name, "state": run.State, "steps": len(run.Steps)})
	return run, nil
}

// checkListFilter checks the filter of a list: value, given as field,
// is "" or one of known; limit is not negative.
func checkListFilter(field, value string, known []string, limit int) error {
	if value != "" && !slices.Contains(known, value) {
		return api.Errorf(api.CodeInvalidArgument, "%s must be one of %q", field, known)
	}
	if limit < 0 {
		return api.Errorf(api.CodeInvalidArgument, "limit must not be negative")
	}
	return nil
}

// workflowStates are the states a list may filter by.
var workflowStates = []string{api.RunPending, api.RunRunning, api.RunSucceeded, api.RunFailed, api.RunCancelled}

func (s *Service) listWorkflows(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decode[api.ListWorkflows](in)
	if err != nil {
		return nil, err
	}
	if err := checkListFilter("state", req.State, workflowStates, req.Limit); err != nil {
		return nil, err
	}
	runs, err := s.wf.eng.List(ctx, c.Tenant, req.State, req.Limit)
	if err != nil {
		return nil, workflowError(err)
	}
	if runs == nil {
		runs = []api.WorkflowRun{}
	}
	return &api.WorkflowList{Runs: runs}, nil
}

func (s *Service) getWorkflow(ctx context.Context, c Caller, in *input) (any, error) {
	id, err := decodeRunRef[api.WorkflowRef](in)
	if err != nil {
		return nil, err
	}
	run, err := s.wf.eng.Get(ctx, c.Tenant, id)
	return run, workflowError(err)
}

func (s *Service) cancelWorkflow(ctx context.Context, c Caller, in *input) (any, error) {
	id, err := decodeRunRef[api.WorkflowRef](in)
	if err != nil {
		return nil, err
	}
	run, err := s.wf.eng.Cancel(ctx, c.Tenant, id)
	if err != nil {
		return nil, workflowError(err)
	}
	in.rec.ev.Result = mustJSON(map[string]string{"state": run.State})
	return run, nil
}

func (s *Service) resumeWorkflow(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decode[api.ResumeWorkflow](in)
	if err != nil {
		return nil, err
	}
	if err := checkRun(req.Run); err != nil {
		return nil, err
	}
	run, err := s.wf.eng.Resume(ctx, c.Tenant, req.Run, req.From)
	if err != nil {
		return nil, workflowError(err)
	}
	in.rec.ev.Result = mustJSON(map[string]any{"state": run.State, "resumes": run.Resumes})
	return run, nil
}

func (s *Service) addWorkflowStep(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decode[api.AddWorkflowStep](in)
	if err != nil {
		return nil, err
	}
	if err := checkRun(req.Run); err != nil {
		return nil, err
	}
	if req.Group == "" {
		return nil, api.Errorf(api.CodeInvalidArgument, "group is required")
	}
	if len(req.Step) == 0 || string(req.Step) == "null" {
		return nil, api.Errorf(api.CodeInvalidArgument, "step is required")
	}
	step := []byte(req.Step)
	// YAML text may come as a JSON string: the engine takes the text.
	var text string
	if json.Unmarshal(req.Step, &text) == nil {
		step = []byte(text)
	}
	run, err := s.wf.eng.AddStep(ctx, c.Tenant, req.Run, req.Group, step)
	if err != nil {
		return nil, workflowError(err)
	}
	return run, nil
}

func (s *Service) workflowEvents(ctx context.Context, c Caller, in *input) (any, error) {
	return serveRunEvents[api.WorkflowEvents](ctx, c, in, "workflow.events", s.wf.eng.Get, s.wf.eng.Events,
		workflowStreamEvent, workflowError)
}

// workflowStreamEvent is ev as workflow.events streams it.
func workflowStreamEvent(ev api.WorkflowEvent) api.Event {
	return api.Event{Seq: ev.Seq, Type: api.EventWorkflow, Workflow: &ev}
}

// workflowAudit is what the audit keeps of a workflow request: never the
// document or a step itself (their env may hold credentials), but their
// size and sha256, which identify them.
// req is a *api.CreateWorkflow or a *api.AddWorkflowStep.
func workflowAudit(req any) any {
	digest := func(b []byte) string {
		sum := sha256.Sum256(b)
		return hex.EncodeToString(sum[:])
	}
	switch r := req.(type) {
	case *api.CreateWorkflow:
		out := map[string]any{"document_bytes": len(r.Document), "document_sha256": digest([]byte(r.Document))}
		if r.Name != "" {
			out["name"] = r.Name
		}
		if len(r.Labels) > 0 {
			out["labels"] = r.Labels
		}
		return out
	case *api.AddWorkflowStep:
		return map[string]any{"run": r.Run, "group": r.Group, "step_bytes": len(r.Step), "step_sha256": digest(r.Step)}
	}
	return req
}
