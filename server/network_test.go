package server

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
)

// TestNetworkCreateChecks: what a caller may ask of the network. IP
// addresses and CIDR ranges in allow_domains could reach the daemon's own
// networks: without the managed policy's allow_cidr_entries they are 403
// policy_denied naming that key (TestNetworkCIDREntries has the control);
// malformed entries and lists without mode proxy are 400; mode open needs
// the managed policy's open_network. Control: with it, mode open is
// created in the host's network namespace.
func TestNetworkCreateChecks(t *testing.T) {
	h := newFakeHarness(t, nil)
	for _, n := range []api.Network{
		{Mode: "bridge"},
		{Mode: "proxy", AllowDomains: []string{"exa mple.com"}},
		{Mode: "proxy", AllowDomains: []string{"10.0.0.1/8"}},
		{Mode: "none", AllowDomains: []string{"example.com"}},
		{DenyDomains: []string{"example.com"}},
	} {
		r := h.do("POST", "/v1/sandboxes", tokenA, api.CreateSandbox{Network: &n})
		if r.status != http.StatusBadRequest || r.apiErr(t).Code != api.CodeInvalidArgument {
			t.Errorf("%+v: %d %s", n, r.status, r.body)
		}
	}
	for _, a := range []string{"127.0.0.1", "10.0.0.0/8", "cidr:0.0.0.0/0", "::1", "0x7f000001", "0xa9fea9fe", "0X7F.1"} {
		n := api.Network{Mode: "proxy", AllowDomains: []string{"example.com", a}}
		r := h.do("POST", "/v1/sandboxes", tokenA, api.CreateSandbox{Network: &n})
		if e := r.apiErr(t); r.status != http.StatusForbidden || e.Code != api.CodePolicyDenied || !strings.HasPrefix(e.Rule, "allow_cidr_entries") ||
			e.Source != "managed "+h.managed {
			t.Errorf("%s without allow_cidr_entries: %d %s", a, r.status, r.body)
		}
	}
	r := h.do("POST", "/v1/sandboxes", tokenA, api.CreateSandbox{Network: &api.Network{Mode: "open"}})
	if r.status != http.StatusForbidden || r.apiErr(t).Code != api.CodePolicyDenied || !strings.Contains(string(r.body), "open_network") {
		t.Fatalf("open without the managed permission: %d %s", r.status, r.body)
	}
	writePolicy(t, h.managed, "version = 1\nopen_network = true\n")
	var sb api.Sandbox
	r = h.do("POST", "/v1/sandboxes", tokenA, api.CreateSandbox{Network: &api.Network{Mode: "open"}})
	r.decode(t, &sb)
	if r.status != http.StatusCreated || !strings.HasPrefix(sb.Enforcement.Network, "open") || sb.Network.Mode != "open" {
		t.Fatalf("open with the managed permission: %d %s", r.status, r.body)
	}
	if _, ok := sb.Enforcement.Lookup("net_namespace"); ok {
		t.Errorf("mode open has a network namespace of its own: %+v", sb.Enforcement.Protections)
	}
}

// TestNetworkProxyLive: a sandbox in mode proxy reaches a host server
// through the daemon's egress proxy when the policy admits it; an edited
// policy file applies to the running sandbox's next connection; an ask
// rule holds the connection until an approver answers; every decision is
// an audit event of the sandbox's tenant.
func TestNetworkProxyLive(t *testing.T) {
	h := newHarness(t, nil)
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") })
	srv := httptest.NewServer(hello)
	defer srv.Close()
	// A second server on another loopback address, for the ask rule.
	srv2 := httptest.NewUnstartedServer(hello)
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	srv2.Listener.Close()
	srv2.Listener = ln
	srv2.Start()
	defer srv2.Close()
	base := "version = 1\nallow = [\"Net(cidr:127.0.0.0/8)\"]\n"
	writePolicy(t, h.user, base)
	id := h.create(tokenA, api.CreateSandbox{Network: &api.Network{Mode: "proxy"}})
	curl := func(addr string) *sandbox.Result {
		t.Helper()
		var res sandbox.Result
		r := h.do("POST", "/v1/sandboxes/"+id+"/exec", tokenA, api.Exec{Args: []string{"curl", "-s", "--noproxy", "", "-x", "http://127.0.0.1:3128",
			"-w", " %{http_code}", "http://" + addr + "/"}})
		r.decode(t, &res)
		return &res
	}
	if res := curl(srv.Listener.Addr().String()); res.Stdout != "hello 200" {
		t.Fatalf("allowed: %+v", res)
	}
	writePolicy(t, h.user, base+"deny = [\"Net(cidr:127.0.0.1/32)\"]\n")
	if res := curl(srv.Listener.Addr().String()); !strings.HasPrefix(res.Stdout, "moat egress proxy: denied: Net 127.0.0.1") || !strings.HasSuffix(res.Stdout, " 403") {
		t.Fatalf("after the edit: %+v", res)
	}
	// An ask rule: the connection waits for the approver.
	writePolicy(t, h.user, base+"ask = [\"Net(cidr:127.0.0.2/32)\"]\n")
	fol := h.follow(tokenA, "")
	done := make(chan *sandbox.Result, 1)
	go func() { done <- curl(ln.Addr().String()) }()
	ap := fol.next(api.ApprovalPending)
	if ap.Sandbox != id || ap.Op != "net.connect" || ap.Kind != "Net" || !strings.Contains(ap.Request, "127.0.0.2") {
		t.Fatalf("approval %+v", ap)
	}
	if r := h.answer(approverA, ap.ID, api.AnswerApproval{Decision: "allow"}); r.status != 200 {
		t.Fatalf("answer: %d %s", r.status, r.body)
	}
	if res := <-done; res.Stdout != "hello 200" {
		t.Fatalf("after the approval: %+v", res)
	}
	evs := h.auditEvents(tokenA, "net.connect")
	var allow, deny int
	for _, e := range evs {
		if e.Sandbox != id || e.Tenant != "a" {
			t.Errorf("event of another sandbox or tenant: %+v", e)
		}
		switch e.Decision {
		case "allow":
			allow++
		case "deny":
			deny++
		}
	}
	if allow != 2 || deny != 1 {
		t.Errorf("net.connect events: %d allow, %d deny; want 2, 1: %+v", allow, deny, evs)
	}
	if n := len(h.auditEvents(tokenB, "net.")); n != 0 {
		t.Errorf("tenant b sees %d of a's network events", n)
	}
}
