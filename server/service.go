// Package server is moat's control plane: it keeps long-lived sandboxes
// for many tenants, runs the operations of package api on them and their
// workflow runs (workflows.go: the workflow engine over the same calls),
// records every call in the store and the audit tape, prunes idle and
// expired sandboxes, and serves all of it over HTTP ([Service.Handler])
// and as JSON-RPC 2.0 over a pair of streams ([Service.ServeRPC], `moat
// serve --stdio`).
//
// Every file operation and process runs inside the sandbox through its
// agent (sandbox.Files, sandbox.Sandbox): the daemon never opens a path of
// a sandbox on the host.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moat-sandbox/moat/agent/model"
	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/build"
	"github.com/moat-sandbox/moat/netproxy"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/sandbox"
	"github.com/moat-sandbox/moat/store"
	"github.com/moat-sandbox/moat/templates"
)

// Defaults of a Service.
const (
	DefaultTimeout       = time.Hour
	DefaultIdleTimeout   = 10 * time.Minute
	DefaultMaxTimeout    = 24 * time.Hour
	DefaultMaxSandboxes  = 256
	DefaultMaxPerTenant  = 64
	DefaultMaxFileBytes  = 64 << 20
	DefaultOutputBuffer  = 1 << 20
	DefaultPruneInterval = time.Second
	DefaultPruneBatch    = 8
	DefaultKeepStopped   = 24 * time.Hour
	// DefaultBuildRetention is how long a finished build is kept.
	DefaultBuildRetention = 7 * 24 * time.Hour
	// DefaultSnapshotQuota is a tenant's snapshot store quota: ten
	// snapshots of a sandbox's whole default disk (1 GiB).
	DefaultSnapshotQuota = 10 << 30
	// MaxJSONBody caps a JSON request body.
	MaxJSONBody = 1 << 20
	// maxStdinPending caps stdin written to a process but not yet read.
	maxStdinPending = 1 << 20
)

