package server

import (
	"sync/atomic"
	"time"
)

// Refills wait for a quiet daemon. A warm pool's refill is a whole create:
// run at the moment of a claim, it takes both CPUs of a small machine
// from the claimer's first exec (which is what the pool was meant to make
// fast). So a pool does not refill while calls are in flight, nor until
// refillQuiet has passed since the last one ended; under unbroken load it
// refills anyway after refillMaxDefer, so that a busy daemon's pools do
// not stay empty.

// Bounds of a refill's wait for a quiet daemon.
const (
	refillQuiet    = 50 * time.Millisecond
	refillMaxDefer = 2 * time.Second
)

// activity counts the API calls in flight and when the last one ended.
// Its zero value is ready to use.
type activity struct {
	inFlight atomic.Int64
	lastEnd  atomic.Int64 // time.Time.UnixNano of the last call's end
}

// begin marks a call started.
func (a *activity) begin() { a.inFlight.Add(1) }

// end marks a call ended.
func (a *activity) end() {
	a.lastEnd.Store(time.Now().UnixNano())
	a.inFlight.Add(-1)
}

// quietFor returns how much longer a refill should wait at now: 0 when no
// call is in flight and none ended within refillQuiet.
func (a *activity) quietFor(now time.Time) time.Duration {
	if a.inFlight.Load() > 0 {
		return refillQuiet
	}
	since := now.Sub(time.Unix(0, a.lastEnd.Load()))
	if since >= refillQuiet {
		return 0
	}
	return refillQuiet - since
}

// waitQuiet blocks until the daemon is quiet (quietFor is 0) or maxWait
// has passed, and reports false when stop closed first.
func (a *activity) waitQuiet(stop <-chan struct{}, maxWait time.Duration) bool {
	deadline := time.Now().Add(maxWait)
	for {
		now := time.Now()
		d := a.quietFor(now)
		if d == 0 || !now.Before(deadline) {
			return true
		}
		t := time.NewTimer(min(d, deadline.Sub(now)))
		select {
		case <-stop:
			t.Stop()
			return false
		case <-t.C:
		}
	}
}
