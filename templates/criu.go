package templates

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"time"
)

// ProcessState says, for a snapshot's Processes field, why process state
// is not part of a snapshot on this host. moat snapshots filesystems only:
// it never claims a checkpoint. Where CRIU is installed and `criu check`
// passes, the reason says so (moat does not drive CRIU yet); where it
// fails, its first line of complaint is quoted.
func ProcessState(ctx context.Context) string {
	path, err := exec.LookPath("criu")
	if err != nil {
		return "not captured: criu is not installed; a restore or fork starts with no process running"
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, path, "check")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		line, _, _ := strings.Cut(strings.TrimSpace(out.String()), "\n")
		if line == "" {
			line = err.Error()
		}
		return "not captured: `criu check` fails on this host (" + line + "); a restore or fork starts with no process running"
	}
	return "not captured: `criu check` passes but moat does not checkpoint processes yet; a restore or fork starts with no process running"
}
