package client

import (
	"context"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
)

// CreateSandboxExec creates a sandbox and runs exec as its first call, in
// one request (api.CreateSandbox.Exec): the daemon may queue the process
// behind the sandbox's setup, which is faster than CreateSandbox followed
// by [Sandbox.Exec]. exec.Sandbox must be empty and exec.Stream is
// ignored. The exec is judged and recorded as a separate call would be.
//
// A failed create returns only the error. Once the sandbox exists it is
// returned, with the process's result, or with the error that refused or
// failed the exec (an *api.Error; the sandbox still runs: delete it when
// it is no longer needed).
func (c *Client) CreateSandboxExec(ctx context.Context, req api.CreateSandbox, exec api.Exec) (*Sandbox, *sandbox.Result, error) {
	exec.Stream = false
	req.Exec = &exec
	var info api.Sandbox
	if err := c.call(ctx, api.OpSandboxCreate, req, &info); err != nil {
		return nil, nil, err
	}
	s := c.Sandbox(info.ID)
	s.snap.Store(&info)
	switch o := info.Exec; {
	case o == nil:
		return s, nil, &api.Error{Code: api.CodeInternal, Message: "the daemon created sandbox " + info.ID + " but answered nothing of its exec (does it predate the exec field?)"}
	case o.Error != nil:
		return s, nil, o.Error
	case o.Result == nil:
		return s, nil, &api.Error{Code: api.CodeInternal, Message: "the daemon answered no result for the exec of sandbox " + info.ID}
	}
	return s, info.Exec.Result, nil
}
