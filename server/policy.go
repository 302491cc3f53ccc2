package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/admit"
	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/policy/compile"
	"github.com/moat-sandbox/moat/sandbox"
)

// The policy of a sandbox.
//
// At its create the daemon loads the policy layers (the managed file, the
// user file of Config.Home, and the project file of a host workspace),
// adds the sandbox's own rules (api.CreateSandbox.Policy, which can only
// narrow) and compiles the result into the sandbox's spec (through
// package admit, which moat run shares): the binds and restrictions the
// kernel enforces stay as compiled for the sandbox's life. Every call the daemon judges itself — process.exec,
// process.start, and the file operations on host paths the sandbox sees —
// re-reads the files first when they changed (a stat of each; an invalid
// edit keeps the last good policy and is logged once), so a reload applies
// to the decisions of running sandboxes at once and to the kernel's view
// at the next create.

// sandboxPolicy is one sandbox's policy.
type sandboxPolicy struct {
	watcher *policy.Watcher
	rules   *policy.File // the sandbox's own rules, or nil
	view    *compile.View
	report  *api.SandboxPolicy

	mu   sync.Mutex
	base *policy.Effective // the watcher's policy eff was made from
	eff  *policy.Effective // base with rules and the network's lists
	// The sandbox's network lists (its create's, or the last
	// sandbox.network's): the caller's allowlist and the deny rules of
	// deny_domains.
	netAllow []string
	netDeny  *policy.File
}

// effective is the sandbox's policy now: the files re-read if they
// changed, with the sandbox's rules and network lists.
func (p *sandboxPolicy) effective(log *slog.Logger, id string) (*policy.Effective, error) {
	cur := p.reload(log, id)
	p.mu.Lock()
	defer p.mu.Unlock()
	if cur != p.base {
		eff, err := p.compose(cur, p.netAllow, p.netDeny)
		if err != nil {
			return nil, err
		}
		p.base, p.eff = cur, eff
	}
	return p.eff, nil
}

// reload re-reads the policy files if they changed and returns the
// watcher's policy.
func (p *sandboxPolicy) reload(log *slog.Logger, id string) *policy.Effective {
	if _, err := p.watcher.Reload(); err != nil {
		// Reload reports an error once per change of the files.
		log.Error("policy file invalid: the sandbox keeps its last good policy", "sandbox", id, "err", err)
	}
	return p.watcher.Current()
}

// compose is base with the sandbox's rules, the deny rules of its
// deny_domains and its allowlist.
func (p *sandboxPolicy) compose(base *policy.Effective, allow []string, deny *policy.File) (*policy.Effective, error) {
	eff, err := admit.Narrow(base, p.rules, deny)
	if err == nil {
		eff, err = eff.WithNetAllow(allow)
	}
	if err != nil {
		return nil, api.Errorf(api.CodeInvalidArgument, "policy: %v", err)
	}
	return eff, nil
}

// current is the policy last made (no reload).
func (p *sandboxPolicy) current() *policy.Effective {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.eff
}

// network returns the sandbox's network lists.
func (p *sandboxPolicy) network() ([]string, *policy.File) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.netAllow, p.netDeny
}

// withNetwork is the sandbox's policy now with other network lists, and
// the watcher's policy it was made from; nothing changes until
// setNetwork.
func (p *sandboxPolicy) withNetwork(log *slog.Logger, id string, allow []string, deny *policy.File) (base, eff *policy.Effective, err error) {
	base = p.reload(log, id)
	eff, err = p.compose(base, allow, deny)
	return base, eff, err
}

// setNetwork installs network lists and the policy withNetwork made of
// them: the next decision (the egress proxy's next connection) uses it.
func (p *sandboxPolicy) setNetwork(base, eff *policy.Effective, allow []string, deny *policy.File) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.base, p.eff, p.netAllow, p.netDeny = base, eff, allow, deny
}

