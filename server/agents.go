package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"reflect"
	"sync"
	"syscall"

	"github.com/moat-sandbox/moat/agent"
	"github.com/moat-sandbox/moat/agent/model"
	"github.com/moat-sandbox/moat/api"
)

// Agent runs. The daemon runs agents documents with the runner of package
// agent, which it gives:
//
//   - one model client (agent/model), made at Start from the providers
//     section of the agents file Config.ModelsFile names (`moat serve
//     --models`, the [agent] section's models_file): every run of every
//     tenant shares it (agents_model.go, which also counts its attempts in
//     the metrics);
//   - a Backend (agents_backend.go): each tool call is an API call of the
//     run's owner through the dispatcher (sandbox.create, process.exec,
//     file.write…), admitted, judged by the sandbox's policy (an ask rule
//     holds it for an approver), counted, recorded and audited as the
//     same call made through the API; fetch_url goes through the egress
//     proxy of the agent's sandbox (agents_fetch.go);
//   - a Journal (agents_journal.go): every run, its conversations and its
//     events are kept in the store, so that a run in flight when the
//     daemon stopped goes on in the next one (Start: Recover), and each
//     model call and run end is audited (model.call, agent.run).
//
// The handlers below serve the agent operations of api.Ops for the
// caller's tenant: another tenant's run is not_found.
//
// A document given to agent.create names no model providers: the
// daemon's own serve it. The one exception is a document whose providers
// section is the daemon's own (the same providers, parsed equal): `moat
// agent run` without a shared daemon starts a private one with `moat
// serve --stdio --models FILE` and sends it FILE whole.

// Defaults of the agent runs (config.DefaultAgentMaxRuns and
// config.DefaultAgentMaxTurns, which the server does not import).
const (
	DefaultAgentMaxRuns  = 16
	DefaultAgentMaxTurns = 200
)

// errNoModels is agent.create's answer on a daemon without providers.
var errNoModels = api.Errorf(api.CodeUnimplemented, "no model providers configured (models_file): start the daemon with --models FILE or the [agent] section's models_file")

// agents is the Service's agent runner and what it was given.
type agents struct {
	eng     *agent.Engine
	journal *agJournal
	model   *agentModel

	// startMu serializes the quota check and the start of a run (create,
	// resume), so that a tenant's unfinished runs never pass MaxRuns.
	startMu sync.Mutex
}

// newAgents makes the runner of s, without its model client (start).
func newAgents(s *Service) *agents {
	a := &agents{journal: newAgJournal(s), model: &agentModel{s: s}}
	a.eng = agent.New(a.model, agBackend{s: s}, a.journal, agent.WithLogger(s.log))
	return a
}

// start makes the model client from the models file, if any, then takes
// up the runs a previous daemon left unfinished.
func (a *agents) start(ctx context.Context, s *Service) error {
	if s.cfg.ModelsFile != "" {
		cfg, err := loadModels(s.cfg.ModelsFile)
		if err != nil {
			return err
		}
		opts := append([]model.Option{model.WithObserver(a.model.observe), model.WithLogger(s.log)}, s.cfg.ModelOptions...)
		c, err := model.New(cfg, opts...)
		if err != nil {
			return fmt.Errorf("server: the model client of %s: %w", s.cfg.ModelsFile, err)
		}
		a.model.set(c, &cfg)
	}
	return a.eng.Recover(ctx)
}

// close stops the runner: its runs stop where they are (run.interrupted)
// and stay unfinished in the store, for the next daemon to take up. It
// may be called more than once.
func (a *agents) close() {
	a.eng.Close()
}

// maxModelsFile bounds the models file.
const maxModelsFile = 1 << 20