// Config configures a Service. Runtime, Store and Tape are required.
type Config struct {
	Runtime sandbox.Runtime
	Store   *store.Store
	Tape    *audit.Tape
	Logger  *slog.Logger
	// AllowHostPaths lets callers bind host directories (workspace,
	// binds). A multi-tenant HTTP server leaves it off; stdio mode,
	// where the caller is the local user, turns it on.
	AllowHostPaths bool
	// DefaultTimeout and DefaultIdleTimeout apply to sandboxes created
	// without their own; MaxTimeout caps what a caller may ask.
	DefaultTimeout, DefaultIdleTimeout, MaxTimeout time.Duration
	// MaxSandboxes caps running sandboxes in total; MaxPerTenant per
	// tenant.
	MaxSandboxes, MaxPerTenant int
	// MaxFileBytes caps one file read or write and one archive.
	MaxFileBytes int64
	// OutputBuffer is how much of a background process's output is
	// kept for readers that attach later.
	OutputBuffer int
	// OutputLimit is the default output_limit of an exec (default
	// output.DefaultLimit); MaxOutputLimit the largest a call may ask,
	// per stream (default config.DefaultMaxOutputLimit): above it, 400.
	OutputLimit, MaxOutputLimit int
	// OutputMemory and TenantOutputMemory cap the output held in memory
	// (exec captures in progress, background processes' kept output) by
	// the daemon and by one tenant (defaults config.DefaultMemoryBudget,
	// config.DefaultTenantMemoryBudget). See output.go.
	OutputMemory, TenantOutputMemory int64
	// OutputDir holds output files (spilled and kept captures), one
	// directory per tenant, each within TenantOutputDisk bytes; files
	// are removed OutputRetention after they were written. "" (or a zero
	// quota or retention) keeps no files.
	OutputDir        string
	TenantOutputDisk int64
	OutputRetention  time.Duration
	// PruneInterval and PruneBatch pace the pruning of idle and
	// expired sandboxes; KeepStopped is how long stopped sandboxes stay
	// in the store.
	PruneInterval time.Duration
	PruneBatch    int
	KeepStopped   time.Duration
	// RequestTimeout bounds HTTP requests (default RequestTimeout).
	RequestTimeout time.Duration
	// BodyTimeout and BodyChunk bound how slowly a request body may
	// arrive: its first BodyChunk bytes (or all of it) within BodyTimeout
	// of the headers, and each next BodyChunk within BodyTimeout of the
	// previous one (defaults DefaultBodyTimeout, DefaultBodyChunk).
	BodyTimeout time.Duration
	BodyChunk   int64
	// AuthFailRate and AuthFailBurst are the token bucket of failed
	// authentications per source (IPv4 address or IPv6 /64): over it a
	// request with a bad token is answered 429. AuthAuditInterval is how
	// often each source's failures are written to the audit as one
	// counted auth.denied event; AuthMaxSources bounds the sources
	// tracked. Defaults DefaultAuthFail*, DefaultAuthAuditInterval,
	// DefaultAuthMaxSources.
	AuthFailRate      float64
	AuthFailBurst     int
	AuthAuditInterval time.Duration
	AuthMaxSources    int
	// Layers is the template and snapshot store; nil serves the host
	// template only, without snapshots.
	Layers *templates.Store
	// SnapshotQuota caps what one tenant's snapshots cost in Layers
	// together (allocated bytes, see templates.Snapshot.Cost); default
	// DefaultSnapshotQuota.
	SnapshotQuota int64
	// Pools are the warm pools to keep filled (they need Layers for any
	// template but host).
	Pools []PoolConfig
	// OnPoolReady, if set, is called after a warm pool has gained a
	// ready sandbox (tests).
	OnPoolReady func(template string)
	// OnEnd, if set, is called after a sandbox has ended (tests).
	OnEnd func(id, reason string)

	// Home is what ~ means in policies (default: the daemon's $HOME).
	Home string
	// PolicyManaged and PolicyUser are the policy files of the managed
	// and user layers (default policy.ManagedPath and
	// <Home>/.config/moat/policy.toml). The project layer is the host
	// workspace's .moat/policy.toml.
	PolicyManaged, PolicyUser string
	// ApprovalTimeout is how long a call held by an ask rule waits for an
	// approver before it is denied (default DefaultApprovalTimeout).
	ApprovalTimeout time.Duration
	// HidePaths are host paths no sandbox may see, whatever the policy:
	// the daemon's data directory (tokens, database, audit tape).
	HidePaths []string
	// DNSServer is the "IP:port" the egress proxy resolves names with;
	// "" means the host's resolver.
	DNSServer string

	// Build are the operator's caps of builds: the defaults of what a
	// build.create leaves unset and the most it may ask (zero fields:
	// build.Defaults). BuildRetention is how long a finished build is
	// kept with its log and artifacts (default DefaultBuildRetention).
	Build          build.Limits
	BuildRetention time.Duration

	// ModelsFile is an agents file whose providers section is the daemon's
	// one model client for agent runs (agents.go), made at Start; ""
	// configures none (agent.create answers 501). ModelOptions are added
	// to the client's options (tests: model.WithRetry).
	ModelsFile   string
	ModelOptions []model.Option
	// AgentMaxRuns caps a tenant's unfinished agent runs (default
	// DefaultAgentMaxRuns); AgentMaxTurns the max_turns a run's document
	// may give (default DefaultAgentMaxTurns).
	AgentMaxRuns, AgentMaxTurns int
}

// Caller is who makes a call: the tenant it acts for and the actor (a
// token's name, "stdio").
type Caller struct {
	Tenant string
	Actor  string
	// Approver may answer approvals (a token with the role approver, the
	// stdio peer).
	Approver bool
}

