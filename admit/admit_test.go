package admit

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/netproxy"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/policy/compile"
	"github.com/moat-sandbox/moat/sandbox"
)

// host is a layout under a temp dir: a workspace, a home with a
// credential directory, and the managed and user files' places (the
// managed file is not /etc/moat/policy.toml: no test reads the host's).
type host struct {
	root, ws, home string
	layers         Layers
}

func newHost(t *testing.T) *host {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h := &host{root: root, ws: root + "/ws", home: root + "/home"}
	for _, d := range []string{h.ws + "/.moat", h.home + "/.ssh", h.home + "/.config/moat", root + "/etc", root + "/data"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	h.layers = Layers{Home: h.home, Managed: root + "/etc/policy.toml", User: filepath.Join(h.home, policy.UserPath)}
	return h
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (h *host) load(t *testing.T, spec *sandbox.Spec, netAllow []string) *Policy {
	t.Helper()
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	p, err := h.layers.Load(spec, netAllow)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSources: the managed and user files as the front door says, the
// project file only for a host workspace; moat run's defaults are the
// standard places.
func TestSources(t *testing.T) {
	l := Layers{Home: "/h", Managed: "/m.toml", User: "/h/u.toml"}
	if got := l.Sources(&sandbox.Spec{Workspace: "/w/./x/"}); got != (policy.Sources{Managed: "/m.toml", Project: "/w/x/.moat/policy.toml", User: "/h/u.toml"}) {
		t.Errorf("host workspace: %+v", got)
	}
	if got := l.Sources(&sandbox.Spec{}); got.Project != "" {
		t.Errorf("in-memory workspace has a project file: %+v", got)
	}
	d := DefaultLayers("/home/u")
	want := policy.DefaultSources(policy.Context{Workspace: "/w", Home: "/home/u"})
	if got := d.Sources(&sandbox.Spec{Workspace: "/w"}); got != want || d.Home != "/home/u" {
		t.Errorf("DefaultLayers: %+v, want %+v", got, want)
	}
	if DefaultLayers("").User != "" {
		t.Error("no home, yet a user file")
	}
}

// TestLoadLayers: every layer is read (managed, project, user), the
// caller's allowlist is in the context, and the rules decide.
func TestLoadLayers(t *testing.T) {
	h := newHost(t)
	write(t, h.layers.Managed, "version = 1\ndeny = [\"Exec(shutdown*)\"]\n")
	write(t, h.ws+"/.moat/policy.toml", "version = 1\ndeny = [\"Exec(git push*)\"]\n")
	write(t, h.layers.User, "version = 1\nask = [\"Exec(rm *)\"]\n")
	p := h.load(t, &sandbox.Spec{Workspace: h.ws}, []string{"pkg.example.test"})
	if p.Sources.Project != h.ws+"/.moat/policy.toml" || len(p.Context.NetAllow) != 1 || p.Context.Home != h.home {
		t.Errorf("policy %+v", p)
	}
	eff := p.Current()
	for _, c := range []struct {
		req  policy.Request
		want policy.Effect
	}{
		{policy.ExecArgv("shutdown", "now"), policy.Deny},
		{policy.ExecArgv("git", "push"), policy.Deny},
		{policy.ExecArgv("rm", "x"), policy.Ask},
		{policy.ExecArgv("ls"), policy.Allow},
		{policy.NetHost("pkg.example.test:443"), policy.Allow},
		{policy.NetHost("other.example.test:443"), policy.Deny},
	} {
		d, err := Decide(eff, nil, c.req)
		if err != nil || d.Effect != c.want {
			t.Errorf("%s: %s (%v), want %s", c.req, d.Effect, err, c.want)
		}
	}
	// In memory: no project file, so its rule is gone.
	p = h.load(t, &sandbox.Spec{}, nil)
	if d, _ := Decide(p.Current(), nil, policy.ExecArgv("git", "push")); d.Effect != policy.Allow {
		t.Errorf("in-memory workspace read the project file: %s", d.Effect)
	}
}

// TestLoadErrors: an invalid project file is the caller's (Project set);
// an invalid managed file is the operator's (Project nil, ErrInvalid).
func TestLoadErrors(t *testing.T) {
	h := newHost(t)
	spec := &sandbox.Spec{Workspace: h.ws}
	write(t, h.ws+"/.moat/policy.toml", "version = 1\ndeny = [\"Exec(\"]\n")
	_, err := h.layers.Load(spec, nil)
	var le *LoadError
	if !errors.As(err, &le) || le.Project == nil || le.Error() != le.Err.Error() {
		t.Fatalf("invalid project file: %v", err)
	}
	write(t, h.ws+"/.moat/policy.toml", "version = 1\n")
	write(t, h.layers.Managed, "version = 1\nnot_a_key = 1\n")
	_, err = h.layers.Load(spec, nil)
	if !errors.As(err, &le) || le.Project != nil || !errors.Is(err, policy.ErrInvalid) {
		t.Fatalf("invalid managed file: %v (project %v)", err, le.Project)
	}
	// A bad allowlist entry is an error of the context.
	write(t, h.layers.Managed, "version = 1\n")
	if _, err := h.layers.Load(spec, []string{"bad host!"}); err == nil {
		t.Error("bad allowlist entry loaded")
	}
}

// TestRulesNarrow: per-call rules are named in their source, only
// narrow (a per-call allow does not widen), and nil layers are skipped.
func TestRulesNarrow(t *testing.T) {
	h := newHost(t)
	eff := h.load(t, &sandbox.Spec{Workspace: h.ws}, nil).Current()
	call, err := Rules(policy.CallRules{Deny: []string{"Exec(curl *)"}, Allow: []string{"Net(domain:*)"}}, "exec")
	if err != nil {
		t.Fatal(err)
	}
	n, err := Narrow(eff, nil, call, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := Decide(n, nil, policy.ExecArgv("curl", "x"))
	if d.Effect != policy.Deny || d.Rule.Source() != "per-call exec deny[0]" {
		t.Errorf("curl: %s by %s", d.Effect, d.Rule.Source())
	}
	if d, _ := Decide(n, nil, policy.NetHost("example.test:443")); d.Effect != policy.Deny {
		t.Errorf("a per-call allow widened the network: %s", d.Effect)
	}
	// The same rules as a call's own, and unnamed as moat run's.
	anon, _ := Rules(policy.CallRules{Deny: []string{"Exec(curl *)"}}, "")
	if d, _ := Decide(eff, anon, policy.ExecArgv("curl", "x")); d.Effect != policy.Deny || d.Rule.Source() != "per-call deny[0]" {
		t.Errorf("call rules: %s by %s", d.Effect, d.Rule.Source())
	}
	if d, _ := Decide(eff, nil, policy.ExecArgv("curl", "x")); d.Effect != policy.Allow {
		t.Errorf("Decide changed eff: %s", d.Effect)
	}
	if _, err := Rules(policy.CallRules{Profile: policy.Trusted}, ""); err == nil {
		t.Error("per-call trusted profile accepted")
	}
	if _, err := Decide(eff, &policy.File{Layer: policy.Managed}, policy.ExecArgv("ls")); err == nil {
		t.Error("a managed layer as call rules accepted")
	}
	if r := Exec([]string{"ls", "-l"}, ""); r.String() != policy.ExecArgv("ls", "-l").String() {
		t.Errorf("Exec argv: %s", r)
	}
	if r := Exec([]string{"ignored"}, "ls | wc"); r.String() != policy.ExecShell("ls | wc").String() {
		t.Errorf("Exec shell: %s", r)
	}
}

// TestCompile: an allowed spec is compiled (a copy: the input is left
// alone; hidden paths are restricted); a bind of credentials is a
// DeniedError.
func TestCompile(t *testing.T) {
	h := newHost(t)
	spec := &sandbox.Spec{Workspace: h.ws, Binds: []sandbox.Bind{{Source: h.root + "/data", Target: "/data"}}}
	eff := h.load(t, spec, nil).Current()
	out, rep, err := Compile(eff, spec, []string{h.root + "/data"})
	if err != nil {
		t.Fatal(err)
	}
	if out == spec || rep == nil || rep.Profile != policy.Untrusted {
		t.Fatalf("compile: %+v %+v", out, rep)
	}
	if len(out.Restrict) == 0 || len(spec.Restrict) != 0 {
		t.Errorf("restrictions: out %v, in %v", out.Restrict, spec.Restrict)
	}
	bad := &sandbox.Spec{Workspace: h.ws, Binds: []sandbox.Bind{{Source: h.home + "/.ssh", Target: "/ssh"}}}
	eff = h.load(t, bad, nil).Current()
	_, _, err = Compile(eff, bad, nil)
	var de *compile.DeniedError
	if !errors.As(err, &de) || !strings.Contains(de.What, ".ssh") {
		t.Errorf("bind of ~/.ssh: %v", err)
	}
}

// TestParseNetwork: the form of a network, each error naming its list.
func TestParseNetwork(t *testing.T) {
	for _, c := range []struct {
		mode        string
		allow, deny []string
		list        string
	}{
		{"wide", nil, nil, ListMode},
		{"none", []string{"a.test"}, nil, ListBoth},
		{"open", nil, []string{"a.test"}, ListBoth},
		{"", []string{"a.test"}, nil, ListBoth},
		{"proxy", []string{""}, nil, ListAllow},
		{"proxy", nil, []string{"bad host!"}, ListDeny},
	} {
		_, err := ParseNetwork(c.mode, c.allow, c.deny, "d")
		var ne *NetError
		if !errors.As(err, &ne) || ne.List != c.list {
			t.Errorf("%+v: %v, want a %s error", c, err, c.list)
		}
	}
	n, err := ParseNetwork("", nil, nil, "d")
	if err != nil || n.Mode != sandbox.NetNone || n.Rules != nil {
		t.Errorf("default: %+v %v", n, err)
	}
	n, err = ParseNetwork("proxy", []string{"a.test", "10.0.0.0/8"}, []string{"*.evil.test"}, "network.deny_domains")
	if err != nil || n.Mode != sandbox.NetProxy || len(n.Allow) != 2 || n.Rules == nil || len(n.Rules.Rules) != 1 {
		t.Fatalf("proxy: %+v %v", n, err)
	}
	if r := n.Rules.Rules[0]; r.Effect != policy.Deny || r.Source() != "per-call network.deny_domains deny[0]" {
		t.Errorf("deny rule %s from %s", r, r.Source())
	}
	if got, err := DenyRules([]string{"a.test", "10.0.0.0/8"}); err != nil || strings.Join(got, " ") != "Net(domain:a.test) Net(cidr:10.0.0.0/8)" {
		t.Errorf("DenyRules: %q %v", got, err)
	}
	if !ListsFit(sandbox.NetProxy, []string{"a"}, []string{"b"}) || ListsFit(sandbox.NetNone, nil, []string{"b"}) || !ListsFit(sandbox.NetOpen, nil, nil) {
		t.Error("ListsFit")
	}
}

// TestNetworkPolicy: mode open only with the managed open_network; an
// address in the allowlist only inside allow_cidr_entries; an entry a
// deny rule covers is dropped.
func TestNetworkPolicy(t *testing.T) {
	h := newHost(t)
	spec := &sandbox.Spec{Workspace: h.ws}
	eff := h.load(t, spec, nil).Current()
	if !errors.Is(PermitOpen(sandbox.NetOpen, eff), ErrOpenNetwork) || PermitOpen(sandbox.NetProxy, eff) != nil || PermitOpen(sandbox.NetNone, eff) != nil {
		t.Error("mode open without open_network")
	}
	_, _, err := BoundAllow(eff, []string{"a.test", "127.0.0.1"})
	var ae *AddrError
	if !errors.As(err, &ae) || ae.Entry != "127.0.0.1" || ae.Prefix.String() != "127.0.0.1/32" || len(ae.Permitted) != 0 {
		t.Errorf("address without allow_cidr_entries: %v", err)
	}
	var ne *NetError
	if _, _, err := BoundAllow(eff, []string{""}); !errors.As(err, &ne) {
		t.Errorf("bad entry: %v", err)
	}

	write(t, h.layers.Managed, "version = 1\nopen_network = true\nallow_cidr_entries = [\"127.0.0.0/8\"]\ndeny = [\"Net(domain:*.evil.test)\"]\n")
	eff = h.load(t, spec, nil).Current()
	if err := PermitOpen(sandbox.NetOpen, eff); err != nil {
		t.Errorf("open_network = true: %v", err)
	}
	kept, dropped, err := BoundAllow(eff, []string{"a.test", "127.0.0.1", "x.evil.test"})
	if err != nil || strings.Join(kept, " ") != "a.test 127.0.0.1" || len(dropped) != 1 || dropped[0].Entry != "x.evil.test" || dropped[0].Rule == nil {
		t.Errorf("bounded: kept %q dropped %+v err %v", kept, dropped, err)
	}
	if _, _, err := BoundAllow(eff, []string{"10.0.0.1"}); !errors.As(err, &ae) || len(ae.Permitted) != 1 {
		t.Errorf("address outside allow_cidr_entries: %v", err)
	}
}

// TestAttach: the spec gets the mode; for mode proxy, an endpoint of the
// proxy as its egress, deciding with the policy given.
func TestAttach(t *testing.T) {
	h := newHost(t)
	spec := &sandbox.Spec{Workspace: h.ws, Network: sandbox.Network{Mode: sandbox.NetProxy}}
	if ep := Attach(spec, sandbox.NetNone, nil, nil); ep != nil || spec.Network.Mode != sandbox.NetNone || spec.Network.Egress != nil {
		t.Errorf("mode none: %v %+v", ep, spec.Network)
	}
	eff := h.load(t, spec, []string{"a.test"}).Current()
	np := &compile.NetPolicy{Current: func() *policy.Effective { return eff }}
	ep := Attach(spec, sandbox.NetProxy, netproxy.New(netproxy.Config{}), np)
	if ep == nil || spec.Network.Mode != sandbox.NetProxy || spec.Network.Egress != ep {
		t.Fatalf("mode proxy: %v %+v", ep, spec.Network)
	}
	defer ep.Close()
	if v := np.Decide(t.Context(), "a.test", 443); !v.Allow {
		t.Errorf("allowlisted host refused: %+v", v)
	}
	if v := np.Decide(t.Context(), "b.test", 443); v.Allow {
		t.Errorf("other host allowed: %+v", v)
	}
}
