package client_test

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// stdioRoot is where `moat serve --stdio` without --data keeps its data.
const stdioRoot = "/var/lib/moat/stdio"

// deadStdioDirs lists the entries of stdioRoot not in before whose
// daemon (the pid in their name) is no longer running.
func deadStdioDirs(t *testing.T, before map[string]bool) []string {
	t.Helper()
	ents, err := os.ReadDir(stdioRoot)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if before[e.Name()] {
			continue
		}
		alive := false
		for _, f := range strings.Split(e.Name(), "-") {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				if _, err := os.Stat("/proc/" + f); err == nil {
					alive = true
				}
			}
		}
		if !alive {
			out = append(out, e.Name())
		}
	}
	return out
}

func stdioEntries(t *testing.T) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir(stdioRoot)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, e := range ents {
		m[e.Name()] = true
	}
	return m
}

// TestStdioSDKLeavesNothing: the SDK's stdio mode (a `moat serve --stdio`
// child without --data) leaves no data directory behind once the client
// is closed, and the child writes nothing on the stderr it was given.
func TestStdioSDKLeavesNothing(t *testing.T) {
	testutil.RequireRoot(t)
	before := stdioEntries(t)
	var stderr bytes.Buffer
	c, err := client.New(client.WithStdio(testutil.Moat(t)), client.WithStderr(&stderr))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := c.CreateSandbox(ctx, api.CreateSandbox{})
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	res, err := sb.Exec(ctx, api.Exec{Args: []string{"echo", "hi"}})
	if err != nil || res.Stdout != "hi\n" {
		c.Close()
		t.Fatalf("exec: %+v %v", res, err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if left := deadStdioDirs(t, before); len(left) != 0 {
		t.Fatalf("left behind in %s: %q", stdioRoot, left)
	}
	if stderr.Len() != 0 {
		t.Fatalf("the stdio child wrote on stderr: %q", stderr.String())
	}
}