// Service runs the control plane's operations.
type Service struct {
	cfg       Config
	log       *slog.Logger
	metrics   *serverMetrics
	ops       map[string]handler
	approvals *approvals
	out       *outputs        // the output budget and files (output.go)
	proxy     *netproxy.Proxy // the egress proxy of every sandbox in network mode proxy
	authFails *authLimiter    // failed authentications, per source
	pools     *pools          // set by Start
	criuOnce  sync.Once
	criu      string     // snapshots' Processes field
	durable   backlog    // records waiting for the data disk (durable.go)
	activity  activity   // calls in flight, for the pools' refills (idle.go)
	wf        *workflows // the workflow engine and its backend (workflows.go)
	ag        *agents    // the agent runner, its model client and backend (agents.go)
	builds    *builds    // the builds in flight and their directory (builds.go)

	mu        sync.Mutex
	sandboxes map[string]*managed
	// pending counts creates under way, per tenant, for the quotas.
	pending      map[string]int
	pendingTotal int
	closing      bool

	stop     chan struct{}
	pruneEnd chan struct{}
	tasks    sync.WaitGroup
}

// New returns a Service; call Start to reconcile the store and begin
// pruning, and Close to stop it.
func New(cfg Config) (*Service, error) {
	if cfg.Runtime == nil || cfg.Store == nil || cfg.Tape == nil {
		return nil, errors.New("server: Runtime, Store and Tape are required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	defInt := func(d *int, v int) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.DefaultTimeout, DefaultTimeout)
	def(&cfg.DefaultIdleTimeout, DefaultIdleTimeout)
	def(&cfg.MaxTimeout, DefaultMaxTimeout)
	def(&cfg.PruneInterval, DefaultPruneInterval)
	def(&cfg.KeepStopped, DefaultKeepStopped)
	def(&cfg.RequestTimeout, RequestTimeout)
	def(&cfg.BodyTimeout, DefaultBodyTimeout)
	def(&cfg.AuthAuditInterval, DefaultAuthAuditInterval)
	defInt(&cfg.AuthFailBurst, DefaultAuthFailBurst)
	defInt(&cfg.AuthMaxSources, DefaultAuthMaxSources)
	if cfg.AuthFailRate <= 0 {
		cfg.AuthFailRate = DefaultAuthFailRate
	}
	if cfg.BodyChunk <= 0 {
		cfg.BodyChunk = DefaultBodyChunk
	}
	defInt(&cfg.MaxSandboxes, DefaultMaxSandboxes)
	defInt(&cfg.MaxPerTenant, DefaultMaxPerTenant)
	defInt(&cfg.OutputBuffer, DefaultOutputBuffer)
	defInt(&cfg.PruneBatch, DefaultPruneBatch)
	if cfg.MaxFileBytes <= 0 {
		cfg.MaxFileBytes = DefaultMaxFileBytes
	}
	if cfg.SnapshotQuota <= 0 {
		cfg.SnapshotQuota = DefaultSnapshotQuota
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	def(&cfg.ApprovalTimeout, DefaultApprovalTimeout)
	def(&cfg.BuildRetention, DefaultBuildRetention)
	defInt(&cfg.AgentMaxRuns, DefaultAgentMaxRuns)
	defInt(&cfg.AgentMaxTurns, DefaultAgentMaxTurns)
	cfg.Build = cfg.Build.Or(build.Defaults)
	if cfg.Home == "" {
		cfg.Home = defaultHome()
	}
	if !filepath.IsAbs(cfg.Home) {
		return nil, fmt.Errorf("server: home %q is not an absolute path", cfg.Home)
	}
	cfg.Home = filepath.Clean(cfg.Home)
	if cfg.PolicyManaged == "" {
		cfg.PolicyManaged = policy.ManagedPath
	}
	if cfg.PolicyUser == "" {
		cfg.PolicyUser = filepath.Join(cfg.Home, policy.UserPath)
	}
	for _, p := range []string{cfg.PolicyManaged, cfg.PolicyUser} {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("server: policy file %q is not an absolute path", p)
		}
	}
	s := &Service{
		cfg:       cfg,
		log:       cfg.Logger,
		sandboxes: map[string]*managed{},
		pending:   map[string]int{},
		stop:      make(chan struct{}),
		pruneEnd:  make(chan struct{}),
	}
	s.approvals = newApprovals(s, cfg.ApprovalTimeout)
	s.proxy = netproxy.New(netproxy.Config{DNSServer: cfg.DNSServer, Logger: cfg.Logger, Events: s.proxyEvent})
	s.metrics = newMetrics(s)
	s.authFails = newAuthLimiter(cfg, s.record)
	s.ops = s.handlers()
	var err error
	if s.out, err = newOutputs(&s.cfg, s.log); err != nil {
		return nil, err
	}
	if s.wf, err = newWorkflows(s); err != nil {
		return nil, err
	}
	if s.builds, err = newBuilds(s); err != nil {
		return nil, err
	}
	s.ag = newAgents(s)
	return s, nil
}

// Start reconciles what a previous daemon left (sandboxes and calls it
// recorded as running are marked lost: their inits died with it; cgroups
// of dead sandboxes are removed) and starts the pruner.
func (s *Service) Start(ctx context.Context) error {
	now := time.Now()
	lost, err := s.cfg.Store.ReconcileRunning(ctx, now)
	if err != nil {
		return fmt.Errorf("server: reconcile sandboxes: %w", err)
	}
	calls, err := s.cfg.Store.ReconcileCalls(ctx, now)
	if err != nil {
		return fmt.Errorf("server: reconcile calls: %w", err)
	}
	if r, ok := s.cfg.Runtime.(sandbox.Reclaimer); ok {
		n, err := r.Reclaim()
		if err != nil {
			return fmt.Errorf("server: reclaim leftovers: %w", err)
		}
		if n > 0 {
			s.log.Info("reclaimed leftovers of a previous daemon", "cgroups", n)
		}
	}
	for _, l := range lost {
		s.record(audit.Event{Kind: "sandbox.end", Tenant: l.Tenant, Sandbox: l.ID, Actor: "system",
			Result: mustJSON(map[string]string{"reason": api.EndLost})})
	}
	if len(lost) > 0 || calls > 0 {
		s.log.Info("reconciled after restart", "sandboxes_lost", len(lost), "calls_lost", calls)
	}
	s.pools = s.startPools(s.cfg.Pools)
	go s.pruneLoop()
	s.startOutputSweeper()
	// The workflow runs a previous daemon left in flight go on, now that
	// what it left is reconciled (their interrupted steps run again).
	if err := s.wf.recover(ctx); err != nil {
		return fmt.Errorf("server: recover workflow runs: %w", err)
	}
	// The builds a previous daemon left running ended with it
	// (failed/interrupted); their sandboxes were reconciled above.
	if err := s.recoverBuilds(ctx); err != nil {
		return fmt.Errorf("server: recover builds: %w", err)
	}
	// The model client, then the agent runs a previous daemon left in
	// flight go on (a tool call that was under way is answered to its
	// model as interrupted, never run twice).
	if err := s.ag.start(ctx, s); err != nil {
		return fmt.Errorf("server: agent runs: %w", err)
	}
	return nil
}

// Close stops the workflow engine (runs in flight stay unfinished in the
// store, for the next daemon to take up), stops the builds in flight
// (failed/interrupted), ends every sandbox (reason "shutdown") and stops
// the pruner. The store and tape stay open: the caller closes them.
func (s *Service) Close(ctx context.Context) error {
	// First, while sandboxes may still be used and ended: the engine
	// stops its steps itself and keeps their runs unfinished. Idempotent.
	s.wf.close(ctx)
	// The agent runs likewise stop where they are (run.interrupted),
	// unfinished in the store. Idempotent.
	s.ag.close()
	// Then the builds, which delete their sandboxes and record their
	// end. Idempotent.
	s.builds.close(ctx)
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	s.closing = true
	all := make([]*managed, 0, len(s.sandboxes))
	for _, m := range s.sandboxes {
		all = append(all, m)
	}
	s.mu.Unlock()
	s.pools.close()
	close(s.stop)
	<-s.pruneEnd
	var wg sync.WaitGroup
	for _, m := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.end(ctx, m, api.EndShutdown, Caller{Actor: "system"})
		}()
	}
	wg.Wait()
	s.tasks.Wait()
	s.authFails.close()
	s.flushBacklog()
	return nil
}

