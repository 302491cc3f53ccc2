package policy

import (
	"net/netip"
	"strings"
	"testing"
)

// TestAllowCIDREntries: the managed file's allow_cidr_entries (true, or
// ranges) say which addresses a caller's allowlist may name; the user's
// file cannot say it; malformed values are parse errors.
func TestAllowCIDREntries(t *testing.T) {
	ctx := Context{Workspace: "/w", Home: "/h"}
	mustParse := func(l Layer, src string) *File {
		t.Helper()
		f, err := Parse(l, "p.toml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	for _, bad := range []string{`allow_cidr_entries = "10.0.0.0/8"`, `allow_cidr_entries = ["10.0.0.1/8"]`, `allow_cidr_entries = [1]`} {
		if _, err := Parse(Managed, "p.toml", []byte("version = 1\n"+bad+"\n")); err == nil || !strings.Contains(err.Error(), "allow_cidr_entries") {
			t.Errorf("%s: %v", bad, err)
		}
	}
	eff, err := Compile(ctx, mustParse(Managed, "version = 1\nallow_cidr_entries = [\"127.0.0.0/8\", \"fd00::/8\"]\n"),
		mustParse(User, "version = 1\nallow_cidr_entries = true\n"))
	if err != nil {
		t.Fatal(err)
	}
	for pf, want := range map[string]bool{"127.0.0.1/32": true, "127.0.0.0/8": true, "127.0.0.0/7": false, "10.0.0.0/8": false,
		"fd00::1/128": true, "::1/128": false, "0.0.0.0/0": false} {
		if got := eff.PermitsCallerAddr(netip.MustParsePrefix(pf)); got != want {
			t.Errorf("%s: %v, want %v", pf, got, want)
		}
	}
	if w := strings.Join(eff.Warnings(), "\n"); !strings.Contains(w, "allow_cidr_entries: ignored") {
		t.Errorf("no warning for the user's allow_cidr_entries: %s", w)
	}
	all, _ := Compile(ctx, mustParse(Managed, "version = 1\nallow_cidr_entries = true\n"))
	none, _ := Compile(ctx, mustParse(User, "version = 1\nallow_cidr_entries = true\n"))
	if !all.PermitsCallerAddr(netip.MustParsePrefix("0.0.0.0/0")) || none.PermitsCallerAddr(netip.MustParsePrefix("127.0.0.1/32")) {
		t.Error("true in the managed file permits every address; in the user file none")
	}
	for e, want := range map[string]string{"127.1": "127.0.0.1/32", "10.0.0.0/8": "10.0.0.0/8", "cidr:::1": "::1/128", "example.com": "", "*": ""} {
		pf, ok, err := NetEntryPrefix(e)
		if err != nil || ok != (want != "") || ok && pf.String() != want {
			t.Errorf("NetEntryPrefix(%q) = %v %v %v", e, pf, ok, err)
		}
	}
}

// TestCeilNetAllow: an allowlist entry a deny rule covers entirely is
// dropped with the rule; one it covers in part is kept.
func TestCeilNetAllow(t *testing.T) {
	ctx := Context{Workspace: "/w", Home: "/h"}
	user, err := Parse(User, "u.toml", []byte("version = 1\ndeny = [\"Net(domain:*.evil.test)\", \"Net(domain:bad.test)\", \"Net(cidr:10.0.0.0/8)\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	eff, err := Compile(ctx, user)
	if err != nil {
		t.Fatal(err)
	}
	kept, dropped := eff.CeilNetAllow([]string{"ok.test", "bad.test", "a.evil.test", "*.b.evil.test", "evil.test", "*.test", "10.1.0.0/16", "10.1.2.3", "11.0.0.0/8"})
	if got := strings.Join(kept, ","); got != "ok.test,evil.test,*.test,11.0.0.0/8" {
		t.Errorf("kept %s", got)
	}
	var names []string
	for _, d := range dropped {
		names = append(names, d.Entry)
		if d.Rule == nil || !strings.Contains(d.Reason, d.Rule.String()) {
			t.Errorf("drop %+v", d)
		}
	}
	if got := strings.Join(names, ","); got != "bad.test,a.evil.test,*.b.evil.test,10.1.0.0/16,10.1.2.3" {
		t.Errorf("dropped %s", got)
	}
}

// TestWithNetAllow: the caller's allowlist is replaced, not added to.
func TestWithNetAllow(t *testing.T) {
	eff, err := Compile(Context{Workspace: "/w", Home: "/h", NetAllow: []string{"a.test"}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := eff.WithNetAllow([]string{"b.test"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		e    *Effective
		host string
		want Effect
	}{{eff, "a.test:80", Allow}, {eff, "b.test:80", Deny}, {b, "a.test:80", Deny}, {b, "b.test:80", Allow}} {
		if d := c.e.Decide(NetHost(c.host)); d.Effect != c.want {
			t.Errorf("%s: %v (%s)", c.host, d.Effect, d.Reason)
		}
	}
	if got := strings.Join(b.Context().NetAllow, ","); got != "b.test" {
		t.Errorf("context %s", got)
	}
	if _, err := eff.WithNetAllow([]string{"exa mple"}); err == nil {
		t.Error("a bad entry was taken")
	}
}
