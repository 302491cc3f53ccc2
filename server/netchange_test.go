package server

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/internal/testdns"
	"github.com/moat-sandbox/moat/sandbox"
)

// netLab is a local test service reachable by name through the daemon's
// egress proxy: svc.test and denied.test resolve (testdns) to the
// loopback address of an HTTP server answering "hello".
type netLab struct {
	h    *harness
	port string
}

func newNetLab(t *testing.T) *netLab {
	t.Helper()
	dns := testdns.Start(t, map[string][]netip.Addr{
		"svc.test":    {netip.MustParseAddr("127.0.0.1")},
		"denied.test": {netip.MustParseAddr("127.0.0.1")},
	})
	h := newHarness(t, func(c *Config) { c.DNSServer = dns.Addr() })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") }))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	return &netLab{h: h, port: port}
}

// get fetches http://host:port/ from inside the sandbox with curl, through
// the proxy environment the sandbox's processes get (none in mode none;
// its NO_PROXY ignored, so that an address goes through the proxy too):
// stdout is the headers and body, then " CODE".
func (l *netLab) get(t *testing.T, id, host string) *sandbox.Result {
	t.Helper()
	var res sandbox.Result
	r := l.h.do("POST", "/v1/sandboxes/"+id+"/exec", tokenA, api.Exec{Args: []string{"curl", "-s", "-i", "--noproxy", "", "-w", " %{http_code}",
		"http://" + host + ":" + l.port + "/"}})
	if r.status != http.StatusOK {
		t.Fatalf("exec: %d %s", r.status, r.body)
	}
	r.decode(t, &res)
	return &res
}

// setNet is PUT /v1/sandboxes/{id}/network.
func (l *netLab) setNet(id string, n api.SetNetwork) reply {
	return l.h.do("PUT", "/v1/sandboxes/"+id+"/network", tokenA, n)
}