// Ready reports whether the service takes calls.
func (s *Service) Ready() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return errors.New("shutting down")
	}
	return nil
}

// input is what a transport hands an operation besides the caller.
type input struct {
	// decode fills the operation's request type.
	decode func(v any) error
	// body is the raw request body of a BodyRaw operation.
	body io.Reader
	// out receives the raw answer of a BodyRaw operation.
	out io.Writer
	// emit sends one event of a stream; nil when the transport cannot
	// stream.
	emit func(api.Event) error

	// open starts a stream's answer before its first event (HTTP: the
	// headers of an NDJSON answer); nil when there is nothing to start.
	open func()

	// long is the request's context without the transport's request
	// timeout (HTTP: the operations not in longOps), for a call that
	// becomes long (a create's carried exec); nil: the call's own.
	long context.Context

	// req is the decoded request (for the call's audit record).
	req any
	// rec is the call's audit record, which Service.call writes (see
	// callRecord).
	rec callRecord
	// verdicts are the policy's decisions on the call.
	verdicts []verdict
}

type handler func(ctx context.Context, c Caller, in *input) (any, error)

// errPanicked is the outcome recorded for a call whose handler panicked
// (the panic goes on).
var errPanicked = &api.Error{Code: api.CodeInternal, Message: "the operation failed unexpectedly"}

