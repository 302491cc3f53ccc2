package agent

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
)

// Errors the engine's callers branch on (the server maps them to 404, 409
// and 400). Every error of one of these cases wraps the sentinel, with the
// details in its text.
var (
	// ErrNotFound: no run of that id belongs to the tenant. A Journal's
	// LoadRun wraps it too.
	ErrNotFound = errors.New("agent run not found")
	// ErrConflict: the run is not in a state that allows the call
	// (cancelling an ended run, resuming a running one).
	ErrConflict = errors.New("agent run state conflict")
	// ErrInvalid: the agents document, the agent named or the task is not
	// valid. Every *Error of Compile wraps it.
	ErrInvalid = errors.New("invalid agents document")
	// ErrClosed: the engine is closed (the daemon is stopping).
	ErrClosed = errors.New("agent engine is closed")
)

// maxErrors bounds the errors one Compile reports; past it a last error
// says how many more were found.
const maxErrors = 50

// Error is one problem of an agents document, at its line.
type Error struct {
	// Line and Column are 1-based positions in the document (0 when the
	// problem has no position, such as an empty document).
	Line, Column int
	// Field is the field in error ("agents.coder.sandbox.limits.memory",
	// "providers.local.kind"); empty for a syntax error.
	Field string
	Msg   string
}

// Error returns "line N: field: msg" (without the parts that are unset).
func (e *Error) Error() string {
	s := ""
	if e.Line > 0 {
		s = "line " + strconv.Itoa(e.Line) + ": "
	}
	if e.Field != "" {
		s += e.Field + ": "
	}
	return s + e.Msg
}

// Unwrap returns ErrInvalid.
func (e *Error) Unwrap() error { return ErrInvalid }

// errList collects the errors of one compilation.
type errList struct {
	errs []*Error
}

// add records an error at line and column.
func (l *errList) add(line, col int, field, format string, args ...any) {
	l.errs = append(l.errs, &Error{Line: line, Column: col, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// err returns the recorded errors sorted by position and joined, or nil.
func (l *errList) err() error {
	if len(l.errs) == 0 {
		return nil
	}
	sort.SliceStable(l.errs, func(i, j int) bool {
		a, b := l.errs[i], l.errs[j]
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
	es := l.errs
	more := 0
	if len(es) > maxErrors {
		more = len(es) - maxErrors
		es = es[:maxErrors]
	}
	out := make([]error, 0, len(es)+1)
	for _, e := range es {
		out = append(out, e)
	}
	if more > 0 {
		out = append(out, &Error{Msg: fmt.Sprintf("%d more errors", more)})
	}
	return errors.Join(out...)
}