// restoreNetwork puts back network lists after a failed change.
func (p *sandboxPolicy) restoreNetwork(log *slog.Logger, id string, allow []string, deny *policy.File) {
	base, eff, err := p.withNetwork(log, id, allow, deny)
	if err != nil {
		// They composed before; keep the last policy, recomposed at the
		// next reload.
		p.mu.Lock()
		p.base, p.netAllow, p.netDeny = nil, allow, deny
		p.mu.Unlock()
		return
	}
	p.setNetwork(base, eff, allow, deny)
}

// callRules converts the wire form of per-sandbox or per-call rules (package
// api keeps plain structs, apart from the policy engine) to the engine's.
func callRules(c *api.CallRules) policy.CallRules {
	return policy.CallRules{Profile: policy.Profile(c.Profile), Allow: c.Allow, Ask: c.Ask, Deny: c.Deny}
}

// parseRules parses per-sandbox or per-call rules; name is shown in their
// source ("per-call sandbox deny[0]", "per-call exec ask[1]").
func parseRules(c *api.CallRules, name string) (*policy.File, error) {
	if c == nil {
		return nil, nil
	}
	f, err := admit.Rules(callRules(c), name)
	if err != nil {
		return nil, api.Errorf(api.CodeInvalidArgument, "policy: %v", err)
	}
	return f, nil
}

// loadPolicy loads the policy of a sandbox about to be created and
// compiles it into spec. An invalid policy file fails the create: 400 when
// it is the workspace's own (the caller's), 500 when it is the daemon's
// (managed or user file); it never means "no policy".
//
// nr is the create's network: its allow_domains become the policy's
// caller allowlist, its deny_domains deny rules.
func (s *Service) loadPolicy(req *api.CreateSandbox, spec *sandbox.Spec, nr *netReq) (*sandboxPolicy, *sandbox.Spec, error) {
	if err := spec.Validate(); err != nil {
		return nil, nil, err
	}
	rules, err := parseRules(req.Policy, "sandbox")
	if err != nil {
		return nil, nil, err
	}
	layers := admit.Layers{Home: s.cfg.Home, Managed: s.cfg.PolicyManaged, User: s.cfg.PolicyUser}
	ap, err := layers.Load(spec, nil)
	if err != nil {
		var le *admit.LoadError
		if errors.As(err, &le) && le.Project != nil {
			// The caller's own file: its error alone (not the daemon's
			// files').
			return nil, nil, api.Errorf(api.CodeInvalidArgument, "the workspace's policy file is invalid: %v", le.Project)
		}
		if errors.Is(err, policy.ErrInvalid) {
			s.log.Error("the daemon's policy is invalid: every create fails until it is fixed", "err", err)
		}
		return nil, nil, api.Errorf(api.CodeInternal, "the daemon's policy is invalid (no sandbox is created until it is fixed): %v", err)
	}
	w := ap.Watcher
	sp := &sandboxPolicy{watcher: w, rules: rules, netAllow: nr.Allow, netDeny: nr.Rules}
	base := w.Current()
	eff, err := sp.compose(base, nr.Allow, nr.Rules)
	if err != nil {
		return nil, nil, err
	}
	sp.base, sp.eff = base, eff
	out, rep, err := admit.Compile(eff, spec, s.cfg.HidePaths)
	if err != nil {
		var de *compile.DeniedError
		if errors.As(err, &de) {
			return nil, nil, deniedError(de.Decision, de.What+": "+de.Decision.Reason, "")
		}
		return nil, nil, fmt.Errorf("compiling the policy: %w", err)
	}
	report := &api.SandboxPolicy{Profile: string(rep.Profile), Warnings: eff.Warnings(), Unenforced: rep.Unenforced,
		Restrictions: len(rep.Restrict), Created: rep.Created}
	for _, f := range eff.Files() {
		if f.Layer != policy.Call {
			report.Files = append(report.Files, f.Layer.String()+" "+f.Path)
		}
	}
	sp.view, sp.report = compile.NewView(out), report
	return sp, out, nil
}

// deniedError is the policy_denied error of a decision; msg is what the
// agent reads.
func deniedError(d policy.Decision, msg, approval string) *api.Error {
	e := &api.Error{Code: api.CodePolicyDenied, Message: msg, Approval: approval}
	if d.Rule != nil {
		e.Rule, e.Source = d.Rule.String(), d.Rule.Source()
	}
	return e
}

