package main

import (
	"os"
	"testing"

	"github.com/moat-sandbox/moat/internal/testutil"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.Cleanup()
	os.Exit(code)
}

// TestAgentHTTP runs the example agent against a `moat serve` over HTTP,
// configured from the environment as a user would.
func TestAgentHTTP(t *testing.T) {
	testutil.RequireRoot(t)
	d := testutil.StartDaemon(t, t.TempDir(), "--listen", "127.0.0.1:0")
	t.Setenv("MOAT_MODE", "http")
	t.Setenv("MOAT_URL", d.URL)
	t.Setenv("MOAT_TOKEN", d.Token)
	if err := run(); err != nil {
		t.Fatal(err)
	}
}

// TestAgentStdio runs the example agent with its own `moat serve --stdio`.
func TestAgentStdio(t *testing.T) {
	testutil.RequireRoot(t)
	t.Setenv("MOAT_MODE", "stdio")
	t.Setenv("MOAT_URL", "")
	t.Setenv("MOAT_BIN", testutil.Moat(t))
	t.Setenv("MOAT_DATA", t.TempDir())
	if err := run(); err != nil {
		t.Fatal(err)
	}
}
