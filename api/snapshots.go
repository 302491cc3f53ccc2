package api

import (
	"time"

	"github.com/moat-sandbox/moat/sandbox"
)

// Template is a root filesystem sandboxes can be created from (template.list).
type Template struct {
	Name string `json:"name"`
	// Source is "host" (the host's system directories, read-only),
	// "dir:PATH" or "oci:PATH[@REF]".
	Source  string    `json:"source"`
	Created time.Time `json:"created,omitempty"`
	// Layer is the digest of the template's root layer ("" for host).
	Layer string `json:"layer,omitempty"`
	// Env, Workdir and Limits are the defaults of its sandboxes.
	Env     []string       `json:"env,omitempty"`
	Workdir string         `json:"workdir,omitempty"`
	Limits  sandbox.Limits `json:"limits"`
	// ImageUser is the template's user (an OCI image's User, or the
	// import's --user; "" is root). Processes run as the sandbox user
	// (uid 1000), which owns in the sandbox what this user owns in the
	// template, so they can write where it could (into the sandbox's
	// private upper layer).
	ImageUser string `json:"image_user,omitempty"`
	Bytes     int64  `json:"bytes"`
	Entries   int    `json:"entries"`
	// Pool is the number of ready sandboxes in this template's warm
	// pools.
	Pool int `json:"pool"`
}

// ListTemplates is the (empty) request of template.list.
type ListTemplates struct{}

// TemplateList is the answer of template.list.
type TemplateList struct {
	Templates []Template `json:"templates"`
}

// Snapshot is an immutable capture of a sandbox's filesystem.
type Snapshot struct {
	ID string `json:"id"`
	// Parent is the snapshot this one is layered on ("" when it is
	// layered directly on its template).
	Parent   string    `json:"parent,omitempty"`
	Template string    `json:"template"`
	Sandbox  string    `json:"sandbox,omitempty"`
	Created  time.Time `json:"created"`
	// Bytes, Entries and Whiteouts describe the snapshot's own layer
	// (what changed since its parent; Bytes is the apparent size of its
	// files, holes of sparse files included); DiskBytes is what the layer
	// costs in the store (sparse files keep their holes), counted against
	// the tenant's store quota. Depth counts the snapshot layers of its
	// chain.
	Bytes     int64 `json:"bytes"`
	DiskBytes int64 `json:"disk_bytes"`
	Entries   int   `json:"entries"`
	Whiteouts int   `json:"whiteouts"`
	Depth     int   `json:"depth"`
	// Processes says whether the processes were checkpointed too:
	// always "not captured: <why>" here; a restore or fork starts with
	// no process running.
	Processes string `json:"processes"`
	// PausedMs is how long the sandbox was paused for this snapshot
	// (snapshot.create only).
	PausedMs int64 `json:"paused_ms,omitempty"`
}

// CreateSnapshot is the request of snapshot.create.
type CreateSnapshot struct {
	Sandbox string `json:"sandbox"`
}

// SnapshotRef names a snapshot (snapshot.get, snapshot.delete).
type SnapshotRef struct {
	Snapshot string `json:"snapshot"`
}

// ListSnapshots is the (empty) request of snapshot.list.
type ListSnapshots struct{}

// SnapshotList is the answer of snapshot.list.
type SnapshotList struct {
	Snapshots []Snapshot `json:"snapshots"`
	// StoreBytes is what the caller's snapshots cost in the store
	// together (their disk_bytes); StoreQuota is the tenant's snapshot
	// store quota (0 without a template store).
	StoreBytes int64 `json:"store_bytes"`
	StoreQuota int64 `json:"store_quota"`
}

// RestoreSandbox is the request of sandbox.restore.
type RestoreSandbox struct {
	Sandbox  string `json:"sandbox"`
	Snapshot string `json:"snapshot"`
}

// ForkSnapshot is the request of snapshot.fork: Count new sandboxes
// started from the snapshot, each created as Sandbox says (its Template
// and Snapshot fields must be empty).
type ForkSnapshot struct {
	Snapshot string        `json:"snapshot"`
	Count    int           `json:"count,omitempty"`
	Sandbox  CreateSandbox `json:"sandbox"`
}
