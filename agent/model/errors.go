package model

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"
)

var (
	// ErrNoProvider is wrapped by Complete's error when no provider serves
	// the request's alias with all its tags. Nothing was sent anywhere.
	ErrNoProvider = errors.New("no eligible model provider")
	// ErrInvalidRequest is wrapped by Complete's error when the request
	// itself is malformed (an unknown role, a tool schema or tool call
	// arguments that are not JSON). Nothing was sent anywhere.
	ErrInvalidRequest = errors.New("invalid model request")
)

// ErrorClass sorts an attempt's failure for metrics, audit and the retry
// decision.
type ErrorClass string

// Classes of ErrorClass.
const (
	ClassNone        ErrorClass = ""             // success
	ClassRateLimited ErrorClass = "rate_limited" // HTTP 429: retried
	ClassServer      ErrorClass = "server_error" // HTTP 5xx: retried
	ClassTimeout     ErrorClass = "timeout"      // the attempt's time ran out: retried
	ClassConnection  ErrorClass = "connection"   // no answer, a broken stream: retried
	ClassProtocol    ErrorClass = "protocol"     // an answer that makes no sense: retried
	ClassClient      ErrorClass = "client_error" // another HTTP 4xx: not retried
	ClassCanceled    ErrorClass = "canceled"     // the caller's context ended
	ClassNoProvider  ErrorClass = "no_provider"  // nothing eligible: nothing sent
)

// ProviderError is a failed attempt at one provider. Its text is moat's,
// with the provider's message shortened and the API key cut out: it never
// holds the key.
type ProviderError struct {
	// Provider is the provider's name.
	Provider string
	// Status is the HTTP status of the answer (0: none).
	Status int
	// Retryable says whether another attempt (at this provider or
	// another eligible one) may succeed.
	Retryable bool
	// Class is the failure's class.
	Class ErrorClass
	// Message is what the provider said (or the transport error), at most
	// 300 bytes, without control characters or the key.
	Message string
	// RetryAfter is the delay the provider asked for (Retry-After), 0 if
	// none.
	RetryAfter time.Duration
}

// Error implements error.
func (e *ProviderError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "model provider %q: ", e.Provider)
	if e.Status != 0 {
		fmt.Fprintf(&b, "HTTP %d %s", e.Status, http.StatusText(e.Status))
	} else {
		b.WriteString(string(e.Class))
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// maxMessage bounds ProviderError.Message.
const maxMessage = 300

// sanitize makes a provider's message fit for an error: the key (and
// before shortening) replaced, control characters dropped, shortened.
func sanitize(msg, key string) string {
	if key != "" {
		msg = strings.ReplaceAll(msg, key, "[redacted]")
	}
	msg = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, msg)
	msg = strings.TrimSpace(msg)
	if len(msg) > maxMessage {
		cut := maxMessage
		for cut > 0 && !utf8Start(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "…"
	}
	return msg
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }
