package policy

import (
	"net/netip"
	"strings"
	"testing"
)

// TestNetAllowlist: the caller's allowlist (Context.NetAllow) admits
// destinations in either profile; deny and ask rules of every layer,
// the project's included, still win; the project and per-call layers
// cannot add to it.
func TestNetAllowlist(t *testing.T) {
	c := tctx
	c.NetAllow = []string{"pypi.org", "*.npmjs.org", "cidr:127.0.0.0/8", "10.1.0.0/16", "192.0.2.7"}
	proj := layerFile(t, Project, "", []string{"Net(domain:evil.com)"}, []string{"Net(domain:registry.npmjs.org)"}, []string{"Net(domain:files.pypi.org)", "Net(cidr:10.1.2.0/24)"})
	call, err := ParseCall(CallRules{Deny: []string{"Net(domain:bad.npmjs.org)"}, Allow: []string{"Net(domain:other.com)"}})
	if err != nil {
		t.Fatal(err)
	}
	e := mustCompile(t, c, proj)
	if e, err = e.With(call); err != nil {
		t.Fatal(err)
	}
	checkDecisions(t, e, []dcase{
		{NetHost("pypi.org"), Allow, "allow Net(domain:pypi.org)", ""},
		{NetHost("PyPI.org.:443"), Allow, "allow Net(domain:pypi.org)", ""},
		{NetHost("files.pypi.org"), Deny, "not on the network allowlist", ""}, // *. is not implied
		{NetHost("npmjs.org"), Deny, "not on the network allowlist", ""},      // apex not matched by *.
		{NetHost("a.npmjs.org"), Allow, "*.npmjs.org", ""},
		{NetHost("registry.npmjs.org"), Ask, "ask Net(domain:registry.npmjs.org)", ""},
		{NetHost("bad.npmjs.org"), Deny, "deny Net(domain:bad.npmjs.org)", ""},
		{NetHost("evil.com"), Deny, "not on the network allowlist", ""},  // project allow ignored
		{NetHost("other.com"), Deny, "not on the network allowlist", ""}, // per-call allow ignored
		{NetHost("127.0.0.1:8080"), Allow, "cidr:127.0.0.0/8", ""},
		{NetHost("10.1.9.9"), Allow, "cidr:10.1.0.0/16", ""},
		{NetHost("10.1.2.3"), Deny, "deny Net(cidr:10.1.2.0/24)", ""},
		{NetHost("192.0.2.7"), Allow, "allow Net(domain:192.0.2.7)", ""},
		{NetHost("192.0.2.8"), Deny, "not on the network allowlist", "raw IP"},
	})
	w := strings.Join(e.Warnings(), "\n")
	if !strings.Contains(w, "per-call rules cannot add to the network allowlist") || strings.Contains(w, "allowlist allow[") {
		t.Errorf("warnings:\n%s", w)
	}
	addr := func(s string, special bool, want Effect, rule string) {
		t.Helper()
		d := e.DecideAddr(netip.MustParseAddr(s), special)
		if d.Effect != want || !strings.Contains(d.Rule.String(), rule) {
			t.Errorf("DecideAddr(%s, %v) = %v by %s (%s); want %v by %q", s, special, d.Effect, d.Rule, d.Reason, want, rule)
		}
	}
	addr("93.184.216.34", false, Allow, "default")
	addr("127.0.0.1", true, Allow, "cidr:127.0.0.0/8")
	addr("::ffff:127.0.0.1", true, Allow, "cidr:127.0.0.0/8")
	addr("10.0.0.1", true, Deny, "internal address")
	addr("169.254.169.254", true, Deny, "internal address")
	addr("10.1.2.3", true, Deny, "deny Net(cidr:10.1.2.0/24)")
	addr("10.1.3.3", true, Allow, "cidr:10.1.0.0/16")
	addr("192.0.2.7", true, Allow, "domain:192.0.2.7")
	if ro := e.Roots(); len(ro.NetAllow) != 5 {
		t.Errorf("roots net allow %v", ro.NetAllow)
	}

	// The user file's allow rules count in the untrusted profile too.
	u := mustCompile(t, tctx, layerFile(t, User, "", []string{"Net(domain:github.com)"}, nil, nil))
	checkDecisions(t, u, []dcase{{NetHost("github.com"), Allow, "allow Net(domain:github.com)", ""}})

	// Bad entries are refused when compiling.
	for _, bad := range []string{"", "10.0.0.1/8", "*.10.0.0.1", "a b", "exa*mple.com", "::ffff:10.0.0.0/104", "x:80"} {
		c := tctx
		c.NetAllow = []string{bad}
		if _, err := Compile(c); err == nil {
			t.Errorf("NetAllow %q accepted", bad)
		}
	}
}

// TestOpenNetwork: only the managed file can permit network mode open.
func TestOpenNetwork(t *testing.T) {
	src := "version = 1\nopen_network = true\n"
	for _, l := range []Layer{Project, User} {
		if e := mustCompile(t, tctx, mustParse(t, l, "f", src)); e.OpenNetwork() {
			t.Errorf("%s layer permitted open network", l)
		}
	}
	if e := mustCompile(t, tctx, mustParse(t, Managed, "f", src)); !e.OpenNetwork() {
		t.Error("managed open_network = true ignored")
	}
	if _, err := Parse(Managed, "f", []byte("version = 1\nopen_network = \"yes\"\n")); err == nil {
		t.Error("open_network = \"yes\" accepted")
	}
}

// TestNetEntryNamesAddress: every spelling of an address counts as one.
func TestNetEntryNamesAddress(t *testing.T) {
	for entry, want := range map[string]bool{
		"127.0.0.1": true, "127.1": true, "0x7f000001": true, "0X7F.1": true, "0177.0.0.1": true, "2130706433": true,
		"0xa9fea9fe": true, "::1": true, "cidr:10.0.0.0/8": true, "10.0.0.0/8": true, "domain:10.1.2.3": true,
		"example.com": false, "*.example.com": false, "*": false, "0x7f.example.com": false, "a1.b2": false,
	} {
		got, err := NetEntryNamesAddress(entry)
		if err != nil || got != want {
			t.Errorf("%q: %v %v, want %v", entry, got, err, want)
		}
	}
}
