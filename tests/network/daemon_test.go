//go:build linux

package network

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// daemon is a `moat serve` of the fixture: its policy files in a temp
// home, the fixture's operator config, and clients with the agent's and
// the approver's tokens.
type daemon struct {
	*testutil.Daemon
	data, user      string
	agent, approver *client.Client
}

// startDaemon starts a daemon whose user policy file holds userRules and,
// when managed is not "", whose managed policy file holds managed.
func (fx *fixture) startDaemon(t *testing.T, userRules, managed string) *daemon {
	t.Helper()
	home := openDir(t)
	d := &daemon{data: t.TempDir(), user: filepath.Join(home, "user.toml")}
	writeFile(t, d.user, "version = 1\n"+userRules)
	managedPath := filepath.Join(home, "managed.toml")
	if managed != "" {
		writeFile(t, managedPath, managed)
	}
	d.Daemon = testutil.StartDaemon(t, d.data, "--listen", "127.0.0.1:0", "--home", home,
		"--policy-user", d.user, "--policy-managed", managedPath, "--config", fx.config, "--approval-timeout", "30s")
	var err error
	if d.agent, err = client.New(client.WithHTTP(d.URL, d.Token)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.agent.Close() })
	if d.ApproverToken == "" {
		t.Fatal("the daemon made no approver token")
	}
	if d.approver, err = client.New(client.WithHTTP(d.URL, d.ApproverToken)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.approver.Close() })
	return d
}

// create makes a sandbox with network n, deleted when the test ends.
func (d *daemon) create(t *testing.T, ctx context.Context, n *api.Network) *client.Sandbox {
	t.Helper()
	sb, err := d.agent.CreateSandbox(ctx, api.CreateSandbox{Network: n})
	if err != nil {
		t.Fatalf("create with network %+v: %v", n, err)
	}
	t.Cleanup(func() { sb.Delete(context.Background()) })
	return sb
}

// curlExec runs curl once per argument list in sb (see curlScript).
func curlExec(t *testing.T, ctx context.Context, sb *client.Sandbox, calls ...[]string) []curlOut {
	t.Helper()
	var script strings.Builder
	script.WriteString(curlScript)
	for _, c := range calls {
		script.WriteString("probe")
		for _, a := range c {
			script.WriteString(" " + shq(a))
		}
		script.WriteString("\n")
	}
	res, err := sb.Exec(ctx, api.Exec{Args: []string{"/bin/sh", "-c", script.String()}})
	if err != nil {
		t.Fatalf("exec curl in %s: %v", sb.ID(), err)
	}
	outs := parseCurl(res.Stdout)
	if res.ExitCode != 0 || len(outs) != len(calls) {
		t.Fatalf("exec curl in %s: exit %d, %d results for %d calls\nstdout: %s\nstderr: %s", sb.ID(), res.ExitCode, len(outs), len(calls), res.Stdout, res.Stderr)
	}
	return outs
}

