// Package audit records what moat was asked to do and what it decided, as an
// append-only tape of JSON lines that survives a crash of the daemon.
//
// Every call that reaches the control plane produces one or more [Event]
// values: who asked (tenant and actor), on which sandbox, what was asked, the
// policy decision and the rule behind it, a summary of the result and how long
// it took. The daemon appends them to a [Tape], and the API reads them back
// with [Tape.Query].
//
// # On-disk format
//
// A tape is a directory (created with mode 0700) holding:
//
//	audit.jsonl                                     the current file
//	audit-<first seq>-<last seq>.jsonl              rotated files, oldest first
//	audit.lock                                      held (flock) while a Tape is open
//
// Files are created with mode 0600. Each line is one JSON object (an [Event])
// followed by "\n"; the sequence numbers in the rotated file names are
// zero-padded to 20 digits so that the names sort in sequence order. The
// current file is rotated when the next line would make it larger than the
// configured maximum ([WithMaxFileBytes]), and only the newest rotated files
// are kept ([WithMaxFiles]).
//
// # Durability
//
// [Tape.Append] writes each event with a single write(2) on a file opened
// with O_APPEND and returns only after fsync(2) has reported the data on
// disk, so nothing acknowledged is lost when the daemon is killed (kill -9)
// or the machine loses power. Concurrent appends share fsync calls (group
// commit). If a crash interrupts a write, the current file may end with a
// partial line; [Open] truncates it back to the last complete line and
// reports how many bytes it dropped ([Tape.DroppedBytes]). Complete lines are
// never dropped. Sequence numbers continue after the highest one found, so
// they stay unique and increasing across restarts.
//
// # Secrets
//
// Secrets must never reach the tape. Callers redact the Request and Result
// they pass in; in addition, a redactor installed with [WithRedactor] sees
// every encoded line before it is written, as a second line of defence.
//
// # Tenancy
//
// [Query.Tenant] restricts results to one tenant's events with an exact
// match. An empty Tenant means "every tenant", which only an operator may ask
// for: this package does not authenticate anyone, so the caller (the API
// layer) must set Query.Tenant to the authenticated tenant for every
// non-operator request.
package audit

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Defaults and limits of a Tape.
const (
	// DefaultMaxFileBytes is the size at which the current file is rotated
	// when no WithMaxFileBytes option is given (64 MiB).
	DefaultMaxFileBytes int64 = 64 << 20
	// DefaultMaxFiles is the number of rotated files kept when no
	// WithMaxFiles option is given.
	DefaultMaxFiles = 16
	// MaxEventBytes is the largest line (JSON and its newline) that Append
	// accepts; larger events are refused with a *TooLargeError.
	MaxEventBytes = 1 << 20
	// DefaultLimit is the number of events a Query returns when its Limit is
	// zero or negative.
	DefaultLimit = 100
	// MaxLimit is the largest number of events one Query returns; larger
	// limits are lowered to it.
	MaxLimit = 1000
)

// Decisions recorded in Event.Decision.
const (
	DecisionAllow = "allow"
	DecisionDeny  = "deny"
	DecisionAsk   = "ask"
)

// Event is one audit record. Kind should always be set; the other fields
// are optional. Seq is always assigned by the Tape, and Time when zero.
type Event struct {
	// Seq is the event's sequence number, assigned by the Tape: it starts
	// at 1, increases by one with every appended event and continues after
	// a restart.
	Seq uint64 `json:"seq"`
	// Time is when the event happened; Append sets it (UTC) when zero.
	Time time.Time `json:"time"`
	// Tenant is the tenant on whose behalf the call was made ("" for
	// operator or system events).
	Tenant string `json:"tenant"`
	// Actor is who made the call: an API token id, or "cli".
	Actor string `json:"actor"`
	// Sandbox is the id of the sandbox concerned, if any.
	Sandbox string `json:"sandbox,omitempty"`
	// Call is the id of the call or process concerned, if any.
	Call string `json:"call,omitempty"`
	// Kind says what happened, as a dotted name such as "sandbox.create",
	// "process.exec", "process.exit", "file.write" or "policy.decision".
	Kind string `json:"kind"`
	// Decision is the policy decision: "allow", "deny", "ask", or "" when
	// no decision was involved.
	Decision string `json:"decision,omitempty"`
	// Rule is the policy rule that decided, if any.
	Rule string `json:"rule,omitempty"`
	// Request is what was asked, as JSON, already redacted by the caller.
	Request json.RawMessage `json:"request,omitempty"`
	// Result is a summary of the outcome, as JSON, already redacted by the
	// caller.
	Result json.RawMessage `json:"result,omitempty"`
	// DurationMs is how long the call took, in milliseconds.
	DurationMs int64 `json:"duration_ms,omitempty"`
	// Error is the error message of a failed call.
	Error string `json:"error,omitempty"`
}

