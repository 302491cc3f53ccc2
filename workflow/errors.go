package workflow

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
)

// ErrInvalid is matched (errors.Is) by every error Compile and
// Plan.AddStep return for a document or step that is not valid.
var ErrInvalid = errors.New("invalid workflow document")

// maxErrors bounds the errors one Compile reports; past it a last error
// says how many more were found.
const maxErrors = 50

// Error is one problem of a document, at its line.
type Error struct {
	// Line and Column are 1-based positions in the document (0 when the
	// problem has no position, such as an empty document).
	Line, Column int
	// Field is the field in error, relative to its step or group
	// ("limits.memory", "needs"), or a top-level key ("defaults.env.X");
	// empty for a syntax error.
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

// empty reports whether no error was recorded.
func (l *errList) empty() bool { return len(l.errs) == 0 }

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
