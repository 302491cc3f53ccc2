package client

import (
	"context"

	"github.com/moat-sandbox/moat/api"
)

// Templates lists the templates sandboxes can be created from
// ([api.CreateSandbox.Template]): the built-in "host" template first,
// then those imported into the daemon's store (`moat template import`).
func (c *Client) Templates(ctx context.Context) ([]api.Template, error) {
	var l api.TemplateList
	if err := c.call(ctx, api.OpTemplateList, api.ListTemplates{}, &l); err != nil {
		return nil, err
	}
	return l.Templates, nil
}

// TakeSnapshot pauses the sandbox, captures its filesystem (what changed
// since the template, or since the snapshot it started from or was last
// snapshotted to) into an immutable snapshot and resumes it. Processes
// are not captured: a restore or fork starts with none running. A
// sandbox whose workspace is a host directory, or with a writable bind,
// is refused (invalid_argument): the snapshot would miss those files.
// (The cached description of the sandbox is [Sandbox.Snapshot].)
func (s *Sandbox) TakeSnapshot(ctx context.Context) (*api.Snapshot, error) {
	var sn api.Snapshot
	if err := s.c.call(ctx, api.OpSnapshotCreate, api.CreateSnapshot{Sandbox: s.id}, &sn); err != nil {
		return nil, err
	}
	return &sn, nil
}

// Restore rolls the sandbox's filesystem back to the snapshot snapshotID
// (one of the caller's, of any sandbox): the sandbox keeps its id, limits,
// policy and network, every process of it ends, and it starts afresh from
// the snapshot. It returns the sandbox's new description, which also
// becomes the handle's cached one ([Sandbox.Snapshot]).
func (s *Sandbox) Restore(ctx context.Context, snapshotID string) (*api.Sandbox, error) {
	var info api.Sandbox
	if err := s.c.call(ctx, api.OpSandboxRestore, api.RestoreSandbox{Sandbox: s.id, Snapshot: snapshotID}, &info); err != nil {
		return nil, err
	}
	s.snap.Store(&info)
	return &info, nil
}

// Snapshots lists the caller's snapshots.
func (c *Client) Snapshots(ctx context.Context) ([]api.Snapshot, error) {
	var l api.SnapshotList
	if err := c.call(ctx, api.OpSnapshotList, api.ListSnapshots{}, &l); err != nil {
		return nil, err
	}
	return l.Snapshots, nil
}

// GetSnapshot describes one of the caller's snapshots ([IsNotFound] when
// there is no such snapshot, or it is another tenant's).
func (c *Client) GetSnapshot(ctx context.Context, id string) (*api.Snapshot, error) {
	var sn api.Snapshot
	if err := c.call(ctx, api.OpSnapshotGet, api.SnapshotRef{Snapshot: id}, &sn); err != nil {
		return nil, err
	}
	return &sn, nil
}

// DeleteSnapshot deletes one of the caller's snapshots. A snapshot that
// another snapshot is layered on, or that a live sandbox runs from, is
// refused with code conflict.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) error {
	return c.call(ctx, api.OpSnapshotDelete, api.SnapshotRef{Snapshot: id}, nil)
}

// Fork creates count sandboxes (1 to 64; 0 means 1) that start from the
// snapshot snapshotID, each created as opts says (limits, labels,
// timeouts, policy, network…; its Template and Snapshot must be empty).
// It is all or nothing: when one create fails, those made are deleted and
// the error is returned. The handles carry the sandboxes' descriptions
// ([Sandbox.Snapshot]).
func (c *Client) Fork(ctx context.Context, snapshotID string, count int, opts api.CreateSandbox) ([]*Sandbox, error) {
	var l api.SandboxList
	if err := c.call(ctx, api.OpSnapshotFork, api.ForkSnapshot{Snapshot: snapshotID, Count: count, Sandbox: opts}, &l); err != nil {
		return nil, err
	}
	out := make([]*Sandbox, len(l.Sandboxes))
	for i := range l.Sandboxes {
		info := l.Sandboxes[i]
		out[i] = c.Sandbox(info.ID)
		out[i].snap.Store(&info)
	}
	return out, nil
}
