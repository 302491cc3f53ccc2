package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Complete asks a provider for req's answer.
//
// Only providers serving req.Alias (their model or an alias) and carrying
// every tag of req.Tags are eligible; none gives an error wrapping
// ErrNoProvider (and an Attempt of class ClassNoProvider), nothing sent.
// Among the eligible, the one with the lowest in-flight count per weight
// is called, within its max_concurrency (waiting for a slot, bounded by
// ctx, only while every eligible provider is full). A retryable failure
// (429, 5xx, timeout, connection, protocol) fails over to the next
// eligible provider; once each has failed, the client backs off and tries
// again, up to the attempts of WithRetry. Any other 4xx fails at once. A
// failed attempt's error is a *ProviderError (errors.As); the caller's
// context ending returns its error.
//
// With req.OnText set the call streams and OnText gets the text as it
// comes; once text was given, a broken stream is not retried (OnText
// would see it twice).
func (c *Client) Complete(ctx context.Context, req Request) (*Response, error) {
	if err := req.validate(); err != nil {
		return nil, fmt.Errorf("model: %w: %v", ErrInvalidRequest, err)
	}
	req.Tags = slices.Clone(req.Tags)
	elig := c.eligible(&req)
	if len(elig) == 0 {
		err := fmt.Errorf("model: alias %q with tags %q: %w", req.Alias, req.Tags, ErrNoProvider)
		c.observe(req, Attempt{Alias: req.Alias, Tags: req.Tags, Stream: req.OnText != nil, Class: ClassNoProvider, Err: err})
		return nil, err
	}

	var onText func(string)
	emitted := false
	if req.OnText != nil {
		onText = func(s string) {
			if s != "" {
				emitted = true
				req.OnText(s)
			}
		}
	}
	r := c.opts.retry
	excluded := map[*provider]bool{}
	round := 0
	var asked time.Duration // the longest Retry-After of this round
	var last *ProviderError
	for n := 1; n <= r.attempts; n++ {
		queued := time.Now()
		p, err := c.acquire(ctx, elig, excluded)
		if errors.Is(err, errNoSlot) {
			// Each eligible provider failed: wait, then all again.
			wait := r.backoff(round, asked)
			c.opts.logger.Debug("model: backing off", "alias", req.Alias, "round", round, "wait", wait)
			if err := sleep(ctx, wait); err != nil {
				return nil, fmt.Errorf("model: alias %q: %w (after %v)", req.Alias, err, last)
			}
			round++
			asked = 0
			clear(excluded)
			queued = time.Now()
			p, err = c.acquire(ctx, elig, excluded)
		}
		if err != nil {
			return nil, fmt.Errorf("model: alias %q: waiting for a provider: %w", req.Alias, err)
		}
		start := time.Now()
		resp, pe := c.call(ctx, p, &req, onText)
		end := time.Now()
		var usage Usage
		if resp != nil {
			usage = resp.Usage
		}
		c.release(p, usage, pe, end)
		a := Attempt{
			Provider: p.cfg.Name, Kind: p.cfg.Kind, Model: p.cfg.Model,
			Alias: req.Alias, Tags: req.Tags, N: n, Stream: onText != nil,
			Usage: usage, Queued: start.Sub(queued), Latency: end.Sub(start),
		}
		if pe != nil {
			a.Status, a.Class, a.Retryable, a.Err = pe.Status, pe.Class, pe.Retryable, pe
		}
		c.observe(req, a)
		if pe == nil {
			return resp, nil
		}
		if pe.Class == ClassCanceled {
			return nil, fmt.Errorf("model: alias %q: %w", req.Alias, ctx.Err())
		}
		if !pe.Retryable {
			return nil, fmt.Errorf("model: alias %q: %w", req.Alias, pe)
		}
		if emitted {
			return nil, fmt.Errorf("model: alias %q: stream broken after its text began (not retried): %w", req.Alias, pe)
		}
		c.opts.logger.Warn("model: attempt failed, retrying", "provider", p.cfg.Name, "alias", req.Alias,
			"attempt", n, "status", pe.Status, "class", string(pe.Class))
		excluded[p] = true
		asked = max(asked, pe.RetryAfter)
		last = pe
	}
	return nil, fmt.Errorf("model: alias %q: giving up after %d attempts: %w", req.Alias, r.attempts, last)
}

// call makes one attempt at p, bounded by the attempt timeout.
func (c *Client) call(ctx context.Context, p *provider, req *Request, onText func(string)) (*Response, *ProviderError) {
	actx, cancel := ctx, context.CancelFunc(func() {})
	if c.opts.timeout > 0 {
		actx, cancel = context.WithTimeout(ctx, c.opts.timeout)
	}
	defer cancel()
	resp, err := p.be.complete(actx, req, onText)
	if err != nil {
		return nil, classify(err, ctx, actx, p.cfg.Name, p.key, time.Now())
	}
	resp.Provider = p.cfg.Name
	resp.Model = p.cfg.Model
	return resp, nil
}

// observe reports attempt a of req to the client's observer and to the
// request's own OnAttempt.
func (c *Client) observe(req Request, a Attempt) {
	if c.opts.observer != nil {
		c.opts.observer(a)
	}
	if req.OnAttempt != nil {
		req.OnAttempt(a)
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// validate checks what both kinds need of a request before anything is
// sent.
func (r *Request) validate() error {
	names := map[string]bool{}
	for _, t := range r.Tools {
		if t.Name == "" {
			return errors.New("a tool without a name")
		}
		if names[t.Name] {
			return fmt.Errorf("tool %q offered twice", t.Name)
		}
		names[t.Name] = true
		if len(t.Parameters) > 0 {
			if _, err := schemaObject(t.Parameters); err != nil {
				return fmt.Errorf("tool %q: %v", t.Name, err)
			}
		}
	}
	for i, m := range r.Messages {
		switch m.Role {
		case RoleSystem, RoleUser:
		case RoleAssistant:
			for _, tc := range m.ToolCalls {
				if tc.ID == "" || tc.Name == "" {
					return fmt.Errorf("messages[%d]: a tool call without an id or a name", i)
				}
				if len(tc.Arguments) > 0 && !json.Valid(tc.Arguments) {
					return fmt.Errorf("messages[%d]: tool call %q: arguments are not JSON", i, tc.ID)
				}
			}
		case RoleTool:
			if m.ToolCallID == "" {
				return fmt.Errorf("messages[%d]: a tool result without tool_call_id", i)
			}
		default:
			return fmt.Errorf("messages[%d]: unknown role %q", i, m.Role)
		}
	}
	if r.MaxTokens < 0 {
		return fmt.Errorf("max_tokens %d", r.MaxTokens)
	}
	return nil
}

// schemaObject decodes a tool's JSON schema, which must be an object.
func schemaObject(raw json.RawMessage) (map[string]any, error) {
	if len(raw) == 0 {
		return map[string]any{"type": "object", "properties": map[string]any{}}, nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, errors.New("parameters: not a JSON object")
	}
	return m, nil
}

// arguments returns a tool call's arguments as sent back to a provider:
// "{}" when empty.
func arguments(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("{}")
	}
	return raw
}

// rawArguments turns the arguments text a model produced into JSON: kept
// when valid, else a JSON string of the text (so the runner's strict
// check reports it to the model, and the message still marshals).
func rawArguments(s string) json.RawMessage {
	if s == "" {
		return json.RawMessage("{}")
	}
	if json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	b, _ := json.Marshal(s)
	return b
}
