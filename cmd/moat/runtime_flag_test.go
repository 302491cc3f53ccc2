package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/config"
	moatruntime "github.com/moat-sandbox/moat/runtime"
	"github.com/moat-sandbox/moat/sandbox"

	"github.com/moat-sandbox/moat/internal/testutil"
)

// TestRuntimeName checks the choice of runtime: --runtime, else the
// config's runtime key, else linux; an unknown name is a usage error.
func TestRuntimeName(t *testing.T) {
	d := config.BuiltIn()
	if n, err := runtimeName("", d); err != nil || n != moatruntime.Default {
		t.Errorf("no flag, no config: %q %v", n, err)
	}
	d.Runtime = "linux"
	if n, err := runtimeName("", d); err != nil || n != "linux" {
		t.Errorf("config linux: %q %v", n, err)
	}
	d.Runtime, d.Source = "nosuch", "c.toml"
	if _, err := runtimeName("", d); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "config c.toml: runtime") {
		t.Errorf("config nosuch: %v", err)
	}
	if n, err := runtimeName("linux", d); err != nil || n != "linux" {
		t.Errorf("--runtime linux wins over the config: %q %v", n, err)
	}
	_, err := runtimeName("nosuch", config.BuiltIn())
	if !errors.Is(err, errUsage) || err.Error() != `--runtime: unknown runtime "nosuch" (known runtimes: linux)` {
		t.Errorf("--runtime nosuch: %v", err)
	}
}

// TestRuntimeFlag runs moat run, serve and doctor with --runtime: linux
// runs the command; an unknown name exits 125 naming the known runtimes,
// before anything starts.
func TestRuntimeFlag(t *testing.T) {
	wantUnknown := func(t *testing.T, o testutil.Output) {
		t.Helper()
		if o.Code != sandbox.ExitSetupFailed || !strings.Contains(o.Stderr, `unknown runtime "nosuch" (known runtimes: linux)`) {
			t.Fatalf("exit %d, stderr %q; want 125 naming the known runtimes", o.Code, o.Stderr)
		}
	}
	t.Run("run nosuch", func(t *testing.T) { wantUnknown(t, testutil.Exec(t, "run", "--runtime", "nosuch", "--", "true")) })
	t.Run("serve nosuch", func(t *testing.T) {
		wantUnknown(t, testutil.Exec(t, "serve", "--runtime", "nosuch", "--data", t.TempDir(), "--listen", "127.0.0.1:0"))
	})
	t.Run("doctor nosuch", func(t *testing.T) { wantUnknown(t, testutil.Exec(t, "doctor", "--runtime", "nosuch")) })
	t.Run("run --json nosuch", func(t *testing.T) {
		o := testutil.Exec(t, "run", "--json", "--runtime", "nosuch", "--", "true")
		var res sandbox.Result
		if err := json.Unmarshal([]byte(o.Stdout), &res); err != nil || o.Code != sandbox.ExitSetupFailed ||
			!strings.Contains(res.Error, "known runtimes: linux") {
			t.Fatalf("exit %d, result %q (%v)", o.Code, o.Stdout, err)
		}
	})
	t.Run("config nosuch", func(t *testing.T) {
		cfg := filepath.Join(t.TempDir(), "config.toml")
		if err := os.WriteFile(cfg, []byte("runtime = \"nosuch\"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(testutil.Moat(t), "run", "--", "true")
		cmd.Env = append(os.Environ(), "MOAT_CONFIG="+cfg)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != sandbox.ExitSetupFailed || !strings.Contains(stderr.String(), "known runtimes: linux") {
			t.Fatalf("%v, stderr %q", err, stderr.String())
		}
	})
	t.Run("help", func(t *testing.T) {
		for _, c := range []string{"run", "serve", "doctor"} {
			if o := testutil.Exec(t, c, "--help"); o.Code != 0 || !strings.Contains(o.Stdout+o.Stderr, "--runtime NAME") {
				t.Errorf("moat %s --help does not document --runtime NAME:\n%s", c, o.Stdout+o.Stderr)
			}
		}
	})
	t.Run("run linux", func(t *testing.T) {
		testutil.RequireRoot(t)
		if o := testutil.Exec(t, "run", "--runtime", "linux", "--", "true"); o.Code != 0 {
			t.Fatalf("exit %d, stderr %q", o.Code, o.Stderr)
		}
		res := testutil.Run(t, []string{"--runtime", "linux"}, "sh", "-c", "echo hi")
		if res.ExitCode != 0 || res.Stdout != "hi\n" {
			t.Fatalf("--json: %+v", res)
		}
	})
}
