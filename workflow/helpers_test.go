package workflow

import (
	"errors"
	"strings"
	"testing"
)

// doc joins lines into a document: line i+1 of the document is lines[i],
// so that a test reads its error lines off the listing.
func doc(lines ...string) []byte {
	return []byte(strings.Join(lines, "\n") + "\n")
}

// errorsOf returns the *Error values joined in err.
func errorsOf(t *testing.T, err error) []*Error {
	t.Helper()
	if err == nil {
		return nil
	}
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("error does not match ErrInvalid: %v", err)
	}
	var list []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	} else {
		list = []error{err}
	}
	var out []*Error
	for _, e := range list {
		var we *Error
		if !errors.As(e, &we) {
			t.Fatalf("joined error %T is not an *Error: %v", e, e)
		}
		out = append(out, we)
	}
	return out
}

// mustCompile compiles data or fails the test.
func mustCompile(t *testing.T, data []byte) *Plan {
	t.Helper()
	p, err := Compile(data, Options{CPUs: 4})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return p
}

// waitsOf maps each step of p to its Waits joined by commas.
func waitsOf(p *Plan) map[string]string {
	m := make(map[string]string, len(p.Steps))
	for _, s := range p.Steps {
		m[s.ID] = strings.Join(s.Waits, ",")
	}
	return m
}
