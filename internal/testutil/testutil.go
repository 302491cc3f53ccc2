// Package testutil builds the moat binary once per test binary and runs it
// for end-to-end tests, and holds the skip rules: a test that needs root or
// a kernel feature skips with a message on a machine without it, but fails
// under CI=true, so CI really runs it.
package testutil

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/moat-sandbox/moat/sandbox"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// InCI reports whether the tests run under CI (CI=true).
func InCI() bool { return os.Getenv("CI") == "true" }

// SkipOrFail skips the test with reason, or fails it under CI.
func SkipOrFail(t testing.TB, reason string) {
	t.Helper()
	if InCI() {
		t.Fatalf("required for CI but unavailable: %s", reason)
	}
	t.Skip(reason)
}

// RequireRoot skips (or fails under CI) unless running as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		SkipOrFail(t, "needs root (uid 0)")
	}
}

// repoRoot finds the module root from this file's location.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Moat returns the path of a moat binary built from this checkout (static,
// CGO_ENABLED=0), building it on first use.
func Moat(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "moat-test-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "moat")
		buildErr = buildMoat(dir, binPath)
	})
	if buildErr != nil {
		t.Fatalf("building moat: %v", buildErr)
	}
	return binPath
}

// buildMoat builds moat as `make build` does: cmd/moat-init first, then
// moat with it embedded (build tag moatinit, the executable and its
// SHA-256 given to package runtime/linux/leaninit through a build
// overlay), all in dir.
func buildMoat(dir, bin string) error {
	root := repoRoot()
	goBuild := func(args ...string) error {
		cmd := exec.Command("go", append([]string{"build"}, args...)...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return errors.New("go build: " + err.Error() + "\n" + string(out))
		}
		return nil
	}
	initBin := filepath.Join(dir, "moat-init")
	if err := goBuild("-o", initBin, "./cmd/moat-init"); err != nil {
		return err
	}
	b, err := os.ReadFile(initBin)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(b)
	if err := os.WriteFile(initBin+".sha256", []byte(hex.EncodeToString(sum[:])+"\n"), 0o644); err != nil {
		return err
	}
	embedDir := filepath.Join(root, "runtime", "linux", "leaninit")
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {
		filepath.Join(embedDir, "moat-init"):        initBin,
		filepath.Join(embedDir, "moat-init.sha256"): initBin + ".sha256",
	}})
	if err != nil {
		return err
	}
	overlayFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
		return err
	}
	return goBuild("-overlay", overlayFile, "-tags", "moatinit", "-o", bin, "./cmd/moat")
}

// Cleanup removes the built binary; call it from TestMain after m.Run.
func Cleanup() {
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
}

// Output is what one moat invocation produced.
type Output struct {
	Code   int
	Stdout string
	Stderr string
}

// Exec runs the moat binary with args and returns its exit code and output.
func Exec(t testing.TB, args ...string) Output {
	t.Helper()
	return ExecStdin(t, nil, args...)
}

// ExecStdin is Exec with stdin.
func ExecStdin(t testing.TB, stdin []byte, args ...string) Output {
	t.Helper()
	cmd := exec.Command(Moat(t), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	err := cmd.Run()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("moat %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return Output{Code: code, Stdout: out.String(), Stderr: errb.String()}
}

// Run runs `moat run --json [flags...] -- argv...` and decodes the result.
// flags may be nil.
func Run(t testing.TB, flags []string, argv ...string) *sandbox.Result {
	t.Helper()
	RequireRoot(t)
	args := append([]string{"run", "--json"}, flags...)
	args = append(append(args, "--"), argv...)
	o := Exec(t, args...)
	var res sandbox.Result
	if err := json.Unmarshal([]byte(o.Stdout), &res); err != nil {
		t.Fatalf("moat %v: exit %d, not a JSON result: %v\nstdout: %s\nstderr: %s", args, o.Code, err, o.Stdout, o.Stderr)
	}
	if res.ExitCode != o.Code {
		t.Fatalf("moat %v: JSON exit_code %d but process exit %d", args, res.ExitCode, o.Code)
	}
	return &res
}

// Sh runs a shell string inside a default sandbox (extra moat flags may be
// given) and returns the result.
func Sh(t testing.TB, script string, flags ...string) *sandbox.Result {
	t.Helper()
	return Run(t, flags, "/bin/sh", "-c", script)
}

// Daemon is a `moat serve` started by StartDaemon.
type Daemon struct {
	Cmd *exec.Cmd
	// URL is the address from the daemon's "listening" log line
	// (http://host:port, or unix:/path).
	URL string
	// Token is the default tenant's token from the data directory.
	Token string
	// ApproverToken is the default tenant's approver token
	// (<data>/approver-token), when the daemon made one.
	ApproverToken string
	// Log holds the daemon's stderr up to the "listening" line.
	Log string
}

// StartDaemon starts `moat serve --data dir` with extra flags and returns
// once it logs that it listens; it is stopped with SIGTERM (or killed)
// when the test ends, if still running.
func StartDaemon(t testing.TB, dir string, flags ...string) *Daemon {
	t.Helper()
	return StartDaemonCmd(t, dir, exec.Command(Moat(t), append([]string{"serve", "--data", dir}, flags...)...))
}

// StartDaemonCmd starts cmd, a `moat serve --data dir` however it is run
// (under a wrapper such as prlimit, or another build of moat), and returns
// once it logs that it listens, as StartDaemon does.
func StartDaemonCmd(t testing.TB, dir string, cmd *exec.Cmd) *Daemon {
	t.Helper()
	pr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &Daemon{Cmd: cmd}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
	})
	sc := bufio.NewScanner(pr)
	var log strings.Builder
	for sc.Scan() {
		line := sc.Text()
		log.WriteString(line + "\n")
		if !strings.Contains(line, "msg=listening") {
			continue
		}
		_, url, _ := strings.Cut(line, " url=")
		d.URL, _, _ = strings.Cut(url, " ")
		tok, err := os.ReadFile(filepath.Join(dir, "token"))
		if err != nil {
			t.Fatal(err)
		}
		d.Token, d.Log = strings.TrimSpace(string(tok)), log.String()
		if atok, err := os.ReadFile(filepath.Join(dir, "approver-token")); err == nil {
			d.ApproverToken = strings.TrimSpace(string(atok))
		}
		// Keep draining the log so the daemon never blocks on it.
		go func() {
			for sc.Scan() {
			}
		}()
		return d
	}
	_ = cmd.Wait()
	t.Fatalf("moat serve did not start:\n%s", log.String())
	return nil
}