// loadModels reads the providers section of the agents file at path (its
// agents, if any, are not the daemon's business).
func loadModels(path string) (model.Config, error) {
	// O_NONBLOCK: a FIFO put where the file should be fails the type
	// check below instead of blocking the daemon's start.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return model.Config{}, fmt.Errorf("server: models file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return model.Config{}, fmt.Errorf("server: models file: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxModelsFile {
		return model.Config{}, fmt.Errorf("server: models file %s: not a regular file of at most %d bytes", path, maxModelsFile)
	}
	b := make([]byte, fi.Size())
	if _, err := f.ReadAt(b, 0); err != nil && fi.Size() > 0 {
		return model.Config{}, fmt.Errorf("server: models file: %w", err)
	}
	doc, err := agent.Compile(b)
	if err != nil {
		return model.Config{}, fmt.Errorf("server: models file %s: %w", path, err)
	}
	if len(doc.Providers.Providers) == 0 {
		return model.Config{}, fmt.Errorf("server: models file %s: no providers section", path)
	}
	return doc.Providers, nil
}

// agentOwner is the runner's Owner of the runs c makes.
func agentOwner(c Caller) agent.Owner { return agent.Owner{Tenant: c.Tenant, Actor: c.Actor} }

// agentCaller is the caller of a run's calls: never an approver.
func agentCaller(o agent.Owner) Caller { return Caller{Tenant: o.Tenant, Actor: o.Actor} }

// agentError maps the runner's errors to the API's: an unknown run (or
// another tenant's) is not_found, a call the run's state does not allow
// conflict, an invalid document, agent or task invalid_argument with the
// document's lines, a stopping runner unavailable.
func agentError(err error) error {
	return runnerError(err, runnerSentinels{notFound: agent.ErrNotFound, conflict: agent.ErrConflict,
		invalid: agent.ErrInvalid, closed: agent.ErrClosed})
}

// checkDocument compiles a create's document and checks what the daemon
// decides: its providers (none, or the daemon's own) and its max_turns
// (within the daemon's cap).
func (s *Service) checkDocument(text string) error {
	doc, err := agent.Compile([]byte(text))
	if err != nil {
		return api.Errorf(api.CodeInvalidArgument, "document: %v", err)
	}
	if len(doc.Providers.Providers) > 0 {
		own := s.ag.model.providers()
		if own == nil || !reflect.DeepEqual(doc.Providers, *own) {
			return api.Errorf(api.CodeInvalidArgument, "document: line %d: providers: a document sent to the daemon names no model providers: "+
				"the daemon's own serve its agents (remove the section; only a daemon started with --models on that same file takes it)", doc.ProvidersLine)
		}
	}
	limit := s.cfg.AgentMaxTurns
	for _, a := range doc.Agents {
		if a.MaxTurns > limit {
			return api.Errorf(api.CodeInvalidArgument, "document: line %d: agents.%s: max_turns %d is above the daemon's cap of %d ([agent] max_turns)",
				a.Line, a.Name, a.MaxTurns, limit)
		}
	}
	return nil
}

// checkRunQuota refuses a new or resumed run of c's tenant once it has
// MaxRuns unfinished. The caller holds startMu.
func (s *Service) checkRunQuota(ctx context.Context, c Caller) error {
	n, err := s.cfg.Store.CountUnfinishedAgentRuns(ctx, c.Tenant)
	if err != nil {
		return err
	}
	if n >= s.cfg.AgentMaxRuns {
		s.metrics.denied("agent_runs")
		return api.Errorf(api.CodeTooMany, "tenant %q has %d agent runs unfinished (the daemon's [agent] max_runs): wait for one to end or cancel one", c.Tenant, n)
	}
	return nil
}

func (s *Service) createAgentRun(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decode[api.CreateAgentRun](in)
	if err != nil {
		return nil, err
	}
	switch {
	case req.Document == "":
		return nil, api.Errorf(api.CodeInvalidArgument, "document is required")
	case req.Agent == "":
		return nil, api.Errorf(api.CodeInvalidArgument, "agent is required")
	case req.Task == "":
		return nil, api.Errorf(api.CodeInvalidArgument, "task is required")
	}
	if err := validLabels(req.Labels); err != nil {
		return nil, err
	}
	if !s.ag.model.configured() {
		return nil, errNoModels
	}
	if err := s.checkDocument(req.Document); err != nil {
		return nil, err
	}
	s.ag.startMu.Lock()
	defer s.ag.startMu.Unlock()
	if err := s.checkRunQuota(ctx, c); err != nil {
		return nil, err
	}
	run, err := s.ag.eng.Start(ctx, agentOwner(c), req.Document, req.Agent, req.Task, req.Labels)
	if err != nil {
		return nil, agentError(err)
	}
	in.rec.ev.Result = mustJSON(map[string]any{"run": run.ID, "agent": run.Agent, "state": run.State})
	return run, nil
}

