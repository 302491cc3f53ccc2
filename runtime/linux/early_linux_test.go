package linux

import (
	"context"
	"testing"

	"github.com/moat-sandbox/moat/sandbox"
)

// TestCreateEarly: an exec made on a sandbox CreateEarly handed out before
// it was ready runs once the setup is done, in the long-lived sandbox
// (which takes later calls); ready reports the setup's outcome to every
// caller, the first exec's wait having taken the init's one ready message.
func TestCreateEarly(t *testing.T) {
	r := newTestRuntime(t)
	ctx := context.Background()
	sb, ready, err := r.CreateEarly(ctx, &sandbox.Spec{Hostname: "early"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Shutdown(ctx)
	res, err := sb.Exec(ctx, &sandbox.Process{Args: []string{"/bin/sh", "-c", "hostname; echo x > /tmp/f"}})
	if err != nil || res.ExitCode != 0 || res.Stdout != "early\n" {
		t.Fatalf("first exec: %v %+v", err, res)
	}
	for range 2 {
		if err := ready(ctx); err != nil {
			t.Fatalf("ready: %v", err)
		}
	}
	res, err = sb.Exec(ctx, &sandbox.Process{Args: []string{"cat", "/tmp/f"}})
	if err != nil || res.ExitCode != 0 || res.Stdout != "x\n" {
		t.Fatalf("second exec: %v %+v", err, res)
	}
	if e := sb.(*linuxSandbox).Enforcement(); e.Runtime != "linux" || len(e.Protections) == 0 {
		t.Fatalf("enforcement: %+v", e)
	}
}
