// Package guest is moat's in-sandbox agent: the process that runs as pid 1
// inside every sandbox, starts the sandbox's processes, relays their output
// streams and exit status, and its wire protocol with the host.
//
// # Transport
//
// Host and agent talk over one reliable, ordered connection (Conn). On
// Linux it is a SOCK_SEQPACKET socket pair (NewConn): one frame per
// packet, with file descriptors (the setup's mount trees, and in the
// descriptor-passing mode stdio pipes and a pty master) beside it as
// SCM_RIGHTS. A runtime without descriptor passing (a microVM's vsock or
// virtio-serial port) uses a byte stream (NewStreamConn): the same frames
// back to back, delimited by their headers, and every stream in frames.
//
// # Frames
//
// Every frame is a 16-byte header and a payload:
//
//	offset  size  field
//	0       1     kind     1 control, 2 data, 3 end, 4 credit, 5 reset (FrameKind)
//	1       1     stream   0 stdin, 1 stdout, 2 stderr, 3 pty, 4 file (Stream); 0 for control
//	2       2     reserved zero
//	4       4     length   of the payload, big-endian
//	8       8     id       the process or file operation, big-endian; 0 for control
//	16      …     payload  control: one JSON Message (1 byte to MaxMessage)
//	                       data:    1 to MaxFrameData bytes of the stream
//	                       credit:  4 bytes, big-endian: bytes granted (1 to StreamWindow)
//	                       end, reset: none
//
// A receiver checks the whole header, and the length against its kind's
// bounds, before it reads or keeps a payload; anything else is
// ErrProtocol and ends the connection. Control messages are JSON Messages
// (the types below); the Message's own ID says which process or file
// operation it concerns, 0 being the sandbox itself.
//
// # Streams
//
// A stream is one direction of bytes of one ID: the host sends stdin
// (and a pty's input), the agent stdout, stderr (and a pty's output), and
// a file operation's content goes the way the operation moves it
// (FileStreams). Its sender sends data frames and ends it with end; its
// receiver grants credit and may reset it (it stops reading: a pipe's
// EPIPE, and further data is dropped). Flow control is per stream: a
// sender starts with StreamWindow bytes of credit and never has more
// than its credit unconsumed at the receiver, which grants bytes back only
// as its reader consumes them. A receiver thus holds at most StreamWindow
// bytes of any stream, and the one goroutine that reads the connection
// never waits for a consumer: a stalled stream holds up its own sender,
// never control messages or other streams (Mux).
//
// Both ends open a stream's halves before anything can be sent on it:
// the host before it sends the request (Exec.Streams, FileOp.Streams),
// the agent while it handles the request, before it reads the next
// frame. A frame for a stream that is not open is dropped, so neither
// side can make the other allocate for streams it invents. The agent
// ends a process's outputs once it has exited and they are drained: all
// it wrote, and what a background child that keeps them open writes in
// the next 100 ms. It ends a file operation's stream before its
// file_done.
//
// The host never interprets what the sandbox's processes write: it is
// payload of data frames, counted and copied to the caller. Only the agent
// holds the connection, and its descriptors are never inherited.
package guest

import "errors"

// MsgType names a protocol message.
type MsgType string

// Messages from host to agent.
const (
	// MsgSetup builds the sandbox root. FDs: SetupFDs, in the order
	// Setup.PackFDs gives them.
	MsgSetup MsgType = "setup"
	// MsgExec starts a process. FDs: stdin, stdout, stderr (none when
	// TTY or Exec.Streams).
	MsgExec MsgType = "exec"
	// MsgSignal delivers a signal to a process's group.
	MsgSignal MsgType = "signal"
	// MsgFile asks for one file operation. FDs: one pipe end for the
	// operations that stream (read, write, tar_in, tar_out), unless
	// FileOp.Streams.
	MsgFile MsgType = "file"
	// MsgResize sets the terminal size of a process started with TTY and
	// Exec.Streams (Message.Resize); without Streams the host holds the
	// pty master and resizes it itself.
	MsgResize MsgType = "resize"
)

// Messages from agent to host.
const (
	// MsgReady says the root is built and hardened; Restrict reports the
	// setup's restrictions when it had any.
	MsgReady MsgType = "ready"
	// MsgStarted says a process runs. FDs: the pty master when TTY
	// without Exec.Streams.
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
	// Resize (MsgResize) is the process's new terminal size.
	Resize *WinSize `json:"resize,omitempty"`
}

