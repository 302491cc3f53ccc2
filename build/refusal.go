package build

import (
	"errors"
	"fmt"
)

// Refusal is a build refused before anything ran: Reason is one of the
// api.ReasonSource* codes (the build's status is refused), Message says
// why in words, naming the entry of the source (quoted: never a raw
// control character).
type Refusal struct {
	Reason  string
	Message string
}

// Error returns the reason and the message.
func (r *Refusal) Error() string { return r.Reason + ": " + r.Message }

// AsRefusal returns the Refusal err is or wraps, if any.
func AsRefusal(err error) (*Refusal, bool) {
	var r *Refusal
	if errors.As(err, &r) {
		return r, true
	}
	return nil, false
}

// refuse returns a Refusal with a formatted message.
func refuse(reason, format string, args ...any) *Refusal {
	return &Refusal{Reason: reason, Message: fmt.Sprintf(format, args...)}
}