// call runs operation name for c, accounts for it in the metrics and
// writes its audit record (callRecord): every call leaves one, reads and
// calls refused before they did anything (bad input, not found, busy…)
// included, once the handler has returned, or panicked.
func (s *Service) call(ctx context.Context, c Caller, name string, in *input) (resp any, err error) {
	h, ok := s.ops[name]
	if !ok {
		return nil, api.Errorf(api.CodeNotFound, "no operation %q", name)
	}
	return s.dispatch(ctx, c, name, h, in)
}

// dispatch is call with handler h for operation name: what the daemon
// itself calls on a tenant's behalf with a handler of its own (a workflow
// step's create and exec, workflows_backend.go) is counted, gated and
// recorded as that operation.
func (s *Service) dispatch(ctx context.Context, c Caller, name string, h handler, in *input) (resp any, err error) {
	start := time.Now()
	returned := false
	s.activity.begin()
	defer func() {
		s.activity.end()
		if !returned {
			err = errPanicked
		}
		took := time.Since(start)
		s.metrics.observeCall(name, err, took)
		s.recordCall(c, name, in, err, took)
	}()
	if gated[name] {
		// New work waits for a disk that takes its records (durable.go).
		err = s.writable()
	}
	if err == nil {
		resp, err = h(ctx, c, in)
	}
	returned = true
	return resp, apiError(err)
}

// defaultHome is the daemon's home: $HOME, else its user's home, else "/".
func defaultHome() string {
	if h := os.Getenv("HOME"); h != "" && filepath.IsAbs(h) {
		return h
	}
	if u, err := user.Current(); err == nil && filepath.IsAbs(u.HomeDir) {
		return u.HomeDir
	}
	return "/"
}

// decode reads the operation's request into v.
func decode[T any](in *input) (*T, error) {
	v := new(T)
	if err := in.decode(v); err != nil {
		return nil, err
	}
	in.req = v
	return v, nil
}

// sandboxOf is the sandbox a decoded request names, if any.
func sandboxOf(req any) string {
	if rv := reflect.ValueOf(req); rv.Kind() == reflect.Pointer && rv.Elem().Kind() == reflect.Struct {
		if f := rv.Elem().FieldByName("Sandbox"); f.Kind() == reflect.String {
			return f.String()
		}
	}
	return ""
}

