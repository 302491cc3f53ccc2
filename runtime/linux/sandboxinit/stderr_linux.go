package sandboxinit

import "golang.org/x/sys/unix"

// StderrFile is where the init's own stderr goes once it is ready: a file
// at the root of the sandbox's scratch tmpfs, beside the root overlay's
// upper layer and work directory, out of sight of every sandbox process
// (none of them can reach that root). Until then, stderr is a pipe the
// host reads, so that an init that fails its setup without a word on its
// control socket is explained; after, the host holds no descriptor for
// it, and reads the file's tail only if the init dies.
const StderrFile = "init-stderr"

// openStderrFile creates StderrFile at the root of the scratch tmpfs
// scratchFD, for writing, close-on-exec.
//
// Preconditions: the setup's scratch descriptor, before the init closes
// it; isolateFDs has run (so the new descriptor stays out of every
// sandbox process).
func openStderrFile(scratchFD int) (int, error) {
	fd, err := unix.Openat(scratchFD, StderrFile,
		unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_APPEND|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return -1, stageErr("stderr file", err)
	}
	return fd, nil
}

// redirectStderr makes fd, from openStderrFile, the init's stderr and
// closes fd. The host's end of the stderr pipe then reads end of file.
func redirectStderr(fd int) error {
	defer unix.Close(fd)
	return stageErr("stderr file", unix.Dup3(fd, 2, 0))
}