// WinSize is a terminal's size in characters.
type WinSize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
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
	// Mounts are host trees handed over as detached mounts
	// (SetupFDs.Trees, one each, in order).
	Mounts []Mount `json:"mounts,omitempty"`
	// CgroupJoinFDs counts SetupFDs.CgroupJoin (set by PackFDs).
	CgroupJoinFDs int `json:"cgroup_join_fds,omitempty"`
	// CallCgroups: the last cgroup join descriptor (the pids hierarchy's
	// "tasks") is kept by the agent, which moves its forking thread back
	// there after starting each process in the cgroup of its call
	// (Exec.CallCgroup).
	CallCgroups bool `json:"call_cgroups,omitempty"`
	// MemoryWorkspace: /workspace is the root overlay's own directory
	// (owned by the sandbox user) rather than a host tree.
	MemoryWorkspace bool `json:"memory_workspace,omitempty"`
	// Layers counts SetupFDs.Layers, the root overlay's lower layers
	// (set by PackFDs).
	Layers int `json:"layers"`
	// HostSystem binds the host's system directories read-only and
	// mounts the /etc overlay (EtcLayer over the host's /etc) on the root.
	HostSystem bool `json:"host_system,omitempty"`
	// EtcLayer is the host directory stacked over the host's /etc
	// (identity files, whiteouts of secrets), prepared by the host.
	EtcLayer string `json:"etc_layer,omitempty"`
	// LocaleLayer, with HostSystem, is a host directory holding a locale
	// archive of the host's compiled locales, stacked read-only over the
	// host's /usr/lib/locale ("": none; the host has an archive of its
	// own or could not build one).
	LocaleLayer string `json:"locale_layer,omitempty"`
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
	// Streams: the process's stdio travels in frames of this message's ID
	// (no stdio descriptors): the agent sends StreamStdout and
	// StreamStderr, or with TTY the pty's output on StreamPTY, and ends
	// them (FrameEnd) once the process has exited and its output is
	// drained; resizes come as MsgResize.
	Streams bool `json:"streams,omitempty"`
	// Stdin (with Streams): the host sends the process's input on
	// StreamStdin, or StreamPTY with TTY. Without it the input is empty.
	Stdin bool `json:"stdin,omitempty"`
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
	FileRead   = "read"    // Path; stream to the host: the content (≤ Max)
	FileWrite  = "write"   // Path, Mode; stream from the host: the content (≤ Max)
	FileList   = "list"    // Path
	FileStat   = "stat"    // Path
	FileMkdir  = "mkdir"   // Path, Mode, Recursive (parents)
	FileRemove = "remove"  // Path, Recursive
	FileMove   = "move"    // Path → To
	FileTarIn  = "tar_in"  // Path (directory); stream from the host: a tar archive (≤ Max unpacked)
	FileTarOut = "tar_out" // Path; stream to the host: a tar archive (≤ Max of content)
)

// FileStreams reports whether operation op moves a stream of content,
// and its direction.
func FileStreams(op string) (streams, toHost bool) {
	switch op {
	case FileRead, FileTarOut:
		return true, true
	case FileWrite, FileTarIn:
		return true, false
	}
	return false, false
}

// FileOp is one file operation inside the sandbox.
type FileOp struct {
	Op        string `json:"op"`
	Path      string `json:"path"`
	To        string `json:"to,omitempty"`
	Mode      uint32 `json:"mode,omitempty"`
	Recursive bool   `json:"recursive,omitempty"`
	Max       int64  `json:"max,omitempty"`
	// Streams: the operation's content travels as StreamFile frames of
	// the message's ID rather than through a pipe end passed with it.
	// The agent ends the stream (FrameEnd, or FrameReset for one it
	// reads) before it answers.
	Streams bool `json:"streams,omitempty"`
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

// MaxMessage is the largest control message (its JSON) either side sends
// or accepts.
const MaxMessage = 1 << 20

// MaxFDs is the most descriptors one packet carries.
const MaxFDs = 64

// ErrTooLarge is returned for a message over MaxMessage.
var ErrTooLarge = errors.New("protocol message too large")
