package model

import (
	"context"
	"time"
)

// acquire takes a slot at the best provider of elig not in excluded that
// has one free, waiting (bounded by ctx) while every such provider is at
// its max_concurrency. A provider at its limit never holds up a request
// another eligible provider could take. It returns errNoSlot when every
// provider of elig is excluded.
func (c *Client) acquire(ctx context.Context, elig []*provider, excluded map[*provider]bool) (*provider, error) {
	for {
		c.mu.Lock()
		p, some := c.pick(elig, excluded, time.Now())
		if p != nil {
			p.inFlight++
			p.requests++
			c.mu.Unlock()
			return p, nil
		}
		freed := c.freed
		c.mu.Unlock()
		if !some {
			return nil, errNoSlot
		}
		select {
		case <-freed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// pick returns the best candidate with a free slot, and whether there is
// any candidate at all (full or not). Best is: not cooling down from a
// 429, then the lowest in-flight per weight, then the fewest requests per
// weight (so that sequential requests spread by weight too), then the
// name. c.mu is held.
func (c *Client) pick(elig []*provider, excluded map[*provider]bool, now time.Time) (best *provider, some bool) {
	for _, p := range elig {
		if excluded[p] {
			continue
		}
		some = true
		if p.inFlight >= p.cfg.MaxConcurrency {
			continue
		}
		if best == nil || better(p, best, now) {
			best = p
		}
	}
	return best, some
}

// better says whether a ranks before b (see pick).
func better(a, b *provider, now time.Time) bool {
	ac, bc := a.coolUntil.After(now), b.coolUntil.After(now)
	if ac != bc {
		return !ac
	}
	// a.inFlight/a.weight < b.inFlight/b.weight, without division.
	wa, wb := int64(a.cfg.Weight), int64(b.cfg.Weight)
	if x, y := int64(a.inFlight)*wb, int64(b.inFlight)*wa; x != y {
		return x < y
	}
	if x, y := int64(a.requests)*wb, int64(b.requests)*wa; x != y {
		return x < y
	}
	return a.cfg.Name < b.cfg.Name
}

// release gives p's slot back and counts the attempt's outcome.
func (c *Client) release(p *provider, u Usage, pe *ProviderError, now time.Time) {
	c.mu.Lock()
	p.inFlight--
	p.inputTokens += u.InputTokens
	p.outputTokens += u.OutputTokens
	if pe != nil && pe.Class != ClassCanceled {
		p.errors++
		if pe.Class == ClassRateLimited && pe.RetryAfter > 0 {
			if until := now.Add(min(pe.RetryAfter, c.opts.retry.max)); until.After(p.coolUntil) {
				p.coolUntil = until
			}
		}
	}
	close(c.freed)
	c.freed = make(chan struct{})
	c.mu.Unlock()
}
