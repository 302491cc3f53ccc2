// Package guest is moat's in-sandbox agent: the process that runs as pid 1
// inside every sandbox, starts the sandbox's processes, relays their output
// streams and exit status, and its wire protocol with the host.
//
// Host and agent talk over one SOCK_SEQPACKET socket pair: each packet is
// one JSON Message, and file descriptors (stdio pipes, detached mount trees,
// a pty master) travel beside it as SCM_RIGHTS ancillary data. The host
// never parses anything the sandbox's processes write to this socket: only
// the agent holds it, and the agent's descriptors are never inherited.
package guest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// MsgType names a protocol message.
type MsgType string

// Messages from host to agent.
const (
	// MsgSetup builds the sandbox root. FDs: one detached mount tree per
	// Setup.Mounts entry, in order.
	MsgSetup MsgType = "setup"
	// MsgExec starts a process. FDs: stdin, stdout, stderr (none when TTY).
	MsgExec MsgType = "exec"
	// MsgSignal delivers a signal to a process's group.
	MsgSignal MsgType = "signal"
	// MsgFile asks for one file operation. FDs: one pipe end for the
	// operations that stream (read, write, tar_in, tar_out).
	MsgFile MsgType = "file"
)

// Messages from agent to host.
const (
	// MsgReady says the root is built and hardened; Restrict reports the
	// setup's restrictions when it had any.
	MsgReady MsgType = "ready"
	// MsgStarted says a process runs. FDs: the pty master when TTY.
	MsgStarted MsgType = "started"
	// MsgExit carries a process's exit status.
	MsgExit MsgType = "exit"
	// MsgError reports a failure: of setup (ID 0) or of one exec.
	MsgError MsgType = "error"
	// MsgFileDone ends a file operation, with a result or an error.
	MsgFileDone MsgType = "file_done"
)

// Message is one protocol packet.
type Message struct {
	Type   MsgType     `json:"type"`
	ID     uint64      `json:"id,omitempty"`
	Setup  *Setup      `json:"setup,omitempty"`
	Exec   *Exec       `json:"exec,omitempty"`
	Signal int         `json:"signal,omitempty"`
	Exit   *Exit       `json:"exit,omitempty"`
	Error  *ErrInfo    `json:"error,omitempty"`
	File   *FileOp     `json:"file,omitempty"`
	Result *FileResult `json:"result,omitempty"`
	// Phases (MsgReady) are the init's setup steps as wall-clock
	// microseconds since the Unix epoch, for start-up profiling.
	Phases []Phase `json:"phases,omitempty"`
	// Restrict (MsgReady) says how Setup.Restrict was applied.
	Restrict *RestrictReport `json:"restrict,omitempty"`
}

// RestrictReport is the outcome of a setup's restrictions.
type RestrictReport struct {
	// Applied counts the restrictions in force: mounted, or covered by a
	// hidden parent.
	Applied int `json:"applied"`
	// Skipped lists the paths that did not exist at setup, in the order
	// they were applied.
	Skipped []string `json:"skipped,omitempty"`
}

// Phase is one timed step of sandbox setup.
type Phase struct {
	Name string `json:"name"`
	At   int64  `json:"at_us"`
}

