package moatd

import "testing"

func TestParseListening(t *testing.T) {
	line := `time=2026-11-21T19:11:59.375Z level=INFO msg=listening url=http://127.0.0.1:45593 token_file=/tmp/d/token data=/tmp/d`
	if got, ok := ParseListening(line); !ok || got != "http://127.0.0.1:45593" {
		t.Errorf("ParseListening = %q, %v", got, ok)
	}
	if _, ok := ParseListening(`level=INFO msg=listening url=unix:/run/moat.sock`); ok {
		t.Error("a unix socket url was taken for http")
	}
}
