package netproxy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/output"
)

// TestRedactRefusal: with Config.Redact, a secret in a refused host name
// is in neither the event nor the 403 body the client reads, although
// the proxy lower-cased it. The control is the same request without
// Redact, whose body and event do carry the lower-cased value.
func TestRedactRefusal(t *testing.T) {
	const secret = "Hunter2-Proxy-Tok"
	m := output.NewMatcher(map[string][]byte{"T": []byte(secret + "\n")})
	for _, redact := range []bool{false, true} {
		e := newEnv(t, func(c *Config) {
			if redact {
				c.Redact = m.RedactString
			}
		})
		e.pol.set(func(f *fakePolicy) { f.allowAll = false })
		resp := e.raw(fmt.Sprintf("GET http://%s.example/ HTTP/1.1\r\nHost: %s.example\r\n\r\n", secret, secret))
		body := readBody(t, resp)
		ev := e.events.wait(t, "deny", isDeny(CodeDenied))
		seen := strings.ToLower(body + ev.Host + ev.Reason + ev.Addr + ev.Rule)
		leaked := strings.Contains(seen, strings.ToLower(secret))
		if resp.StatusCode != 403 || leaked == redact {
			t.Fatalf("redact %v: status %d, body %q, event %+v", redact, resp.StatusCode, body, ev)
		}
		if redact && (!strings.Contains(body, "[REDACTED:T]") || ev.Host != "[REDACTED:T].example") {
			t.Fatalf("redacted: body %q, event host %q", body, ev.Host)
		}
	}
}