// auditRequest is what the audit keeps of a request: never the values of
// an environment, file contents or stdin data, and not the sandbox id (the
// event has its own field).
func auditRequest(req any) any {
	switch r := req.(type) {
	case *api.Exec:
		return requestSummary(r)
	case *api.WriteFile:
		return map[string]string{"path": r.Path, "mode": r.Mode}
	case *api.Stdin:
		return map[string]any{"process": r.Process, "bytes": len(r.Data) + len(r.DataBase64), "eof": r.EOF}
	case *api.FilePath:
		out := map[string]any{"path": r.Path}
		if r.MaxBytes != 0 {
			out["max_bytes"] = r.MaxBytes
		}
		return out
	case *api.Mkdir:
		return map[string]any{"path": r.Path, "parents": r.Parents, "mode": r.Mode}
	case *api.Remove:
		return map[string]any{"path": r.Path, "recursive": r.Recursive}
	case *api.Move:
		return map[string]string{"from": r.From, "to": r.To}
	case *api.CreateWorkflow, *api.AddWorkflowStep:
		return workflowAudit(r)
	case *api.CreateAgentRun, *api.ResumeAgentRun:
		return agentAudit(r)
	}
	return req
}

// apiError maps the errors of the runtime and the store to API errors.
func apiError(err error) error {
	if err == nil {
		return nil
	}
	var ae *api.Error
	var fe *sandbox.FileError
	var se *sandbox.SetupError
	if res := exhausted(err); res != "" && (!errors.As(err, &ae) || ae.Code == api.CodeInternal) {
		// The daemon (or the agent of a sandbox, for a file operation)
		// ran out of file descriptors: 503, never a 500, wherever it
		// happened (an internal error made of it included).
		return api.Exhausted(res, "out of open files (try again later): %v", err)
	}
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &fe):
		return &api.Error{Code: api.CodeFile, Errno: fe.Code, Message: fe.Error()}
	case errors.Is(err, sandbox.ErrInvalidSpec) && errors.Is(err, sandbox.ErrTooBig):
		return &api.Error{Code: api.CodeTooLarge, Message: err.Error()}
	case errors.Is(err, sandbox.ErrInvalidSpec):
		return &api.Error{Code: api.CodeInvalidArgument, Message: err.Error()}
	case errors.Is(err, sandbox.ErrClosed):
		return &api.Error{Code: api.CodeNotRunning, Message: "the sandbox is not running"}
	case errors.Is(err, sandbox.ErrExited):
		return &api.Error{Code: api.CodeGone, Message: "the process has ended"}
	case errors.Is(err, store.ErrNotFound):
		return &api.Error{Code: api.CodeNotFound, Message: err.Error()}
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		// The data disk (the store, the tape, the snapshot store) is full;
		// the message names the path.
		return &api.Error{Code: api.CodeStorage, Message: err.Error()}
	case errors.Is(err, store.ErrUnavailable), errors.Is(err, audit.ErrBroken):
		return &api.Error{Code: api.CodeUnavailable, Message: err.Error()}
	case errors.As(err, &se):
		return &api.Error{Code: api.CodeSetup, Message: err.Error()}
	case errors.Is(err, context.DeadlineExceeded):
		return &api.Error{Code: api.CodeTimeout, Message: "the request took longer than allowed"}
	case errors.Is(err, context.Canceled):
		return &api.Error{Code: api.CodeTimeout, Message: "the request was cancelled"}
	}
	return &api.Error{Code: api.CodeInternal, Message: err.Error()}
}

// exhausted names the daemon resource an error says is used up:
// api.ResourceOpenFiles for EMFILE (the daemon's RLIMIT_NOFILE, or that
// of a sandbox's agent for a file operation) and ENFILE (the system's
// fs.file-max); "" for anything else. Some libraries (cgroups) keep only
// the errno's message, so the message counts too.
func exhausted(err error) string {
	var fe *sandbox.FileError
	if errors.As(err, &fe) {
		if fe.Code == "EMFILE" || fe.Code == "ENFILE" {
			return api.ResourceOpenFiles
		}
		return ""
	}
	// ENFILE's message, "too many open files in system", contains
	// EMFILE's.
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || strings.Contains(err.Error(), syscall.EMFILE.Error()) {
		return api.ResourceOpenFiles
	}
	return ""
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`null`)
	}
	return b
}