// Setup tells the agent how to build the sandbox's root filesystem.
type Setup struct {
	Hostname string `json:"hostname"`
	// DiskBytes is the size of the scratch tmpfs (the host made it) that
	// holds the root's upper layer and /dev/shm.
	DiskBytes int64 `json:"disk_bytes"`
	// UID and GID of the sandbox user (inside the user namespace).
	UID int `json:"uid"`
	GID int `json:"gid"`
	// Mounts are host trees handed over as detached mounts (FDs, in order).
	Mounts []Mount `json:"mounts,omitempty"`
	// CgroupJoinFDs is the number of descriptors after the mount trees:
	// cgroup v1 "tasks" files the init's main thread writes "0" to, to
	// move itself into the sandbox's cgroup.
	CgroupJoinFDs int `json:"cgroup_join_fds,omitempty"`
	// CallCgroups: the last cgroup join descriptor (the pids hierarchy's
	// "tasks") is kept by the agent, which moves its forking thread back
	// there after starting each process in the cgroup of its call
	// (Exec.CallCgroup).
	CallCgroups bool `json:"call_cgroups,omitempty"`
	// MemoryWorkspace: /workspace is the root overlay's own directory
	// (owned by the sandbox user) rather than a host tree.
	MemoryWorkspace bool `json:"memory_workspace,omitempty"`
	// Layers is the number of descriptors after the mount trees: the
	// root overlay's lower layers, top first, each a detached idmapped
	// read-only mount. The one after them is the scratch tmpfs (a
	// detached mount holding "upper", "work" and "shm").
	Layers int `json:"layers"`
	// HostSystem binds the host's system directories read-only and
	// mounts the /etc overlay (EtcLayer over the host's /etc) on the root.
	HostSystem bool `json:"host_system,omitempty"`
	// EtcLayer is the host directory stacked over the host's /etc
	// (identity files, whiteouts of secrets), prepared by the host.
	EtcLayer string `json:"etc_layer,omitempty"`
	// Seccomp is the assembled seccomp-BPF program, 8 bytes per
	// instruction in the kernel's sock_filter layout (native endian).
	Seccomp []byte `json:"seccomp"`
	// LandlockABI is the Landlock ABI the host probed; the agent enforces
	// the rights of that version.
	LandlockABI int `json:"landlock_abi"`
	// OneShot makes the agent exit (ending the sandbox) after the first
	// process it started has exited.
	OneShot bool `json:"one_shot,omitempty"`
	// Restrict narrows paths of the built root with mounts, after the
	// trees of Mounts are in place (sandbox.Spec.Restrict, validated by
	// the host).
	Restrict []Restriction `json:"restrict,omitempty"`
	// SharedNet: the sandbox shares the host's network namespace (mode
	// open), so the init leaves its interfaces alone.
	SharedNet bool `json:"shared_net,omitempty"`
	// WritableRoot: the root overlay is an imported template's, whose
	// files the sandbox user may own; Landlock then grants writes in the
	// root's own directories too (every entry of the root but /dev, /proc,
	// /sys, read-only binds and restricted paths), not only in the
	// writable places.
	WritableRoot bool `json:"writable_root,omitempty"`
}

// Restriction modes (sandbox.RestrictMode on the wire).
const (
	RestrictHide     = "hide"
	RestrictReadOnly = "read-only"
	RestrictPin      = "pin"
)

// Restriction narrows one path of the sandbox's root.
type Restriction struct {
	// Path is absolute and clean, inside the sandbox.
	Path string `json:"path"`
	// Mode is RestrictHide, RestrictReadOnly or RestrictPin.
	Mode string `json:"mode"`
}

// Mount is one detached mount tree placed at Target inside the sandbox.
type Mount struct {
	Target   string `json:"target"`
	Writable bool   `json:"writable,omitempty"`
	// File is true when the tree is a single file rather than a directory.
	File bool `json:"file,omitempty"`
}

// Exec asks the agent to start a process.
type Exec struct {
	Args []string `json:"args"`
	Env  []string `json:"env"`
	Cwd  string   `json:"cwd"`
	TTY  bool     `json:"tty,omitempty"`
	Rows uint16   `json:"rows,omitempty"`
	Cols uint16   `json:"cols,omitempty"`
	// Secrets become sealed memfds at descriptors 3, 4, … of the
	// process, in order; the host has already put NAME_FILE=/dev/fd/N in
	// Env.
	Secrets []SecretFile `json:"secrets,omitempty"`
	// CallCgroup: the last descriptor is the "tasks" file of a cgroup
	// made for this call alone (pids hierarchy). The process starts in it,
	// so that the host can kill the call's whole tree, descendants that
	// left its session included.
	CallCgroup bool `json:"call_cgroup,omitempty"`
}

