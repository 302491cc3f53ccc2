package sandbox

import (
	"context"
	"errors"
	"os"
)

// RootFS is the root filesystem of a sandbox: an overlayfs whose lower
// layers are read-only host directories and whose upper layer is private to
// the sandbox (a size-capped tmpfs, Limits.DiskBytes, removed with it).
type RootFS struct {
	// Layers are the read-only lower layers, top first: snapshot layers,
	// then, unless Host is set, a template's complete root. Files in them
	// are stored with the sandbox's own ids (0 is the sandbox's root, 1000
	// its user) and appear so through an idmapped mount. The runtime holds
	// a shared flock(2) on each layer directory for the sandbox's life; a
	// store removing a layer takes it exclusively first.
	Layers []string `json:"layers,omitempty"`
	// Host: the host's system directories (/usr, /bin, /lib...) and a
	// filtered /etc are mounted read-only over the layers, as in a
	// sandbox without RootFS (the "host" template).
	Host bool `json:"host,omitempty"`
	// Template names the template in reports.
	Template string `json:"template,omitempty"`
	// User is the template's user, in an OCI image config's form ("" is
	// root; see ResolveImageUser), resolved against the template layer's
	// /etc/passwd and /etc/group. Processes still run as the sandbox user
	// (uid 1000): the template layer is idmapped so that what this user
	// owns there appears owned by the sandbox user (and what uid 1000 owns
	// there by the template's user), so the command can write what the
	// image's user could, its writes landing in the private upper layer.
	// Ignored with Host.
	User string `json:"user,omitempty"`
}

// Capturer is a sandbox whose filesystem changes can be captured (package
// rootfs turns them into snapshots).
type Capturer interface {
	// Capture pauses every process of the sandbox (the cgroup freezer),
	// calls fn with the sandbox's upper layer, an open directory in
	// overlayfs' format (whiteouts, opaque directories), and resumes the
	// processes when fn returns. Owners in upper are host ids; idBase is
	// the host id of the sandbox's uid 0. fn must not keep upper.
	Capture(ctx context.Context, fn func(upper *os.File, idBase uint32) error) error
}

// Claimable is a sandbox created ahead of need (a warm pool's) that a
// caller's settings can be applied to at the moment it is handed out.
type Claimable interface {
	// SetLimits replaces the sandbox's limits (cgroup and upper-layer
	// size). Zero fields take the runtime's defaults, as at create.
	SetLimits(l Limits) error
	// AttachNetwork gives a sandbox created with network mode none the
	// mode proxy, served by n.Egress; other changes are refused
	// (ErrInvalidSpec).
	AttachNetwork(n Network) error
	// Ping checks that the sandbox's agent answers.
	Ping(ctx context.Context) error
}

// ErrNoFreezer: the host has no cgroup freezer, so a sandbox cannot be
// paused for a consistent capture.
var ErrNoFreezer = errors.New("no cgroup freezer on this host: a sandbox cannot be paused for a snapshot")
