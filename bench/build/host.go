package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// epoch is SOURCE_DATE_EPOCH of both builds: the daemon's default
// (1980-01-01T00:00:00Z, docs/API.md "Builds"), given explicitly to the
// sandboxed build too so that the two cannot differ.
const epoch = 315532800

// makeCommand is the real build's command, on the host and in the
// sandbox (where the working directory is /src).
func makeCommand(jobs int) []string {
	return []string{"make", "-s", "-j" + strconv.Itoa(jobs), realProgram}
}

// hostEnv is the environment of the host's build in the directory dir:
// the variables a build's sandbox gets (moat's standard ones: PATH,
// HOME, TMPDIR and XDG_CACHE_HOME in its build directory, LANG and
// SOURCE_DATE_EPOCH), with dir/build in place of /build, and nothing
// else.
func hostEnv(dir string) []string {
	return []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + dir + "/build/home",
		"TMPDIR=" + dir + "/build/tmp",
		"XDG_CACHE_HOME=" + dir + "/build/cache",
		"LANG=C.UTF-8",
		"SOURCE_DATE_EPOCH=" + strconv.Itoa(epoch),
	}
}

// hostBuild runs the real build directly on the host: it writes p into a
// fresh directory (src, beside build/{home,tmp,cache}, the layout of a
// build's sandbox), runs make there with hostEnv and no other variable,
// and reads the program back, hashing it. The time is all of that; the
// directory is removed afterwards, untimed. It returns the program's
// sha256 (hex).
func hostBuild(ctx context.Context, p project, jobs int) (time.Duration, string, error) {
	dir, err := os.MkdirTemp("", "moat-bench-build-host-")
	if err != nil {
		return 0, "", err
	}
	defer os.RemoveAll(dir)
	t0 := time.Now()
	src := filepath.Join(dir, "src")
	for _, d := range []string{src, "build/home", "build/tmp", "build/cache"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return 0, "", err
		}
	}
	if err := p.writeTo(src); err != nil {
		return 0, "", fmt.Errorf("writing the source: %w", err)
	}
	argv := makeCommand(jobs)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = src, hostEnv(dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return 0, "", fmt.Errorf("%v: %w: %s", argv, err, firstN(string(out), 300))
	}
	prog, err := os.ReadFile(filepath.Join(src, realProgram))
	if err != nil {
		return 0, "", fmt.Errorf("the program: %w", err)
	}
	sum := sha256.Sum256(prog)
	return time.Since(t0), hex.EncodeToString(sum[:]), nil
}

// firstN returns s cut to n bytes, "…" marking a cut.
func firstN(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