// agentStates are the states a list may filter by.
var agentStates = []string{api.AgentPending, api.AgentRunning, api.AgentSucceeded, api.AgentFailed, api.AgentCancelled}

func (s *Service) listAgentRuns(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decode[api.ListAgentRuns](in)
	if err != nil {
		return nil, err
	}
	if err := checkListFilter("state", req.State, agentStates, req.Limit); err != nil {
		return nil, err
	}
	runs, err := s.ag.journal.list(ctx, c.Tenant, req.State, req.Limit)
	if err != nil {
		return nil, err
	}
	return &api.AgentRunList{Runs: runs}, nil
}

func (s *Service) getAgentRun(ctx context.Context, c Caller, in *input) (any, error) {
	id, err := decodeRunRef[api.AgentRunRef](in)
	if err != nil {
		return nil, err
	}
	run, err := s.ag.eng.Get(ctx, c.Tenant, id)
	return run, agentError(err)
}

func (s *Service) cancelAgentRun(ctx context.Context, c Caller, in *input) (any, error) {
	id, err := decodeRunRef[api.AgentRunRef](in)
	if err != nil {
		return nil, err
	}
	run, err := s.ag.eng.Cancel(ctx, c.Tenant, id)
	if err != nil {
		return nil, agentError(err)
	}
	in.rec.ev.Result = mustJSON(map[string]string{"state": run.State})
	return run, nil
}

func (s *Service) resumeAgentRun(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decode[api.ResumeAgentRun](in)
	if err != nil {
		return nil, err
	}
	if err := checkRun(req.Run); err != nil {
		return nil, err
	}
	// A missing run (or another tenant's) is 404 first.
	if _, err := s.ag.eng.Get(ctx, c.Tenant, req.Run); err != nil {
		return nil, agentError(err)
	}
	if !s.ag.model.configured() {
		return nil, errNoModels
	}
	s.ag.startMu.Lock()
	defer s.ag.startMu.Unlock()
	// Only an ended run taken up again adds an unfinished run (an
	// unfinished one is the runner's to refuse: conflict).
	cur, err := s.ag.eng.Get(ctx, c.Tenant, req.Run)
	if err != nil {
		return nil, agentError(err)
	}
	if agentEnded(cur.State) {
		if err := s.checkRunQuota(ctx, c); err != nil {
			return nil, err
		}
	}
	run, err := s.ag.eng.Resume(ctx, c.Tenant, req.Run, req.Task)
	if err != nil {
		return nil, agentError(err)
	}
	in.rec.ev.Result = mustJSON(map[string]any{"state": run.State, "resumes": run.Resumes})
	return run, nil
}

func (s *Service) agentRunEvents(ctx context.Context, c Caller, in *input) (any, error) {
	return serveRunEvents[api.AgentEvents](ctx, c, in, "agent.events", s.ag.eng.Get, s.ag.eng.Events,
		agentStreamEvent, agentError)
}

// agentStreamEvent is ev as agent.events streams it.
func agentStreamEvent(ev api.AgentEvent) api.Event {
	return api.Event{Seq: ev.Seq, Type: api.EventAgent, Agent: &ev}
}

// agentAudit is what the audit keeps of an agent request: never the
// document (its system prompts), the task or a resume's message, but
// their size and the document's sha256, which identifies it.
// req is a *api.CreateAgentRun or a *api.ResumeAgentRun.
func agentAudit(req any) any {
	switch r := req.(type) {
	case *api.CreateAgentRun:
		sum := sha256.Sum256([]byte(r.Document))
		out := map[string]any{"document_bytes": len(r.Document), "document_sha256": hex.EncodeToString(sum[:]),
			"agent": auditText(r.Agent), "task_bytes": len(r.Task)}
		if len(r.Labels) > 0 {
			out["labels"] = r.Labels
		}
		return out
	case *api.ResumeAgentRun:
		return map[string]any{"run": r.Run, "task_bytes": len(r.Task)}
	}
	return req
}
