package model

import (
	"net/http"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		h    http.Header
		want time.Duration
	}{
		{nil, 0},
		{http.Header{"Retry-After": {"3"}}, 3 * time.Second},
		{http.Header{"Retry-After": {"0.5"}}, 500 * time.Millisecond},
		{http.Header{"Retry-After": {"-1"}}, 0},
		{http.Header{"Retry-After": {"soon"}}, 0},
		{http.Header{"Retry-After": {now.Add(7 * time.Second).Format(http.TimeFormat)}}, 7 * time.Second},
		{http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"9"}}, 250 * time.Millisecond},
	} {
		if got := retryAfter(tc.h, now); got != tc.want {
			t.Errorf("%v: %v, want %v", tc.h, got, tc.want)
		}
	}
}

func TestBackoff(t *testing.T) {
	r := retry{attempts: 5, base: 100 * time.Millisecond, max: time.Second}
	for round := range 8 {
		full := min(r.base<<round, r.max)
		for range 50 {
			d := r.backoff(round, 0)
			if d < full/2 || d > full {
				t.Fatalf("round %d: %v outside [%v, %v]", round, d, full/2, full)
			}
		}
	}
	if d := r.backoff(0, 700*time.Millisecond); d != 700*time.Millisecond {
		t.Errorf("Retry-After 700ms: waited %v", d)
	}
	if d := r.backoff(0, time.Hour); d != time.Second {
		t.Errorf("Retry-After 1h: waited %v, want the cap", d)
	}
}

func TestSanitize(t *testing.T) {
	got := sanitize("key sk-1 in\nbody"+string(make([]byte, 400)), "sk-1")
	if len(got) > maxMessage+len("…") || got[:len("key [redacted] in body")] != "key [redacted] in body" {
		t.Errorf("sanitize = %q", got)
	}
}
