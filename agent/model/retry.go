package model

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// statusError is an HTTP error answer, as a backend reports it (whatever
// its SDK's error type).
type statusError struct {
	Status  int
	Header  http.Header
	Message string // the provider's error message, unsanitized
}

func (e *statusError) Error() string {
	return "HTTP " + strconv.Itoa(e.Status) + ": " + e.Message
}

// protocolError is an answer that makes no sense (no choice, a broken
// accumulation).
type protocolError struct{ msg string }

func (e *protocolError) Error() string { return e.msg }

// classify turns a backend's error into a ProviderError. attemptCtx is
// the attempt's context (its deadline the attempt timeout), ctx the
// caller's; key is cut out of every message.
func classify(err error, ctx, attemptCtx context.Context, provider, key string, now time.Time) *ProviderError {
	pe := &ProviderError{Provider: provider}
	var se *statusError
	var prot *protocolError
	switch {
	case ctx.Err() != nil:
		pe.Class, pe.Message = ClassCanceled, ctx.Err().Error()
	case errors.As(err, &se):
		pe.Status = se.Status
		pe.Message = sanitize(se.Message, key)
		switch {
		case se.Status == http.StatusTooManyRequests:
			pe.Class, pe.Retryable = ClassRateLimited, true
			pe.RetryAfter = retryAfter(se.Header, now)
		case se.Status >= 500:
			pe.Class, pe.Retryable = ClassServer, true
			pe.RetryAfter = retryAfter(se.Header, now)
		default:
			pe.Class = ClassClient
		}
	case attemptCtx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
		pe.Class, pe.Retryable = ClassTimeout, true
		pe.Message = "no answer in time"
	case errors.As(err, &prot):
		pe.Class, pe.Retryable = ClassProtocol, true
		pe.Message = sanitize(prot.msg, key)
	default:
		// Transport errors (refused, reset, a stream cut short) and
		// whatever else an SDK returns without an HTTP status.
		pe.Class, pe.Retryable = ClassConnection, true
		pe.Message = sanitize(err.Error(), key)
	}
	return pe
}

// retryAfter reads the delay a provider asked for: retry-after-ms, or
// Retry-After in seconds or as an HTTP date. 0 if none or unreadable.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if h == nil {
		return 0
	}
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 && ms < 1e9 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 || s > 1e6 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// retry is the client's retry settings.
type retry struct {
	attempts int           // attempts per Complete, ≥ 1
	base     time.Duration // first backoff
	max      time.Duration // cap of a backoff and of a Retry-After
}

// backoff is the wait before round (0-based) of attempts, after every
// eligible provider failed: base·2^round with jitter (between half and
// all of it), at least what a provider asked for, capped by max.
func (r retry) backoff(round int, asked time.Duration) time.Duration {
	d := r.base
	for i := 0; i < round && d < r.max; i++ {
		d *= 2
	}
	d = min(d, r.max)
	if half := d / 2; half > 0 {
		d = half + rand.N(half+1)
	}
	if asked > d {
		d = asked
	}
	return min(d, r.max)
}
