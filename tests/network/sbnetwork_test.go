//go:build linux

package network

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// sandboxCLI runs `moat sandbox ARGS...` against d (a hang guard, not a
// timed assertion).
func (d *daemon) sandboxCLI(t *testing.T, fx *fixture, args ...string) testutil.Output {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, testutil.Moat(t), append([]string{"sandbox"}, args...)...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = append(os.Environ(), "HOME="+fx.home, "MOAT_CONFIG=", "MOAT_MODE=", "MOAT_URL="+d.URL, "MOAT_TOKEN="+d.Token, "MOAT_TOKEN_FILE=")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("moat sandbox %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return testutil.Output{Code: code, Stdout: out.String(), Stderr: errb.String()}
}

// TestSandboxNetworkCLI: `moat sandbox create --net proxy --allow-domain`
// makes a proxied sandbox that reaches a local test service by name;
// `moat sandbox network SB --net proxy --allow-domain` gives a running
// sandbox created without network the proxy; the SDK's SetNetwork removes
// the name and the next request is refused (403, X-Proxy-Error), and the
// CLI prints what the daemon dropped and why. An address entry needs the
// managed policy's allow_cidr_entries (here 127.0.0.0/8: the test service
// is on loopback).
func TestSandboxNetworkCLI(t *testing.T) {
	fx := newFixture(t)
	d := fx.startDaemon(t, "deny = [\"Net(domain:other.moat.test)\"]\n", "version = 1\nallow_cidr_entries = [\"127.0.0.0/8\"]\n")
	ctx := context.Background()
	hello := "curl -s --noproxy '' -w ' %{http_code}' -i " + fx.http.url("moat.test", "/hello")
	run := func(id string) string {
		t.Helper()
		res, err := d.agent.Sandbox(id).Exec(ctx, api.Exec{Args: []string{"sh", "-c", hello}})
		if err != nil {
			t.Fatal(err)
		}
		return res.Stdout
	}
	cleanup := func(id string) { t.Cleanup(func() { d.agent.Sandbox(id).Delete(context.Background()) }) }

	// create --net proxy --allow-domain.
	out := d.sandboxCLI(t, fx, "create", "--net", "proxy", "--allow-domain", "moat.test", "--allow-domain", "127.0.0.1")
	id := strings.TrimSpace(out.Stdout)
	if out.Code != 0 || id == "" {
		t.Fatalf("create --net proxy: %+v", out)
	}
	cleanup(id)
	if got := run(id); !strings.HasSuffix(got, helloBody+" 200") {
		t.Fatalf("created with --net proxy: %q", got)
	}
	// Without the managed permission's range: refused, naming the key.
	out = d.sandboxCLI(t, fx, "create", "--net", "proxy", "--allow-domain", "10.0.0.0/8")
	if out.Code != 125 || !strings.Contains(out.Stderr, "allow_cidr_entries") {
		t.Fatalf("create with 10.0.0.0/8: %+v", out)
	}
	// Flags need --net proxy.
	if out := d.sandboxCLI(t, fx, "create", "--allow-domain", "moat.test"); out.Code == 0 {
		t.Fatalf("--allow-domain without --net proxy: %+v", out)
	}

	// A sandbox without network, then moat sandbox network.
	out = d.sandboxCLI(t, fx, "create")
	id2 := strings.TrimSpace(out.Stdout)
	if out.Code != 0 || id2 == "" {
		t.Fatalf("create: %+v", out)
	}
	cleanup(id2)
	if got := run(id2); strings.HasSuffix(got, " 200") {
		t.Fatalf("mode none reached the service: %q", got)
	}
	out = d.sandboxCLI(t, fx, "network", id2, "--net", "proxy", "--allow-domain", "moat.test", "--allow-domain", "other.moat.test", "--allow-domain", "127.0.0.1")
	if out.Code != 0 || out.Stdout != "mode proxy\nallow moat.test\nallow 127.0.0.1\n" ||
		!strings.Contains(out.Stderr, "dropped other.moat.test: denied by deny Net(domain:other.moat.test) (user ") {
		t.Fatalf("network --net proxy: %+v", out)
	}
	if got := run(id2); !strings.HasSuffix(got, helloBody+" 200") {
		t.Fatalf("after moat sandbox network: %q", got)
	}
	// Without flags: the network as it is.
	if out := d.sandboxCLI(t, fx, "network", id2); out.Code != 0 || out.Stdout != "mode proxy\nallow moat.test\nallow 127.0.0.1\n" {
		t.Fatalf("network without flags: %+v", out)
	}
	if out := d.sandboxCLI(t, fx, "network", id2, "--net", "open"); out.Code != 125 || !strings.Contains(out.Stderr, "open cannot be entered") {
		t.Fatalf("network --net open: %+v", out)
	}

	// The SDK: the name removed, the next request refused.
	n, err := d.agent.Sandbox(id2).SetNetwork(ctx, api.Network{Mode: "proxy", AllowDomains: []string{"127.0.0.1"}})
	if err != nil || n.Mode != "proxy" || strings.Join(n.AllowDomains, ",") != "127.0.0.1" {
		t.Fatalf("SetNetwork: %+v, %v", n, err)
	}
	got := run(id2)
	if !strings.HasSuffix(got, " 403") || !strings.Contains(got, "X-Proxy-Error: denied") {
		t.Fatalf("after SetNetwork: %q", got)
	}
	var ae *api.Error
	if _, err := d.agent.Sandbox(id2).SetNetwork(ctx, api.Network{Mode: "proxy", AllowDomains: []string{"192.168.0.0/16"}}); !errors.As(err, &ae) || ae.Code != api.CodePolicyDenied {
		t.Fatalf("SetNetwork outside allow_cidr_entries: %v", err)
	}

	// Audited: who, the previous and the new network.
	page, err := d.agent.Audit(ctx, api.AuditQuery{Sandbox: id2, Kind: api.OpSandboxNetwork})
	if err != nil {
		t.Fatal(err)
	}
	var allowed int
	for _, e := range page.Events {
		if e.Decision == "allow" {
			allowed++
			if !strings.Contains(string(e.Result), `"previous"`) || !strings.Contains(string(e.Result), `"network"`) || e.Actor == "" {
				t.Errorf("event %+v", e)
			}
		}
	}
	if allowed != 2 {
		t.Errorf("%d allowed sandbox.network events, want 2: %+v", allowed, page.Events)
	}
}
