package sandbox

// The sandbox user and the places every sandbox has, the same under every
// runtime. Runtimes, the policy compiler, the guest and the front doors
// take them from here.
const (
	// WorkspaceDir is where every sandbox sees its workspace, and where
	// relative paths of file operations and commands start.
	WorkspaceDir = "/workspace"
	// HomeDir is the sandbox user's home.
	HomeDir = "/home/sandbox"
	// UserName is the sandbox user's name in the sandbox's /etc/passwd.
	UserName = "sandbox"
	// UID and GID are the ids every sandbox process runs as (no
	// capabilities). A template's user is idmapped onto them.
	UID = 1000
	GID = 1000
)