// TestDaemonNetwork: the daemon's side of network mode proxy. The
// sandbox's policy is read again before each connection, so an edited user
// policy file denies a destination in a running sandbox at its next
// connection; an ask rule holds the connection until an approver answers
// through the SDK; the proxy's resolutions and decisions are audit events
// of the sandbox; a caller cannot admit IP addresses or CIDR ranges, nor
// ask for the host's network unless the managed policy permits it.
func TestDaemonNetwork(t *testing.T) {
	fx := newFixture(t)
	const baseRules = "allow = [\"Net(cidr:127.0.0.0/8)\"]\nask = [\"Net(domain:ask.moat.test)\"]\n"
	d := fx.startDaemon(t, baseRules, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pkgURL := fx.http.url("pkg.moat.test", "/hello")
	gitURL := fx.http.url("git.moat.test", "/hello")
	var liveID string

	t.Run("an edited policy file applies to the next connection", func(t *testing.T) {
		sb := d.create(t, ctx, &api.Network{Mode: "proxy", AllowDomains: []string{"pkg.moat.test", "git.moat.test"}})
		liveID = sb.ID()
		got := curlExec(t, ctx, sb, []string{pkgURL})
		if got[0].Code != http.StatusOK || got[0].Body != helloBody {
			t.Fatalf("before the edit: %s", got[0])
		}
		writeFile(t, d.user, "version = 1\n"+baseRules+"deny = [\"Net(domain:pkg.moat.test)\"]\n")
		defer writeFile(t, d.user, "version = 1\n"+baseRules)
		got = curlExec(t, ctx, sb, []string{pkgURL}, []string{"-sS", fx.https.url("pkg.moat.test", "/hello")}, []string{gitURL})
		if got[0].Code != http.StatusForbidden || got[0].XError != "denied" {
			t.Errorf("after adding deny Net(domain:pkg.moat.test): HTTP %s, want 403 denied", got[0])
		}
		if got[1].Connect != http.StatusForbidden || got[1].XError != "denied" {
			t.Errorf("after adding deny Net(domain:pkg.moat.test): HTTPS %s, want CONNECT 403 denied", got[1])
		}
		// Control: the same sandbox still reaches another allowed name.
		if got[2].Code != http.StatusOK || got[2].Body != helloBody {
			t.Errorf("control: git.moat.test after the edit: %s", got[2])
		}
	})

	t.Run("an ask rule holds the connection for an approver", func(t *testing.T) {
		sb := d.create(t, ctx, &api.Network{Mode: "proxy", AllowDomains: []string{"pkg.moat.test", "ask.moat.test"}})
		fctx, stop := context.WithCancel(ctx)
		defer stop()
		pending := make(chan api.Approval, 4)
		go func() {
			for a, err := range d.approver.FollowApprovals(fctx, api.ListApprovals{Sandbox: sb.ID()}) {
				if err != nil {
					return
				}
				if a.State == api.ApprovalPending {
					pending <- a
				}
			}
		}()
		askURL := fx.http.url("ask.moat.test", "/hello")
		for _, decision := range []string{api.DecisionAllow, api.DecisionDeny} {
			done := make(chan curlOut, 1)
			go func() {
				res, err := sb.Exec(ctx, api.Exec{Args: []string{"/bin/sh", "-c", curlScript + "probe -m 25 " + shq(askURL)}})
				if err != nil {
					t.Errorf("exec: %v", err)
					done <- curlOut{}
					return
				}
				outs := parseCurl(res.Stdout)
				if len(outs) != 1 {
					t.Errorf("exec: %+v", res)
					done <- curlOut{}
					return
				}
				done <- outs[0]
			}()
			var a api.Approval
			select {
			case a = <-pending:
			case got := <-done:
				t.Fatalf("curl ended without an approval: %s", got)
			case <-ctx.Done():
				t.Fatal("no approval appeared")
			}
			if a.Op != "net.connect" || !strings.Contains(a.Request, "ask.moat.test") {
				t.Errorf("approval: %+v", a)
			}
			select {
			case got := <-done:
				t.Fatalf("curl ended while its approval was pending: %s", got)
			default:
			}
			if _, err := d.agent.AnswerApproval(ctx, api.AnswerApproval{ID: a.ID, Decision: api.DecisionAllow}); client.Code(err) != api.CodePermissionDenied {
				t.Errorf("the agent answered its own approval: %v", err)
			}
			if _, err := d.approver.AnswerApproval(ctx, api.AnswerApproval{ID: a.ID, Decision: decision}); err != nil {
				t.Fatalf("answer %s: %v", decision, err)
			}
			got := <-done
			switch decision {
			case api.DecisionAllow:
				if got.Code != http.StatusOK || got.Body != helloBody {
					t.Errorf("allowed by the approver: %s", got)
				}
			case api.DecisionDeny:
				if got.Code != http.StatusForbidden || got.XError != "denied" {
					t.Errorf("denied by the approver: %s, want 403 denied", got)
				}
			}
		}
		// Control: an allowed name in the same sandbox asks nobody.
		if got := curlExec(t, ctx, sb, []string{pkgURL}); got[0].Code != http.StatusOK {
			t.Errorf("control: pkg.moat.test: %s", got[0])
		}
	})

	t.Run("the audit tape records resolutions and decisions", func(t *testing.T) {
		if liveID == "" {
			t.Skip("the first subtest made no sandbox")
		}
		type netEvent struct {
			audit.Event
			host    string
			answers []string
			code    string
		}
		decode := func(e audit.Event) netEvent {
			var req struct {
				Host string `json:"host"`
			}
			var res struct {
				Answers []string `json:"answers"`
				Code    string   `json:"code"`
			}
			_ = json.Unmarshal(e.Request, &req)
			_ = json.Unmarshal(e.Result, &res)
			return netEvent{e, req.Host, res.Answers, res.Code}
		}
		want := []struct {
			kind, decision, code string
			answers              []string
		}{
			{"net.dns", audit.DecisionAllow, "", []string{"127.0.0.1"}},
			{"net.connect", audit.DecisionAllow, "", nil},
			{"net.connect", audit.DecisionDeny, "denied", nil},
			{"net.close", "", "", nil},
		}
		has := func(evs []netEvent, kind, decision, code string, answers []string) bool {
			return slices.ContainsFunc(evs, func(e netEvent) bool {
				return e.Kind == kind && e.Sandbox == liveID && e.host == "pkg.moat.test" && e.Decision == decision &&
					e.code == code && (answers == nil || slices.Equal(e.answers, answers))
			})
		}
		// Through the SDK.
		var viaSDK []netEvent
		for _, kind := range []string{"net.dns", "net.connect", "net.close"} {
			page, err := d.agent.Audit(ctx, api.AuditQuery{Sandbox: liveID, Kind: kind, Limit: 100})
			if err != nil {
				t.Fatalf("audit query %s: %v", kind, err)
			}
			for _, e := range page.Events {
				viaSDK = append(viaSDK, decode(audit.Event(e)))
			}
		}
		// On the tape itself.
		f, err := os.Open(filepath.Join(d.data, "audit", "audit.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var onTape []netEvent
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var e audit.Event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Fatalf("tape line %q: %v", sc.Text(), err)
			}
			if strings.HasPrefix(e.Kind, "net.") {
				onTape = append(onTape, decode(e))
			}
		}
		for _, w := range want {
			if !has(viaSDK, w.kind, w.decision, w.code, w.answers) {
				t.Errorf("audit query: no %s event for pkg.moat.test with decision %q code %q answers %v: %+v", w.kind, w.decision, w.code, w.answers, viaSDK)
			}
			if !has(onTape, w.kind, w.decision, w.code, w.answers) {
				t.Errorf("audit.jsonl: no %s event for pkg.moat.test with decision %q code %q answers %v", w.kind, w.decision, w.code, w.answers)
			}
		}
	})

	// What a caller may not ask for at create, beside a create that
	// differs only in what is refused (the control). This daemon's policy
	// files have no Net rule: nothing admits an internal address.
	t.Run("a caller cannot admit addresses or open the network", func(t *testing.T) {
		bare := fx.startDaemon(t, "", "")
		loop := fx.http.url("127.0.0.1", "/hello")
		// The policy reads an IPv4 address the way inet_aton does
		// (0x7f.1, 0x7f000001 and 0xa9fea9fe are addresses too), so
		// those spellings must be refused as well. Each entry comes
		// with a URL at the address it names, to show what an accepted
		// entry gives the sandbox.
		for _, c := range []struct{ allow, url string }{
			{"127.0.0.1", loop}, {"10.0.0.0/8", "http://10.0.0.1/"}, {"::1", ""}, {"169.254.169.254", "http://169.254.169.254/"},
			{"cidr:127.0.0.0/8", loop}, {"127.1", loop},
			{"0x7f.0.0.1", loop}, {"0X7F.1", loop}, {"0x7f000001", loop},
			{"0xa.0.0.1", "http://10.0.0.1/"}, {"0xa9fea9fe", "http://169.254.169.254/"},
		} {
			sb, err := bare.agent.CreateSandbox(ctx, api.CreateSandbox{Network: &api.Network{Mode: "proxy", AllowDomains: []string{c.allow}}})
			var ae *api.Error
			// Without the managed policy's allow_cidr_entries: 403
			// policy_denied naming that key.
			if errors.As(err, &ae) && ae.Code == api.CodePolicyDenied && api.HTTPStatus(ae) == http.StatusForbidden && strings.HasPrefix(ae.Rule, "allow_cidr_entries") {
				continue
			}
			if err != nil {
				t.Errorf("create with allow_domains [%q]: %v, want 403 policy_denied (allow_cidr_entries)", c.allow, err)
				continue
			}
			// Accepted: show what the caller gained.
			got := curlExec(t, ctx, sb, []string{"--noproxy", "", "-m", "2", c.url})
			sb.Delete(ctx)
			t.Errorf("ESCAPE: create with allow_domains [%q] was accepted, want 403 policy_denied; "+
				"through its proxy %s got: %s", c.allow, c.url, got[0])
		}
		_, err := bare.agent.CreateSandbox(ctx, api.CreateSandbox{Network: &api.Network{Mode: "open"}})
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != api.CodePolicyDenied || api.HTTPStatus(ae) != http.StatusForbidden || !strings.Contains(ae.Message, "open_network") {
			t.Errorf("ESCAPE: create with mode open and no managed permission: %v, want 403 policy_denied naming open_network", err)
		}
		// Control: a create with names only, in mode proxy; its proxy
		// refuses the host's loopback.
		sb := bare.create(t, ctx, &api.Network{Mode: "proxy", AllowDomains: []string{"pkg.moat.test", "*.moat.test"}})
		got := curlExec(t, ctx, sb, []string{"--noproxy", "", loop}, []string{fx.http.url("pkg.moat.test", "/hello")})
		if got[0].Code != http.StatusForbidden || got[0].XError != "denied" {
			t.Errorf("ESCAPE: a names-only sandbox reached %s: %s", loop, got[0])
		}
		if got[1].Code != http.StatusForbidden || got[1].XError != "blocked-address" {
			t.Errorf("pkg.moat.test (127.0.0.1) with no CIDR rule: %s, want 403 blocked-address", got[1])
		}
	})

	t.Run("mode open where the managed policy permits it", func(t *testing.T) {
		direct := []string{"--noproxy", "*", "-m", "5", fx.http.url("127.0.0.1", "/hello")}
		// Modes none and proxy cannot reach the host's loopback.
		for _, mode := range []string{"none", "proxy"} {
			sb := d.create(t, ctx, &api.Network{Mode: mode})
			if got := curlExec(t, ctx, sb, direct); got[0].Exit == 0 || got[0].Code != 0 {
				t.Errorf("ESCAPE: mode %s reached the host's loopback: %s", mode, got[0])
			}
		}
		od := fx.startDaemon(t, "", "version = 1\nopen_network = true\n")
		sb := od.create(t, ctx, &api.Network{Mode: "open"})
		if got := curlExec(t, ctx, sb, direct); got[0].Code != http.StatusOK || got[0].Body != helloBody {
			t.Errorf("mode open with open_network = true: %s, want the host server's answer", got[0])
		}
		port := strconv.Itoa(fx.http.port)
		res, err := sb.Exec(ctx, api.Exec{Args: []string{"bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/" + port}})
		if err != nil || res.ExitCode != 0 {
			t.Errorf("mode open: bash /dev/tcp to the host's 127.0.0.1:%s: %v %+v", port, err, res)
		}
	})
}
