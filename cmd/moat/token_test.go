package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testutil"
)

// TestTokenFromMoatData: every command that talks to the daemon finds the
// API token the same way; with MOAT_DATA naming the daemon's data
// directory, <MOAT_DATA>/token is enough (no MOAT_TOKEN).
func TestTokenFromMoatData(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	d := testutil.StartDaemon(t, dir, "--listen", "127.0.0.1:0")
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MOAT_") {
			env = append(env, kv)
		}
	}
	env = append(env, "MOAT_URL="+d.URL, "MOAT_DATA="+dir)
	for _, args := range [][]string{{"sandbox", "ls"}, {"snapshot", "ls"}, {"approvals", "ls"}} {
		cmd := exec.Command(testutil.Moat(t), args...)
		cmd.Env = env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		if err != nil {
			t.Errorf("moat %s with MOAT_DATA: exit %d, stderr %q", strings.Join(args, " "), ee.ExitCode(), errb.String())
		}
	}
}
