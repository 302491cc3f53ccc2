package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestAPISection: the [api] keys (issue 17, items 5 and 10) have their
// documented defaults, are read, and bad values are refused with the key.
func TestAPISection(t *testing.T) {
	if d := BuiltIn().API; d != APIDefaults() || d.MaxConnsPerClient != 1024 || d.BodyTimeout != 10*time.Second ||
		d.BodyChunk != 1<<20 || d.AuthFailBurst != 20 || d.AuthFailRate != 1 || d.AuthAuditInterval != 10*time.Second ||
		d.HeaderTimeout != 10*time.Second {
		t.Fatalf("built-in [api]: %+v", d)
	}
	d, err := Parse("t.toml", []byte(`[api]
max_conns_per_client = 0
header_timeout = "5s"
body_timeout = "30s"
body_chunk = "256KiB"
auth_fail_rate = 0.5
auth_fail_burst = 5
auth_audit_interval = "1m"
`))
	if err != nil {
		t.Fatal(err)
	}
	want := API{MaxConnsPerClient: 0, HeaderTimeout: 5 * time.Second, BodyTimeout: 30 * time.Second, BodyChunk: 256 << 10,
		AuthFailRate: 0.5, AuthFailBurst: 5, AuthAuditInterval: time.Minute}
	if d.API != want {
		t.Fatalf("[api]: %+v, want %+v", d.API, want)
	}
	for _, bad := range []string{
		"max_conns_per_client = -1", `header_timeout = "0s"`, `body_timeout = "1h"`, `body_chunk = "0"`,
		"auth_fail_rate = 0", "auth_fail_burst = 0", `auth_audit_interval = "x"`, "nope = 1",
	} {
		_, err := Parse("t.toml", []byte("[api]\n"+bad+"\n"))
		key, _, _ := strings.Cut(bad, " ")
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
