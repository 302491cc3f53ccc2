package client

import (
	"context"

	"github.com/moat-sandbox/moat/api"
)

// callFor makes operation name with req and decodes its answer into a new
// R (a workflow run, an agent run…).
func callFor[R any](ctx context.Context, c *Client, name string, req any) (*R, error) {
	var r R
	if err := c.call(ctx, name, req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// runEvents streams the events of a run (operation name, request req) to
// fn, each taken out of its api.Event by pick (nil: not one of this
// stream's), and returns the run's final state: the stream's answer, or,
// over HTTP, where the stream carries the events only (id of the answer
// is ""), get's. An error fn returns ends the stream and is returned.
func runEvents[E, R any](ctx context.Context, c *Client, name string, req any, pick func(api.Event) *E,
	fn func(E) error, id func(*R) string, get func() (*R, error)) (*R, error) {
	var run R
	var ferr error
	err := c.t.stream(ctx, op(name), req, func(ev api.Event) error {
		if ev.Error != nil {
			return ev.Error
		}
		e := pick(ev)
		if e == nil {
			return nil
		}
		if err := fn(*e); err != nil {
			ferr = err
			return err
		}
		return nil
	}, &run)
	if ferr != nil {
		return nil, ferr
	}
	if err != nil {
		return nil, err
	}
	if id(&run) == "" {
		// The run as it is at the stream's end (after a follow, ended).
		return get()
	}
	return &run, nil
}
