package api_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/policy"
)

// Package api mirrors two types of the engines as plain structs, so that
// its users do not compile the engines; the server converts between them.
// These tests keep each mirror's JSON the engine's: the same fields, in the
// same order, with the same names, options and types.

// sameJSON marshals the plain and the engine's value and wants the same
// bytes; it then decodes the engine's JSON into a new plain value and
// wants the same bytes again.
func sameJSON[P any](t *testing.T, name string, plain P, engine any) {
	t.Helper()
	p, err := json.Marshal(plain)
	if err != nil {
		t.Fatal(err)
	}
	e, err := json.Marshal(engine)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p, e) {
		t.Fatalf("%s: the wire type and the engine's marshal differently:\n api:    %s\n engine: %s", name, p, e)
	}
	var back P
	if err := json.Unmarshal(e, &back); err != nil {
		t.Fatalf("%s: the engine's JSON does not decode into the wire type: %v", name, err)
	}
	again, err := json.Marshal(back)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, e) {
		t.Fatalf("%s: the engine's JSON does not survive the wire type:\n engine: %s\n api:    %s", name, e, again)
	}
}

// sameFields compares the struct types field by field: json tag, and the
// kind of the type (a named string type of the engine, such as
// policy.Profile, is a string in api).
func sameFields(t *testing.T, plain, engine reflect.Type) {
	t.Helper()
	if plain.NumField() != engine.NumField() {
		t.Fatalf("%s has %d fields, %s %d", plain, plain.NumField(), engine, engine.NumField())
	}
	for i := range plain.NumField() {
		p, e := plain.Field(i), engine.Field(i)
		if p.Name != e.Name || p.Tag.Get("json") != e.Tag.Get("json") || !sameType(p.Type, e.Type) {
			t.Errorf("field %d: %s.%s %s `json:%q`; %s.%s %s `json:%q`", i,
				plain, p.Name, p.Type, p.Tag.Get("json"), engine, e.Name, e.Type, e.Tag.Get("json"))
		}
	}
}

func sameType(p, e reflect.Type) bool {
	if p == e {
		return true
	}
	if p.Kind() != e.Kind() {
		return false
	}
	switch p.Kind() {
	case reflect.Slice, reflect.Pointer:
		return sameType(p.Elem(), e.Elem())
	case reflect.Struct, reflect.Map, reflect.Interface:
		return false
	}
	// Scalars of the same kind: the engine's may be a named type.
	return p.PkgPath() == "" || p.PkgPath() == e.PkgPath()
}

func TestCallRulesMirrorsPolicy(t *testing.T) {
	sameFields(t, reflect.TypeFor[api.CallRules](), reflect.TypeFor[policy.CallRules]())
	full := policy.CallRules{Profile: policy.Untrusted, Allow: []string{"Exec(ls *)"},
		Ask: []string{"Exec(git push*)", "Write(src/**)"}, Deny: []string{"Read(~/.ssh/**)"}}
	sameJSON(t, "CallRules", api.CallRules{Profile: "untrusted", Allow: []string{"Exec(ls *)"},
		Ask: []string{"Exec(git push*)", "Write(src/**)"}, Deny: []string{"Read(~/.ssh/**)"}}, full)
	sameJSON(t, "CallRules (empty)", api.CallRules{}, policy.CallRules{})
	// Inside the bodies that carry it.
	sameJSON(t, "Exec.policy", api.Exec{Sandbox: "sb", Args: []string{"true"}, Policy: &api.CallRules{Deny: full.Deny}},
		struct {
			Sandbox string            `json:"sandbox"`
			Args    []string          `json:"args"`
			Policy  *policy.CallRules `json:"policy,omitempty"`
		}{"sb", []string{"true"}, &policy.CallRules{Deny: full.Deny}})
}

func TestAuditEventMirrorsAudit(t *testing.T) {
	sameFields(t, reflect.TypeFor[api.AuditEvent](), reflect.TypeFor[audit.Event]())
	full := audit.Event{Seq: 42, Time: time.Date(2025, 3, 4, 5, 6, 7, 891011121, time.UTC), Tenant: "acme",
		Actor: "token:1234abcd", Sandbox: "sb-1", Call: "c-7", Kind: "process.exec", Decision: audit.DecisionDeny,
		Rule: "deny Exec(git push*) (user ~/.config/moat/policy.toml:3)", Request: json.RawMessage(`{"args":["git","push"],"env":["HOME"]}`),
		Result: json.RawMessage(`{"exit_code":1,"policy":{"effect":"deny"}}`), DurationMs: 12, Error: "policy_denied: <no> & \"quotes\""}
	sameJSON(t, "AuditEvent", api.AuditEvent(full), full)
	sameJSON(t, "AuditEvent (empty)", api.AuditEvent{}, audit.Event{})
	sameJSON(t, "AuditPage", api.AuditPage{Events: []api.AuditEvent{api.AuditEvent(full)}, More: true},
		struct {
			Events []audit.Event `json:"events"`
			More   bool          `json:"more"`
		}{[]audit.Event{full}, true})
}
