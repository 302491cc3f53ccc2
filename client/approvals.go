package client

import (
	"context"
	"iter"

	"github.com/moat-sandbox/moat/api"
)

// Approvals lists the caller's approvals: pending ones by default,
// req.State to choose another state ("all" for every one), req.Sandbox
// to keep one sandbox's. req.Follow is ignored (see
// [Client.FollowApprovals]).
func (c *Client) Approvals(ctx context.Context, req api.ListApprovals) ([]api.Approval, error) {
	req.Follow = false
	var l api.ApprovalList
	if err := c.call(ctx, api.OpApprovalList, req, &l); err != nil {
		return nil, err
	}
	return l.Approvals, nil
}

// Approval describes one approval.
func (c *Client) Approval(ctx context.Context, id string) (*api.Approval, error) {
	var a api.Approval
	if err := c.call(ctx, api.OpApprovalGet, api.ApprovalRef{ID: id}, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// AnswerApproval allows (req.Scope once or always) or denies a pending
// approval; req.Reason is told to the agent with a denial. Only an
// approver may answer (over HTTP, a token with the role approver; over
// stdio, the client that started the daemon): others get
// permission_denied. An approval that is no longer pending is conflict.
func (c *Client) AnswerApproval(ctx context.Context, req api.AnswerApproval) (*api.Approval, error) {
	var a api.Approval
	if err := c.call(ctx, api.OpApprovalAnswer, req, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// FollowApprovals yields the caller's approvals that match req now (as
// [Client.Approvals] filters them), then every approval of the tenant
// (and of req.Sandbox, if set) as it is created and as it is answered,
// until ctx ends or the consumer stops. A failure ends the sequence with
// a non-nil error (the daemon shutting down, a follower that fell too far
// behind: list again and follow anew).
func (c *Client) FollowApprovals(ctx context.Context, req api.ListApprovals) iter.Seq2[api.Approval, error] {
	req.Follow = true
	return func(yield func(api.Approval, error) bool) {
		for ev, err := range streamOf(ctx, c, api.OpApprovalList, req) {
			if err != nil {
				if ctx.Err() == nil {
					yield(api.Approval{}, err)
				}
				return
			}
			if ev.Type == api.EventApproval && ev.Approval != nil && !yield(*ev.Approval, nil) {
				return
			}
		}
	}
}

// streamOf yields the events of a stream operation; a failure is the
// last pair.
func streamOf(ctx context.Context, c *Client, name string, req any) iter.Seq2[api.Event, error] {
	return func(yield func(api.Event, error) bool) {
		var l api.ApprovalList
		streamEvents(ctx, c, name, req, &l, yield)
	}
}

// IsPolicyDenied reports whether the policy refused the call (code
// policy_denied): a deny rule, or an approval that was denied or expired.
// The [api.Error]'s Message is the reason, Rule and Source the rule.
func IsPolicyDenied(err error) bool { return Code(err) == api.CodePolicyDenied }
