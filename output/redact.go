package output

import (
	"bytes"
	"io"
	"sort"
)

// Redactor replaces secret values in a stream with "[REDACTED:NAME]"
// before it reaches w. It holds back at most the longest secret's length
// minus one byte between writes, so a value split across writes is still
// caught; Flush writes the held-back bytes at the end of the stream. It is
// not safe for concurrent use (one stream, one copier).
type Redactor struct {
	w       io.Writer
	secrets []redaction
	maxLen  int
	pending []byte
	out     []byte
}

type redaction struct {
	value  []byte
	marker []byte
}

// NewRedactor returns w itself when there is nothing to redact.
func NewRedactor(w io.Writer, secrets map[string][]byte) io.Writer {
	r := &Redactor{w: w}
	for name, v := range secrets {
		if len(v) == 0 {
			continue
		}
		r.secrets = append(r.secrets, redaction{value: v, marker: []byte("[REDACTED:" + name + "]")})
		r.maxLen = max(r.maxLen, len(v))
	}
	if len(r.secrets) == 0 {
		return w
	}
	// Longest first: at one position, the longer secret wins.
	sort.Slice(r.secrets, func(i, j int) bool { return len(r.secrets[i].value) > len(r.secrets[j].value) })
	return r
}

// Write redacts p (with what was held back) and passes on all but a tail
// that could still be the start of a secret.
func (r *Redactor) Write(p []byte) (int, error) {
	r.pending = append(r.pending, p...)
	return len(p), r.process(false)
}

// Flush passes on what is held back; call it at the end of the stream.
func (r *Redactor) Flush() error { return r.process(true) }

func (r *Redactor) process(final bool) error {
	data := r.pending
	out := r.out[:0]
	i := 0
	for i < len(data) {
		at, which := -1, -1
		for k, s := range r.secrets {
			if j := bytes.Index(data[i:], s.value); j >= 0 && (at < 0 || i+j < at) {
				at, which = i+j, k
			}
		}
		if at < 0 {
			break
		}
		out = append(out, data[i:at]...)
		out = append(out, r.secrets[which].marker...)
		i = at + len(r.secrets[which].value)
	}
	keep := 0
	if !final {
		keep = min(len(data)-i, r.maxLen-1)
	}
	out = append(out, data[i:len(data)-keep]...)
	r.pending = append(r.pending[:0], data[len(data)-keep:]...)
	r.out = out
	if len(out) == 0 {
		return nil
	}
	_, err := r.w.Write(out)
	return err
}