// verdict is one decision of the policy on a call, as its audit event
// keeps it (result.policy).
type verdict struct {
	Request string `json:"request"`
	// Effect is the outcome (allow or deny); Decided the engine's own
	// answer (allow, ask or deny).
	Effect   string `json:"effect"`
	Decided  string `json:"decided"`
	Rule     string `json:"rule"`
	Source   string `json:"source"`
	Reason   string `json:"reason"`
	Approval string `json:"approval,omitempty"`
	// Granted: an earlier allow-always answered this ask.
	Granted bool `json:"granted,omitempty"`
}

// requestText is a request written like a rule, paths as the engine
// judged them (cleaned, symlinks resolved).
func requestText(d policy.Decision) string {
	r := d.Request
	if (r.Kind == policy.Read || r.Kind == policy.Write) && d.Path != "" {
		r.Path = d.Path
	}
	return r.String()
}

// judge decides req for a call of op on sandbox m and returns nil when it
// may go ahead. An ask waits for an approval (st, when the call streams,
// receives approval events); a deny, a refused or expired approval is
// policy_denied. The verdict is appended to vs for the call's audit event.
func (s *Service) judge(ctx context.Context, c Caller, m *managed, vs *[]verdict, op string, req policy.Request, call *policy.File, st *eventSink) error {
	eff, err := m.pol.effective(s.log, m.info.ID)
	if err != nil {
		return err
	}
	d, err := admit.Decide(eff, call, req)
	if err != nil {
		return api.Errorf(api.CodeInvalidArgument, "policy: %v", err)
	}
	s.metrics.decisions.Inc(d.Effect.String())
	v := verdict{Request: auditText(requestText(d)), Decided: d.Effect.String(), Effect: d.Effect.String(), Reason: d.Reason}
	if d.Rule != nil {
		v.Rule, v.Source = d.Rule.String(), d.Rule.Source()
	}
	switch d.Effect {
	case policy.Allow:
		*vs = append(*vs, v)
		return nil
	case policy.Ask:
	default:
		v.Effect = audit.DecisionDeny
		*vs = append(*vs, v)
		return deniedError(d, d.Reason, "")
	}
	info, granted := s.askApproval(ctx, c, m, op, d, v.Request, ruleWithSource(v.Rule, v.Source), st)
	if granted {
		v.Effect, v.Granted = audit.DecisionAllow, true
		*vs = append(*vs, v)
		return nil
	}
	v.Approval = info.ID
	switch info.State {
	case api.ApprovalAllowed:
		v.Effect = audit.DecisionAllow
		*vs = append(*vs, v)
		return nil
	case api.ApprovalWithdrawn:
		v.Effect = audit.DecisionDeny
		*vs = append(*vs, v)
		if err := ctx.Err(); err != nil {
			return err
		}
		return api.Errorf(api.CodeNotRunning, "sandbox %s ended while the call waited for approval %s", m.info.ID, info.ID)
	}
	v.Effect = audit.DecisionDeny
	*vs = append(*vs, v)
	return deniedError(d, approvalRefusal(d, info), info.ID)
}

// askApproval opens an approval for the ask decision d of a call of op on
// sandbox m (text is the request, rule the deciding rule with its source)
// and waits until it is answered or expires, or is withdrawn because ctx
// ended or the sandbox did. granted means an earlier allow-always answered
// it at once (no approval was opened). st, when the call streams, receives
// the approval's events.
func (s *Service) askApproval(ctx context.Context, c Caller, m *managed, op string, d policy.Decision, text, rule string, st *eventSink) (api.Approval, bool) {
	ap, granted := s.approvals.open(c, m, op, d, text)
	if granted {
		return api.Approval{}, true
	}
	s.record(audit.Event{Kind: "approval.request", Tenant: c.Tenant, Actor: c.Actor, Sandbox: m.info.ID, Decision: audit.DecisionAsk,
		Rule: rule, Request: mustJSON(map[string]string{"approval": ap.info.ID, "op": op, "request": text}),
		Result: mustJSON(map[string]any{"reason": d.Reason, "expires_at": ap.info.ExpiresAt})})
	first := ap.view()
	if st != nil {
		st.send(api.Event{Type: api.EventApproval, Approval: &first})
	}
	select {
	case <-ap.done:
	case <-ctx.Done():
		s.approvals.withdraw(ap, "the call was cancelled")
	case <-m.endDone:
		s.approvals.withdraw(ap, "the sandbox ended")
	}
	<-ap.done
	info := ap.view()
	if st != nil {
		st.send(api.Event{Type: api.EventApproval, Approval: &info})
	}
	return info, false
}