// Errors returned by a Tape. Test for them with errors.Is.
var (
	// ErrClosed is returned by the methods of a Tape after Close.
	ErrClosed = errors.New("audit: tape is closed")
	// ErrEventTooLarge is matched (errors.Is) by a *TooLargeError.
	ErrEventTooLarge = errors.New("audit: event too large")
	// ErrBadRedaction is returned by Append when the redactor returned
	// something that is not one JSON object on one line that still starts
	// with the sequence field; nothing is written.
	ErrBadRedaction = errors.New("audit: redactor output is not a single-line JSON event")
	// ErrLocked is returned by Open when another Tape (in this or another
	// process) has the directory open.
	ErrLocked = errors.New("audit: tape directory is in use")
	// ErrBroken is matched (errors.Is) by the errors of a Tape that can no
	// longer guarantee durability, after a failed fsync or a write that
	// could not be undone. Close it and Open it again to recover.
	ErrBroken = errors.New("audit: tape is broken")
)

// TooLargeError is returned by Append for an event whose encoded line is
// larger than MaxEventBytes. It matches ErrEventTooLarge with errors.Is.
type TooLargeError struct {
	// Size is the size of the encoded line, newline included.
	Size int
	// Limit is the largest size accepted.
	Limit int
}

// Error implements error.
func (e *TooLargeError) Error() string {
	return fmt.Sprintf("audit: event of %d bytes exceeds the limit of %d bytes", e.Size, e.Limit)
}

// Unwrap returns ErrEventTooLarge.
func (e *TooLargeError) Unwrap() error { return ErrEventTooLarge }

// brokenError wraps the cause of a broken tape so that it matches both
// ErrBroken and the cause.
type brokenError struct{ cause error }

func (e *brokenError) Error() string   { return "audit: tape is broken: " + e.cause.Error() }
func (e *brokenError) Unwrap() []error { return []error{ErrBroken, e.cause} }

// Option configures Open.
type Option func(*config) error

type config struct {
	maxFileBytes int64
	maxFiles     int
	now          func() time.Time
	redact       func([]byte) []byte
}

func defaultConfig() config {
	return config{
		maxFileBytes: DefaultMaxFileBytes,
		maxFiles:     DefaultMaxFiles,
		now:          time.Now,
	}
}

// WithMaxFileBytes sets the size above which the current file is rotated: a
// line that would make the current file larger than n bytes goes to a new
// file instead (a line is never split, so a file holding a single line may
// be larger). n must be positive. The default is DefaultMaxFileBytes.
func WithMaxFileBytes(n int64) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("audit: max file bytes must be positive, got %d", n)
		}
		c.maxFileBytes = n
		return nil
	}
}

// WithMaxFiles sets how many rotated files are kept; older ones are deleted.
// n must be at least 1, so that the last sequence number survives a restart
// right after a rotation. The default is DefaultMaxFiles.
func WithMaxFiles(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("audit: max files must be at least 1, got %d", n)
		}
		c.maxFiles = n
		return nil
	}
}

// WithClock sets the clock used to time-stamp events whose Time is zero
// (for tests). nil means time.Now.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			now = time.Now
		}
		c.now = now
		return nil
	}
}

// WithRedactor installs a function applied to every encoded line (the JSON
// object, without its newline) before it is written, typically to replace
// known secret values. It may modify its argument in place. Its result must
// still be one valid JSON object on one line, starting with the "seq" field
// as encoded; otherwise Append fails with ErrBadRedaction and writes
// nothing. It is called concurrently from concurrent appends. nil means no
// redactor.
func WithRedactor(redact func([]byte) []byte) Option {
	return func(c *config) error {
		c.redact = redact
		return nil
	}
}