// SecretFile is one secret's value for a process.
type SecretFile struct {
	Name  string `json:"name"`
	Value []byte `json:"value"`
}

// SecretFD is the descriptor number of the i-th secret in a process.
func SecretFD(i int) int { return 3 + i }

// Exit is a process's end as the agent saw it.
type Exit struct {
	// Code is the exit status when the process exited.
	Code int `json:"code"`
	// Signal is set when a signal ended the process.
	Signal int `json:"signal,omitempty"`
	// UserUsec and SysUsec are the CPU times of the process and its
	// waited-for descendants.
	UserUsec int64 `json:"user_usec"`
	SysUsec  int64 `json:"sys_usec"`
	// MaxRSS is the largest resident set in bytes.
	MaxRSS int64 `json:"max_rss"`
}

// File operations (FileOp.Op).
const (
	FileRead   = "read"    // Path; FD: pipe write end the content goes to (≤ Max)
	FileWrite  = "write"   // Path, Mode; FD: pipe read end the content comes from (≤ Max)
	FileList   = "list"    // Path
	FileStat   = "stat"    // Path
	FileMkdir  = "mkdir"   // Path, Mode, Recursive (parents)
	FileRemove = "remove"  // Path, Recursive
	FileMove   = "move"    // Path → To
	FileTarIn  = "tar_in"  // Path (directory); FD: pipe read end of a tar stream (≤ Max unpacked)
	FileTarOut = "tar_out" // Path; FD: pipe write end for a tar stream (≤ Max of content)
)

// FileOp is one file operation inside the sandbox.
type FileOp struct {
	Op        string `json:"op"`
	Path      string `json:"path"`
	To        string `json:"to,omitempty"`
	Mode      uint32 `json:"mode,omitempty"`
	Recursive bool   `json:"recursive,omitempty"`
	Max       int64  `json:"max,omitempty"`
}

// FileResult is what a file operation returns.
type FileResult struct {
	Entries []FileEntry `json:"entries,omitempty"` // list
	Info    *FileEntry  `json:"info,omitempty"`    // stat
	Bytes   int64       `json:"bytes,omitempty"`   // read, write, tar
}

// FileEntry mirrors sandbox.FileInfo on the wire (mtime in Unix ns).
type FileEntry struct {
	Name    string `json:"name"`
	Type    string `json:"type"`
	Size    int64  `json:"size"`
	Mode    uint32 `json:"mode"`
	MtimeNs int64  `json:"mtime_ns"`
	Target  string `json:"target,omitempty"`
}

// ErrInfo describes a failure inside the sandbox.
type ErrInfo struct {
	// Stage is the step that failed (e.g. "mount /proc", "exec").
	Stage   string `json:"stage"`
	Message string `json:"message"`
	// Code is the exit code this failure maps to (125, 126 or 127).
	Code int `json:"code"`
	// Errno names the kernel's error for a file operation (ENOENT…).
	Errno string `json:"errno,omitempty"`
}

func (e *ErrInfo) Error() string { return e.Stage + ": " + e.Message }

// MaxMessage is the largest packet either side sends or accepts.
const MaxMessage = 1 << 20

// MaxFDs is the most descriptors one packet carries.
const MaxFDs = 64

// ErrTooLarge is returned for a message over MaxMessage.
var ErrTooLarge = errors.New("protocol message too large")

// Conn is one end of the host↔agent socket.
type Conn struct {
	f    *os.File
	buf  []byte
	oob  []byte
	last []byte // the message just received
}

// NewConn wraps a connected SOCK_SEQPACKET socket.
func NewConn(f *os.File) *Conn {
	return &Conn{f: f}
}

// Close closes the socket.
func (c *Conn) Close() error { return c.f.Close() }

func encode(name string, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", name, err)
	}
	if len(b) > MaxMessage {
		return nil, fmt.Errorf("%s: %w (%d bytes)", name, ErrTooLarge, len(b))
	}
	return b, nil
}