// approvalRefusal is what the agent reads when its approval was denied or
// expired.
func approvalRefusal(d policy.Decision, a api.Approval) string {
	reason := "denied: " + strings.TrimPrefix(d.Reason, "needs approval: ")
	if a.State == api.ApprovalExpired {
		return fmt.Sprintf("%s; nobody answered approval %s within %s", reason, a.ID, a.ExpiresAt.Sub(a.CreatedAt).Round(time.Millisecond))
	}
	msg := fmt.Sprintf("%s; approval %s was denied by %s", reason, a.ID, a.AnsweredBy)
	if a.Comment != "" {
		msg += ": " + a.Comment
	}
	return msg
}

func ruleWithSource(rule, source string) string {
	if rule == "" || source == "" {
		return rule
	}
	return rule + " (" + source + ")"
}

// judgePaths decides file operation op on sandbox paths (absolute or
// relative to /workspace): a path the sandbox sees from the host is judged
// as a Read or Write of its host path; one in the sandbox's own storage
// (/tmp, its home) holds nothing of the host and needs no decision.
func (s *Service) judgePaths(ctx context.Context, c Caller, m *managed, vs *[]verdict, op string, write bool, paths ...string) error {
	for _, p := range paths {
		if !path.IsAbs(p) {
			p = path.Join(sandbox.WorkspaceDir, p)
		}
		host, ok := m.pol.view.Host(p)
		if !ok {
			continue
		}
		req := policy.ReadPath(host)
		if write {
			req = policy.WritePath(host)
		}
		if err := s.judge(ctx, c, m, vs, op, req, nil, nil); err != nil {
			return err
		}
	}
	return nil
}

// withVerdicts puts the policy's decisions of a call into its audit
// event: the decision, the deciding rule, and result.policy.
func withVerdicts(ev *audit.Event, vs []verdict) {
	if len(vs) == 0 {
		return
	}
	decider := vs[0]
	for _, v := range vs {
		if v.Effect == audit.DecisionDeny {
			decider = v
			break
		}
		if v.Decided != audit.DecisionAllow && decider.Decided == audit.DecisionAllow {
			decider = v
		}
	}
	ev.Decision, ev.Rule = decider.Effect, ruleWithSource(decider.Rule, decider.Source)
	res := map[string]any{}
	if len(ev.Result) > 0 && !strings.HasPrefix(string(ev.Result), "null") {
		if err := json.Unmarshal(ev.Result, &res); err != nil {
			res = map[string]any{"result": ev.Result}
		}
	}
	res["policy"] = vs
	ev.Result = mustJSON(res)
}

// useJudged is use for a process call (exec or start): it parses the
// call's own rules, takes the sandbox and has the policy decide the argv
// (waiting for an approval if asked). On error nothing is held.
func (s *Service) useJudged(ctx context.Context, c Caller, in *input, req *api.Exec, op string, st *eventSink) (*managed, func(), error) {
	call, err := parseRules(req.Policy, "exec")
	if err != nil {
		return nil, nil, err
	}
	m, done, err := s.use(c, req.Sandbox)
	if err != nil {
		return nil, nil, err
	}
	if err := s.judge(ctx, c, m, &in.verdicts, op, policy.ExecArgv(req.Args...), call, st); err != nil {
		done()
		return nil, nil, err
	}
	return m, done, nil
}