// TestNetworkChangeLive: a sandbox created without network gets the egress
// proxy while it runs (PUT network, mode proxy) and reaches a local test
// service by name; the next request after a change that removes the name
// is refused (403, X-Proxy-Error); a name the user's policy denies stays
// denied, reported as dropped with the rule; open is refused; none closes
// the proxy. Every change is a sandbox.network audit event with the
// previous and the new network and who made it.
func TestNetworkChangeLive(t *testing.T) {
	l := newNetLab(t)
	h := l.h
	// The operator lets callers name loopback addresses; the user denies
	// denied.test.
	writePolicy(t, h.managed, "version = 1\nallow_cidr_entries = [\"127.0.0.0/8\"]\n")
	writePolicy(t, h.user, "version = 1\ndeny = [\"Net(domain:denied.test)\"]\n")
	id := h.create(tokenA, api.CreateSandbox{})

	if res := l.get(t, id, "svc.test"); res.ExitCode == 0 {
		t.Fatalf("mode none reached the service: %+v", res)
	}

	var n api.Network
	r := l.setNet(id, api.SetNetwork{Mode: "proxy", AllowDomains: []string{"svc.test", "127.0.0.1"}})
	r.decode(t, &n)
	if r.status != http.StatusOK || n.Mode != "proxy" || strings.Join(n.AllowDomains, ",") != "svc.test,127.0.0.1" || len(n.Dropped) != 0 {
		t.Fatalf("none -> proxy: %d %s", r.status, r.body)
	}
	if res := l.get(t, id, "svc.test"); !strings.HasSuffix(res.Stdout, "hello 200") {
		t.Fatalf("after none -> proxy: %+v", res)
	}
	var sb api.Sandbox
	h.do("GET", "/v1/sandboxes/"+id, tokenA, nil).decode(t, &sb)
	if sb.Network == nil || sb.Network.Mode != "proxy" || !strings.HasPrefix(sb.Enforcement.Network, "proxy") {
		t.Errorf("described as %+v, %q", sb.Network, sb.Enforcement.Network)
	}

	// The name removed: the very next request is refused.
	if r := l.setNet(id, api.SetNetwork{Mode: "proxy", AllowDomains: []string{"127.0.0.1"}}); r.status != http.StatusOK {
		t.Fatalf("narrowing: %d %s", r.status, r.body)
	}
	res := l.get(t, id, "svc.test")
	if !strings.HasSuffix(res.Stdout, " 403") || !strings.Contains(res.Stdout, "X-Proxy-Error: denied") ||
		!strings.Contains(res.Stdout, "not on the network allowlist") {
		t.Fatalf("after removing svc.test: %+v", res)
	}

	// A name the user's policy denies stays denied, with the reason.
	r = l.setNet(id, api.SetNetwork{AllowDomains: []string{"svc.test", "denied.test", "127.0.0.1"}})
	n = api.Network{}
	r.decode(t, &n)
	if r.status != http.StatusOK || strings.Join(n.AllowDomains, ",") != "svc.test,127.0.0.1" || len(n.Dropped) != 1 ||
		n.Dropped[0].Entry != "denied.test" || n.Dropped[0].Rule != "deny Net(domain:denied.test)" ||
		n.Dropped[0].Source != "user ~/.config/moat/policy.toml:2" {
		t.Fatalf("denied entry: %d %s", r.status, r.body)
	}
	if res := l.get(t, id, "svc.test"); !strings.HasSuffix(res.Stdout, "hello 200") {
		t.Fatalf("svc.test again: %+v", res)
	}
	res = l.get(t, id, "denied.test")
	if !strings.HasSuffix(res.Stdout, " 403") || !strings.Contains(res.Stdout, "X-Proxy-Error: denied") ||
		!strings.Contains(res.Stdout, "deny Net(domain:denied.test)") {
		t.Fatalf("denied.test: %+v", res)
	}

	// Mode open cannot be entered after the create, not even where the
	// managed policy permits it.
	writePolicy(t, h.managed, "version = 1\nopen_network = true\nallow_cidr_entries = [\"127.0.0.0/8\"]\n")
	r = l.setNet(id, api.SetNetwork{Mode: "open"})
	if e := r.apiErr(t); r.status != http.StatusConflict || e.Code != api.CodeConflict || !strings.Contains(e.Message, "open cannot be entered") {
		t.Fatalf("open: %d %s", r.status, r.body)
	}

	// proxy -> none: the listener is gone.
	if r := l.setNet(id, api.SetNetwork{Mode: "none"}); r.status != http.StatusOK {
		t.Fatalf("proxy -> none: %d %s", r.status, r.body)
	}
	var probe sandbox.Result
	h.do("POST", "/v1/sandboxes/"+id+"/exec", tokenA, api.Exec{Args: []string{"curl", "-s", "-x", "http://127.0.0.1:3128",
		"http://svc.test:" + l.port + "/"}}).decode(t, &probe)
	if probe.ExitCode != 7 { // curl: failed to connect
		t.Fatalf("after proxy -> none, the proxy port answers: %+v", probe)
	}
	// And back: a new listener.
	if r := l.setNet(id, api.SetNetwork{Mode: "proxy", AllowDomains: []string{"svc.test", "127.0.0.1"}}); r.status != http.StatusOK {
		t.Fatalf("none -> proxy again: %d %s", r.status, r.body)
	}
	if res := l.get(t, id, "svc.test"); !strings.HasSuffix(res.Stdout, "hello 200") {
		t.Fatalf("after none -> proxy again: %+v", res)
	}

	evs := h.auditEvents(tokenA, api.OpSandboxNetwork)
	var ok, refused int
	for _, e := range evs {
		if e.Sandbox != id || e.Tenant != "a" || e.Actor == "" {
			t.Errorf("event %+v", e)
		}
		var res struct{ Previous, Network *api.Network }
		if err := json.Unmarshal(e.Result, &res); err != nil || res.Previous == nil {
			t.Errorf("event without the previous network: %s", e.Result)
		}
		switch e.Decision {
		case "allow":
			ok++
			if res.Network == nil {
				t.Errorf("event without the new network: %s", e.Result)
			}
		default:
			refused++
		}
	}
	if ok != 5 || refused != 1 {
		t.Errorf("sandbox.network events: %d allowed, %d refused; want 5, 1: %+v", ok, refused, evs)
	}
	first := evs[0]
	if !strings.Contains(string(first.Result), `"previous":{"mode":"none"}`) {
		t.Errorf("first change: %s", first.Result)
	}
}

