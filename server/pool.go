package server

import (
	"context"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/sandbox"
)

// PoolConfig is one warm pool: Size sandboxes of Template, made under the
// policy profile Profile, kept created and ready ahead of need.
type PoolConfig struct {
	Template string
	// Profile is "" (the profile the daemon's policy files give) or
	// "untrusted".
	Profile string
	Size    int
}

// pools are the daemon's warm pools. A pooled sandbox is created with no
// tenant, network mode none and the operator's default limits. It is
// handed out only to a create whose compiled spec matches the pool's in
// everything the sandbox's setup fixed (template, the policy's mount
// restrictions, environment, working directory; no workspace, bind or
// hostname), after a health check, with the caller's limits and network
// applied at that moment; the caller's policy is the only one the control
// plane ever consults for it. A pooled sandbox is never handed out twice.
type pools struct {
	s    *Service
	list []*pool
	stop chan struct{}
	wg   sync.WaitGroup
}

// pool is one warm pool.
type pool struct {
	cfg  PoolConfig
	spec *sandbox.Spec // what its sandboxes are made with
	err  error         // why it cannot be filled (bad template or profile)
	wake chan struct{}

	mu    sync.Mutex
	ready []sandbox.Sandbox
}

// startPools builds each pool's spec and starts filling it.
func (s *Service) startPools(cfgs []PoolConfig) *pools {
	ps := &pools{s: s, stop: make(chan struct{})}
	for _, c := range cfgs {
		p := &pool{cfg: c, wake: make(chan struct{}, 1)}
		req := &api.CreateSandbox{Template: c.Template}
		switch c.Profile {
		case "", string(policy.Trusted):
		case string(policy.Untrusted):
			req.Policy = &api.CallRules{Profile: string(policy.Untrusted)}
		default:
			p.err = api.Errorf(api.CodeInvalidArgument, "pool profile %q (want trusted or untrusted)", c.Profile)
		}
		if p.err == nil {
			var b *built
			if b, p.err = s.buildSpec(Caller{Tenant: "pool", Actor: "pool"}, req); p.err == nil {
				p.spec = b.spec
				p.spec.Network = sandbox.Network{Mode: sandbox.NetNone}
			}
		}
		if p.err != nil {
			s.log.Error("warm pool disabled", "template", c.Template, "profile", c.Profile, "err", p.err)
		}
		ps.list = append(ps.list, p)
		if p.err == nil && c.Size > 0 {
			ps.wg.Add(1)
			go ps.fill(p)
		}
	}
	return ps
}

// fill keeps p at its size until the pools stop.
func (ps *pools) fill(p *pool) {
	defer ps.wg.Done()
	backoff := 100 * time.Millisecond
	for {
		p.mu.Lock()
		n := len(p.ready)
		p.mu.Unlock()
		if n < p.cfg.Size {
			// Never inside a claim: the create waits for a quiet daemon
			// (idle.go), so that it does not take the CPUs from the
			// claimer's first calls.
			if !ps.s.activity.waitQuiet(ps.stop, refillMaxDefer) {
				return
			}
			sb, err := ps.s.cfg.Runtime.Create(context.Background(), p.spec)
			if err != nil {
				ps.s.metrics.poolEvents.Inc(p.cfg.Template, "fill_error")
				ps.s.log.Warn("warm pool: create failed", "template", p.cfg.Template, "err", err)
				select {
				case <-ps.stop:
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, 30*time.Second)
				continue
			}
			backoff = 100 * time.Millisecond
			if _, ok := sb.(sandbox.Claimable); !ok {
				// It could never be handed out: no pool for this runtime.
				_ = sb.Shutdown(context.Background())
				ps.s.log.Error("warm pool disabled: the runtime's sandboxes cannot be claimed", "template", p.cfg.Template)
				return
			}
			p.mu.Lock()
			select {
			case <-ps.stop:
				p.mu.Unlock()
				_ = sb.Shutdown(context.Background())
				return
			default:
			}
			p.ready = append(p.ready, sb)
			p.mu.Unlock()
			ps.s.metrics.poolEvents.Inc(p.cfg.Template, "created")
			if f := ps.s.cfg.OnPoolReady; f != nil {
				f(p.cfg.Template)
			}
			continue
		}
		select {
		case <-ps.stop:
			return
		case <-p.wake:
		}
	}
}

