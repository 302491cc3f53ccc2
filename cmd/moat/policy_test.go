package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/policy"
)

// TestPolicyCheck: valid files pass; every problem of an invalid file is
// named with its line; exit 1 for an invalid file, 125 for bad usage.
func TestPolicyCheck(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.toml")
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(good, []byte("version = 1\nprofile = \"trusted\"\nallow = [\"Exec(npm run *)\"]\ndeny = [\n  \"Read(~/.ssh/**)\",\n]\n"), 0o644)
	os.WriteFile(bad, []byte("version = 1\ndeny = [\n  \"Read(~/.ssh/**)\",\n  \"Exec(\",\n]\nprofil = \"x\"\n"), 0o644)
	o := testutil.Exec(t, "policy", "check", good)
	if o.Code != 0 || !strings.Contains(o.Stdout, "ok (version 1, profile trusted, 2 rules)") {
		t.Fatalf("good file: %d %q %q", o.Code, o.Stdout, o.Stderr)
	}
	o = testutil.Exec(t, "policy", "check", good, bad)
	if o.Code != 1 || !strings.Contains(o.Stdout, "bad.toml:4: deny: Exec(: unterminated pattern") || !strings.Contains(o.Stdout, "bad.toml:6:") {
		t.Fatalf("bad file: %d %q", o.Code, o.Stdout)
	}
	for _, args := range [][]string{{"policy"}, {"policy", "check"}, {"policy", "check", filepath.Join(dir, "missing")}, {"policy", "frob"}} {
		if o := testutil.Exec(t, args...); o.Code != 125 || o.Stderr == "" {
			t.Errorf("%v: %d %q", args, o.Code, o.Stderr)
		}
	}
}

// TestPolicyExplain: the layers decide as documented, and each decision
// names its rule.
func TestPolicyExplain(t *testing.T) {
	ws, home := t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(ws, ".moat"), 0o755)
	os.WriteFile(filepath.Join(ws, ".moat", "policy.toml"), []byte("version = 1\nask = [\"Exec(git push*)\"]\ndeny = [\"Read(secrets/**)\"]\n"), 0o644)
	o := testutil.Exec(t, "policy", "explain", "--json", "-w", ws, "--home", home, "--no-managed", "--no-user",
		"--deny", "Exec(curl *)",
		"Exec(make && /usr/bin/git push origin)", "Read(secrets/a)", "Write(.git/hooks/pre-commit)", "Exec(curl https://x)", "Exec(ls)", "Net(github.com)")
	if o.Code != 0 {
		t.Fatalf("explain: %d %s", o.Code, o.Stderr)
	}
	var ex policy.Explanation
	if err := json.Unmarshal([]byte(o.Stdout), &ex); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		effect policy.Effect
		rule   string
	}{
		{policy.Ask, "Exec(git push*)"}, {policy.Deny, "Read(secrets/**)"}, {policy.Deny, ".git is read-only"},
		{policy.Deny, "Exec(curl *)"}, {policy.Allow, "default"}, {policy.Deny, "not on the network allowlist"},
	}
	if len(ex.Decisions) != len(want) {
		t.Fatalf("%d decisions", len(ex.Decisions))
	}
	for i, w := range want {
		d := ex.Decisions[i]
		if d.Effect != w.effect || d.Rule == nil || !strings.Contains(d.Rule.Text, w.rule) || d.Reason == "" {
			t.Errorf("decision %d: %v %+v %q, want %v by %q", i, d.Effect, d.Rule, d.Reason, w.effect, w.rule)
		}
	}
	// A per-call allow cannot lift the project's deny.
	o = testutil.Exec(t, "policy", "explain", "--json", "-w", ws, "--home", home, "--no-managed", "--no-user", "--allow", "Read(secrets/**)", "Read(secrets/a)")
	if err := json.Unmarshal([]byte(o.Stdout), &ex); err != nil || ex.Decisions[0].Effect != policy.Deny {
		t.Fatalf("per-call allow widened the policy: %s %v", o.Stdout, err)
	}
	if o := testutil.Exec(t, "policy", "explain", "-w", ws, "--home", home, "Frob(x)"); o.Code != 125 {
		t.Fatalf("bad request: %d", o.Code)
	}
}
