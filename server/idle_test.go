package server

import (
	"testing"
	"time"
)

// TestActivityQuiet checks when a pool's refill may run: not while a call
// is in flight, not within refillQuiet of the last call's end, at once
// on a daemon that has had no call.
func TestActivityQuiet(t *testing.T) {
	var a activity
	now := time.Now()
	if d := a.quietFor(now); d != 0 {
		t.Fatalf("no call yet: wait %v, want 0", d)
	}
	a.begin()
	if d := a.quietFor(now); d != refillQuiet {
		t.Fatalf("a call in flight: wait %v, want %v", d, refillQuiet)
	}
	a.end()
	ended := time.Unix(0, a.lastEnd.Load())
	if d := a.quietFor(ended.Add(refillQuiet / 5)); d <= 0 || d > refillQuiet {
		t.Fatalf("just after a call: wait %v, want in (0, %v]", d, refillQuiet)
	}
	if d := a.quietFor(ended.Add(refillQuiet)); d != 0 {
		t.Fatalf("quiet for refillQuiet: wait %v, want 0", d)
	}
}

// TestActivityWaitQuiet checks that waitQuiet ends at maxWait under
// unbroken load, and reports false when stopped.
func TestActivityWaitQuiet(t *testing.T) {
	var a activity
	a.begin()
	defer a.end()
	start := time.Now()
	if !a.waitQuiet(make(chan struct{}), 10*time.Millisecond) {
		t.Fatal("waitQuiet under load: false, want true after maxWait")
	}
	if took := time.Since(start); took < 10*time.Millisecond {
		t.Fatalf("waitQuiet under load returned after %v, before maxWait", took)
	}
	stop := make(chan struct{})
	close(stop)
	if a.waitQuiet(stop, time.Hour) {
		t.Fatal("waitQuiet after stop: true, want false")
	}
}
