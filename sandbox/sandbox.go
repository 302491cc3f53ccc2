// Package sandbox holds the platform-neutral vocabulary of moat: what a
// sandbox is asked to be (Spec), what a process inside it is asked to run
// (Process), how a call ended (Result), the exit codes every runtime shares,
// and the Runtime interface that the Linux namespace runtime (and later the
// microVM runtime) implement.
package sandbox

import (
	"context"
	"io"
	"os"
	"syscall"
	"time"
)

// Spec describes one sandbox: its filesystem view and its isolation. A Spec
// is validated by the runtime before anything is created on the host.
type Spec struct {
	// Workspace is a host directory bound read-write at /workspace. Empty
	// means a fresh in-memory workspace that disappears with the sandbox.
	Workspace string `json:"workspace,omitempty"`
	// Binds are extra host paths made visible inside the sandbox.
	Binds []Bind `json:"binds,omitempty"`
	// Hostname inside the sandbox; default "sandbox".
	Hostname string `json:"hostname,omitempty"`
	// Limits on the resources of the whole sandbox.
	Limits Limits `json:"limits"`
	// Restrict narrows paths of the sandbox's view once the workspace and
	// binds are in place: the policy's deny-read and read-only lists,
	// compiled by package policy/compile. Applied parents first, before any
	// process of the sandbox runs; the outcome is reported in
	// Enforcement.Restricted and Enforcement.RestrictSkipped.
	Restrict []Restriction `json:"restrict,omitempty"`
	// Network is none (loopback only, the default), proxy (the egress
	// proxy is the only way out) or open.
	Network Network `json:"network"`
	// Env is added to the default environment of every process (a
	// template's defaults); a process's own Env wins. KEY=VALUE.
	Env []string `json:"env,omitempty"`
	// Workdir is the default working directory of processes; default
	// /workspace.
	Workdir string `json:"workdir,omitempty"`
	// Root is the root filesystem; nil means the host template with no
	// layers of its own (still an overlay with a private upper layer).
	Root *RootFS `json:"root,omitempty"`
	// Budget is the id of a live budget of the runtime (Budgeter) that
	// the sandbox runs inside; "" for none.
	Budget string `json:"budget,omitempty"`
}

// RestrictMode says how a Restriction narrows its path.
type RestrictMode string

const (
	// Hide makes the path unreadable: an empty directory or file that the
	// sandbox user cannot open (mode 000, owned by the sandbox's root) is
	// mounted over it, read-only. Reading or listing it fails (EACCES)
	// rather than looking empty; like every restricted entry it cannot
	// be renamed, removed or replaced.
	Hide RestrictMode = "hide"
	// ReadOnly binds the path onto itself read-only (recursively): its
	// content cannot be changed and, as a mount point, the entry cannot be
	// renamed, removed or replaced.
	ReadOnly RestrictMode = "read-only"
	// Pin binds the path onto itself keeping its writability: the entry
	// cannot be renamed, removed or replaced (a mount point is busy), what
	// is below it stays as writable as before. It keeps a protected child
	// (a submodule's read-only directory) from being moved away with its
	// parent.
	Pin RestrictMode = "pin"
)

// Restriction narrows one path of the sandbox's view.
type Restriction struct {
	// Path is the absolute, clean path inside the sandbox; "/" and
	// paths under /proc or /dev are refused (ErrInvalidSpec), as is a path
	// given twice. No component may be a symlink when the sandbox is set
	// up (the setup fails rather than follow one); a path that does not
	// exist then is skipped (nothing can be mounted on it) and reported.
	// The restricted entry becomes a mount point; its parent does not,
	// so renaming the parent moves the entry along unless the parent is
	// pinned too.
	Path string       `json:"path"`
	Mode RestrictMode `json:"mode"`
}

// Bind makes a host path visible inside the sandbox.
type Bind struct {
	// Source is the host path. It must exist and must not be a symlink.
	Source string `json:"source"`
	// Target is the absolute path inside the sandbox. Default: Source.
	Target string `json:"target"`
	// Writable makes the bind read-write; otherwise it is read-only.
	Writable bool `json:"writable,omitempty"`
}

// Limits are resource limits of a whole sandbox, enforced by the kernel
// (cgroups and tmpfs sizes). Zero values take the runtime's defaults.
type Limits struct {
	// MemoryBytes caps the sandbox's memory (RSS, page cache and tmpfs
	// pages); swap is off for the sandbox. Past it the kernel's OOM killer
	// ends a process (exit_reason "oom").
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	// CPUs is a CFS quota in CPUs (0.5 = half of one CPU per period).
	CPUs float64 `json:"cpus,omitempty"`
	// Pids caps the number of processes and threads.
	Pids int64 `json:"pids,omitempty"`
	// DiskBytes caps what the sandbox can write to its ephemeral storage
	// together: /tmp, the home directory, /dev/shm and an in-memory
	// workspace share one tmpfs of this size.
	DiskBytes int64 `json:"disk_bytes,omitempty"`
	// CPUWeight is the sandbox's share of CPU time against its siblings
	// when CPU is contended (1-10000, cgroup v2 cpu.weight units; v1
	// cpu.shares are derived from it); 0 is the default weight (100).
	CPUWeight int `json:"cpu_weight,omitempty"`
}

