package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/bench/internal/cli"

	"github.com/moat-sandbox/moat/bench/internal/machine"
	"github.com/moat-sandbox/moat/bench/schema"
)

// oldTree is the source and daemon of the commit before issue 17, in a
// temporary directory removed at the end.
type oldTree struct {
	dir string // the temporary directory
	src string // the source, from git archive
	bin string // its moat binary
}

func (t *oldTree) remove() { os.RemoveAll(t.dir) }

// git runs git in the current directory and returns its trimmed output.
func git(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "git", args...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// buildOld extracts ref with git archive into a temporary directory and
// builds its moat binary there; a nil tree comes with the reason.
func buildOld(ctx context.Context, ref string) (*oldTree, *schema.OldDaemon) {
	info := &schema.OldDaemon{Ref: ref}
	fail := func(format string, args ...any) (*oldTree, *schema.OldDaemon) {
		info.SkippedReason = fmt.Sprintf(format, args...)
		return nil, info
	}
	commit, err := git(ctx, "rev-parse", "--verify", ref+"^{commit}")
	if err != nil {
		return fail("%v", err)
	}
	info.Commit = commit
	if s, err := git(ctx, "log", "-1", "--format=%s", commit); err == nil {
		info.Subject = firstN(s, 160)
	}
	dir, err := os.MkdirTemp("", "moat-bench-daemon-old-")
	if err != nil {
		return fail("%v", err)
	}
	t := &oldTree{dir: dir, src: filepath.Join(dir, "src"), bin: filepath.Join(dir, "moat")}
	begin := time.Now()
	if err := os.Mkdir(t.src, 0o755); err != nil {
		t.remove()
		return fail("%v", err)
	}
	// git archive COMMIT | tar -x -C SRC, from the checkout's root: run
	// in a subdirectory (bench/, where the benchmarks run), git archive
	// writes only that subdirectory.
	root, err := cli.Root()
	if err != nil {
		t.remove()
		return fail("%v", err)
	}
	archive := exec.CommandContext(ctx, "git", "archive", "--format=tar", commit)
	archive.Dir = root
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", t.src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.remove()
		return fail("%v", err)
	}
	untar.Stdin = pipe
	var aerr, terr strings.Builder
	archive.Stderr, untar.Stderr = &aerr, &terr
	if err := untar.Start(); err != nil {
		t.remove()
		return fail("tar: %v", err)
	}
	err = archive.Run()
	if werr := untar.Wait(); err == nil && werr != nil {
		err = fmt.Errorf("tar: %v: %s", werr, terr.String())
	}
	if err != nil {
		t.remove()
		return fail("git archive %s: %v %s", commit, err, aerr.String())
	}
	short := commit[:min(12, len(commit))]
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+short+"-before-issue-17", "-o", t.bin, "./cmd/moat")
	build.Dir = t.src
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.remove()
		return fail("go build of %s: %v: %s", short, err, firstN(strings.TrimSpace(string(out)), 500))
	}
	info.BuildSec = time.Since(begin).Round(100 * time.Millisecond).Seconds()
	info.Version = machine.Version(t.bin, "version")
	return t, info
}

func firstN(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
