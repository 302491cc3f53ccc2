package sandbox

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestEnforcementLookup: a listed protection is found with its detail; an
// absent one (or any name in an empty report) is not.
func TestEnforcementLookup(t *testing.T) {
	e := Enforcement{Runtime: "linux", Protections: []Protection{
		{Name: "user_namespace", Detail: "uid map 0:1073741824:65536"},
		{Name: "seccomp", Detail: "filter"},
	}}
	if p, ok := e.Lookup("seccomp"); !ok || p.Detail != "filter" {
		t.Errorf("Lookup(seccomp) = %+v, %v", p, ok)
	}
	if p, ok := e.Lookup("net_namespace"); ok {
		t.Errorf("Lookup of an absent protection = %+v, true", p)
	}
	if _, ok := (Enforcement{}).Lookup("seccomp"); ok {
		t.Error("an empty report has a protection")
	}
}

// TestEnforcementJSON: the wire form has the common fields and the
// protections as a list of {name, detail}, and none of the Linux facts
// as fields of their own.
func TestEnforcementJSON(t *testing.T) {
	e := Enforcement{Runtime: "linux", User: UID, Network: "none", Protections: []Protection{{Name: "landlock", Detail: "ABI 7"}}}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{`"runtime":"linux"`, `"user":1000`, `"network":"none"`, `"protections":[{"name":"landlock","detail":"ABI 7"}]`} {
		if !strings.Contains(got, want) {
			t.Errorf("%s lacks %s", got, want)
		}
	}
	for _, old := range []string{"landlock_abi", "namespaces", "no_new_privs", "pivot_root"} {
		if strings.Contains(got, old) {
			t.Errorf("%s still has %s", got, old)
		}
	}
	var back Enforcement
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if p, ok := back.Lookup("landlock"); !ok || p.Detail != "ABI 7" {
		t.Errorf("after a round trip: %+v", back)
	}
}