// Or returns l with each zero field taken from def (a template's or an
// operator's defaults).
func (l Limits) Or(def Limits) Limits {
	if l.MemoryBytes == 0 {
		l.MemoryBytes = def.MemoryBytes
	}
	if l.CPUs == 0 {
		l.CPUs = def.CPUs
	}
	if l.Pids == 0 {
		l.Pids = def.Pids
	}
	if l.DiskBytes == 0 {
		l.DiskBytes = def.DiskBytes
	}
	if l.CPUWeight == 0 {
		l.CPUWeight = def.CPUWeight
	}
	return l
}

// Secret is a value handed to a process without passing through its
// environment, argv or any disk: it appears inside as a sealed in-memory
// file whose path is in the environment variable Name+"_FILE", and its
// value is redacted from captured output.
type Secret struct {
	Name  string `json:"name"`
	Value []byte `json:"-"`
}

// Process describes one command to run inside a sandbox.
type Process struct {
	// Args is the argv; Args[0] is looked up in the sandbox's PATH when it
	// has no slash.
	Args []string `json:"args"`
	// Env is added on top of the sandbox's default environment, KEY=VALUE.
	Env []string `json:"env,omitempty"`
	// Cwd is the working directory inside the sandbox; default /workspace.
	Cwd string `json:"cwd,omitempty"`
	// TTY gives the process a new pseudo-terminal inside the sandbox.
	TTY bool `json:"tty,omitempty"`
	// Timeout ends the process after this long: SIGTERM to its process
	// group, SIGKILL to the sandbox's processes after the runtime's kill
	// grace; exit 124. A deadline on the call's context works the same.
	Timeout time.Duration `json:"timeout,omitempty"`

	// OutputLimit caps each captured stream (default 2,000,000 bytes).
	OutputLimit int `json:"output_limit,omitempty"`
	// SpillDir, if set, receives the whole of a captured stream that
	// went past OutputLimit, as a file the Result names.
	SpillDir string `json:"spill_dir,omitempty"`
	// Secrets are handed to the process as sealed in-memory files.
	Secrets []Secret `json:"-"`

	// Stdin, Stdout and Stderr are the host-side ends of the process's
	// standard streams. Nil Stdin means /dev/null; a nil Stdout or Stderr
	// is captured into the Result (capped by OutputLimit). The sandbox
	// never receives these descriptors themselves: the runtime copies
	// through pipes (or a pty) it creates.
	Stdin  io.Reader `json:"-"`
	Stdout io.Writer `json:"-"`
	Stderr io.Writer `json:"-"`
	// Resize delivers terminal size changes (TTY only); may be nil.
	Resize <-chan WinSize `json:"-"`
	// InitialSize is the terminal size at start (TTY only).
	InitialSize *WinSize `json:"-"`
	// Signals are forwarded to the process's group while it runs.
	Signals <-chan os.Signal `json:"-"`
}

// WinSize is a terminal size in characters.
type WinSize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// Proc is a process started in the background.
type Proc interface {
	// ID names the process within its sandbox.
	ID() uint64
	// Signal delivers sig to the process's group; ErrExited once it
	// has ended.
	Signal(sig syscall.Signal) error
	// Wait waits for the process to end and its output to drain.
	Wait(ctx context.Context) (*Result, error)
}

// Runtime creates sandboxes. Implementations: runtime/linux.
type Runtime interface {
	// Create builds a sandbox and returns when it is ready to run
	// processes. On error nothing of the sandbox is left on the host.
	Create(ctx context.Context, spec *Spec) (Sandbox, error)
	// Run is the one-shot path: create a sandbox, run one process in it to
	// completion and tear it down. Runtimes may make it faster than
	// Create+Exec+Shutdown by pipelining setup and start.
	Run(ctx context.Context, spec *Spec, proc *Process) (*Result, error)
	// Enforcement reports what this runtime can enforce on this host.
	Enforcement() Enforcement
}

// Sandbox is a live sandbox that may run many processes over its life.
type Sandbox interface {
	// ID names the sandbox on this host.
	ID() string
	// Exec runs one process to completion and returns its result. An error
	// means the process could not be run at all (the result then says
	// why, with ExitReason SetupError where it applies). Cancelling ctx
	// kills the process (ExitReason Killed; Timeout for a deadline).
	Exec(ctx context.Context, proc *Process) (*Result, error)
	// Files gives file operations performed inside the sandbox.
	Files() Files
	// Start runs a process in the background and returns once it runs
	// (or has failed to start: its Wait says why). ctx bounds the start
	// only; proc.Timeout bounds the process.
	Start(ctx context.Context, proc *Process) (Proc, error)
	// Shutdown kills every process of the sandbox and removes everything
	// it created on the host. It is safe to call more than once.
	Shutdown(ctx context.Context) error
	// Done is closed once the sandbox's init has ended, whether by
	// Shutdown or on its own (a crash, the kernel's OOM killer); a
	// control plane watches it to mark the sandbox stopped.
	Done() <-chan struct{}
}