// TestNetworkCIDREntries: an IP or CIDR entry in a caller's allowlist (a
// create's, a change's) is 403 policy_denied naming allow_cidr_entries
// unless the managed policy's allow_cidr_entries covers it. Control: with
// it, the create succeeds and the sandbox reaches the local service by
// address; a range outside it, or that key in the user's file, still is
// refused.
func TestNetworkCIDREntries(t *testing.T) {
	l := newNetLab(t)
	h := l.h
	create := func(allow ...string) reply {
		return h.do("POST", "/v1/sandboxes", tokenA, api.CreateSandbox{Network: &api.Network{Mode: "proxy", AllowDomains: allow}})
	}
	denied := func(what string, r reply) {
		t.Helper()
		if e := r.apiErr(t); r.status != http.StatusForbidden || e.Code != api.CodePolicyDenied || !strings.HasPrefix(e.Rule, "allow_cidr_entries") {
			t.Errorf("%s: %d %s", what, r.status, r.body)
		}
	}
	denied("create without the permission", create("127.0.0.1"))
	// The user's file cannot grant it.
	writePolicy(t, h.user, "version = 1\nallow_cidr_entries = true\n")
	denied("create with the user's allow_cidr_entries", create("127.0.0.0/8"))
	id := h.create(tokenA, api.CreateSandbox{})
	denied("change without the permission", l.setNet(id, api.SetNetwork{Mode: "proxy", AllowDomains: []string{"127.0.0.1"}}))

	writePolicy(t, h.managed, "version = 1\nallow_cidr_entries = [\"127.0.0.0/8\"]\n")
	denied("a range wider than permitted", create("0.0.0.0/0"))
	denied("a range outside", create("10.0.0.0/8"))
	var sb api.Sandbox
	r := create("127.0.0.1")
	r.decode(t, &sb)
	if r.status != http.StatusCreated || sb.Network == nil || strings.Join(sb.Network.AllowDomains, ",") != "127.0.0.1" {
		t.Fatalf("create with the permission: %d %s", r.status, r.body)
	}
	if res := l.get(t, sb.ID, "127.0.0.1"); !strings.HasSuffix(res.Stdout, "hello 200") {
		t.Fatalf("by address through the proxy: %+v", res)
	}
	if r := l.setNet(id, api.SetNetwork{Mode: "proxy", AllowDomains: []string{"127.0.0.1"}}); r.status != http.StatusOK {
		t.Fatalf("change with the permission: %d %s", r.status, r.body)
	}
}

// TestNetworkChangeRPC: sandbox.network over JSON-RPC (moat serve
// --stdio): the result is the network; the sandbox then reaches the local
// service through the proxy; mode open is a JSON-RPC error whose data is
// the conflict.
func TestNetworkChangeRPC(t *testing.T) {
	l := newNetLab(t)
	writePolicy(t, l.h.managed, "version = 1\nallow_cidr_entries = [\"127.0.0.0/8\"]\n")
	p := newRPCPeer(t, l.h)
	p.send(`{"jsonrpc":"2.0","id":1,"method":"sandbox.create","params":{}}`)
	id, _ := p.next()["result"].(map[string]any)["id"].(string)
	if id == "" {
		t.Fatal("no sandbox")
	}
	p.send(`{"jsonrpc":"2.0","id":2,"method":"sandbox.network","params":{"sandbox":"` + id + `","mode":"proxy","allow_domains":["svc.test","127.0.0.1"]}}`)
	m := p.next()
	res, _ := m["result"].(map[string]any)
	if m["id"] != float64(2) || res["mode"] != "proxy" || fmt.Sprint(res["allow_domains"]) != "[svc.test 127.0.0.1]" {
		t.Fatalf("sandbox.network: %v", m)
	}
	p.send(`{"jsonrpc":"2.0","id":3,"method":"process.exec","params":{"sandbox":"` + id + `","args":["curl","-s","--noproxy","","-w"," %{http_code}","http://svc.test:` + l.port + `/"]}}`)
	if m := p.next(); m["result"].(map[string]any)["stdout"] != "hello 200" {
		t.Fatalf("exec after sandbox.network: %v", m)
	}
	p.send(`{"jsonrpc":"2.0","id":4,"method":"sandbox.network","params":{"sandbox":"` + id + `","mode":"open"}}`)
	m = p.next()
	e, _ := m["error"].(map[string]any)
	data, _ := e["data"].(map[string]any)
	if e == nil || e["code"] != float64(-32000) || data["code"] != api.CodeConflict {
		t.Fatalf("open over JSON-RPC: %v", m)
	}
	p.w.Close()
	<-p.done
}