// matches reports whether a sandbox made with the pool's spec is exactly
// what b asks for, apart from what a claim applies (limits, network). A
// sandbox that must run inside a budget (a workflow step's) is never a
// pooled one: a claim cannot move it into the budget's cgroup.
func (p *pool) matches(b *built) bool {
	w := b.spec
	return p.err == nil && b.snap == nil && p.cfg.Template == b.tmpl.Name &&
		w.Workspace == "" && len(w.Binds) == 0 && w.Hostname == "" && w.Budget == "" &&
		(b.netMode == sandbox.NetNone || b.netMode == sandbox.NetProxy) &&
		reflect.DeepEqual(w.Root, p.spec.Root) && slices.Equal(w.Env, p.spec.Env) && w.Workdir == p.spec.Workdir &&
		slices.Equal(w.Restrict, p.spec.Restrict)
}

// claim hands out a ready sandbox of a pool matching b, with b's limits
// and network applied, or nil (the caller creates one). Pooled is true
// when it came from a pool.
func (ps *pools) claim(ctx context.Context, b *built) (sb sandbox.Sandbox, pooled bool) {
	if ps == nil {
		return nil, false
	}
	for _, p := range ps.list {
		if !p.matches(b) {
			continue
		}
		for {
			p.mu.Lock()
			if len(p.ready) == 0 {
				p.mu.Unlock()
				ps.s.metrics.poolEvents.Inc(p.cfg.Template, "miss")
				break
			}
			sb = p.ready[0]
			p.ready = p.ready[1:]
			p.mu.Unlock()
			select {
			case p.wake <- struct{}{}:
			default:
			}
			if err := ps.prepare(p, sb, b); err != nil {
				ps.s.metrics.poolEvents.Inc(p.cfg.Template, "unhealthy")
				ps.s.log.Warn("warm pool: a sandbox failed its claim", "template", p.cfg.Template, "sandbox", sb.ID(), "err", err)
				_ = sb.Shutdown(context.Background())
				continue
			}
			ps.s.metrics.poolEvents.Inc(p.cfg.Template, "hit")
			return sb, true
		}
	}
	return nil, false
}

// prepare checks that a pooled sandbox is still alive and applies the
// claimer's limits (when they differ from the pool's, which the sandbox
// was made with) and network.
//
// The health check is free: the sandbox's init has not exited (Done). A
// round trip to its agent (Claimable.Ping) would add a call to every
// claim; an agent that stopped answering fails the claimer's first call
// instead, as it would a moment after any check.
func (ps *pools) prepare(p *pool, sb sandbox.Sandbox, b *built) error {
	c, ok := sb.(sandbox.Claimable)
	if !ok {
		return sandbox.ErrUnsupported
	}
	select {
	case <-sb.Done():
		return sandbox.ErrClosed
	default:
	}
	if b.spec.Limits != p.spec.Limits {
		if err := c.SetLimits(b.spec.Limits); err != nil {
			return err
		}
	}
	if b.netMode == sandbox.NetProxy {
		return c.AttachNetwork(b.spec.Network)
	}
	return nil
}

// ready counts the ready sandboxes of template's pools.
func (ps *pools) ready(template string) int {
	if ps == nil {
		return 0
	}
	n := 0
	for _, p := range ps.list {
		if p.cfg.Template == template {
			p.mu.Lock()
			n += len(p.ready)
			p.mu.Unlock()
		}
	}
	return n
}

// each reports every pool's ready count and size (metrics).
func (ps *pools) each(fn func(p PoolConfig, ready int)) {
	if ps == nil {
		return
	}
	for _, p := range ps.list {
		p.mu.Lock()
		n := len(p.ready)
		p.mu.Unlock()
		fn(p.cfg, n)
	}
}

// close stops filling and shuts the ready sandboxes down.
func (ps *pools) close() {
	if ps == nil {
		return
	}
	close(ps.stop)
	ps.wg.Wait()
	for _, p := range ps.list {
		p.mu.Lock()
		ready := p.ready
		p.ready = nil
		p.mu.Unlock()
		for _, sb := range ready {
			_ = sb.Shutdown(context.Background())
		}
	}
}
