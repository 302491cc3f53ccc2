package agent

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// clip returns s as text for the model: valid UTF-8 (invalid bytes become
// U+FFFD) and, when longer than head+tail bytes, its first head and last
// tail bytes (cut at character boundaries) with "[… N bytes elided …]"
// between them.
func clip(s string, head, tail int) string {
	if len(s) <= head+tail {
		return strings.ToValidUTF8(s, "\uFFFD")
	}
	h := s[:head]
	for n := 0; n < utf8.UTFMax && len(h) > 0 && !utf8.RuneStart(s[len(h)]); n++ {
		h = h[:len(h)-1]
	}
	t := s[len(s)-tail:]
	for n := 0; n < utf8.UTFMax && len(t) > 0 && !utf8.RuneStart(t[0]); n++ {
		t = t[1:]
	}
	elided := len(s) - len(h) - len(t)
	return strings.ToValidUTF8(h, "\uFFFD") + fmt.Sprintf("\n[… %d bytes elided …]\n", elided) + strings.ToValidUTF8(t, "\uFFFD")
}

// clipOutput is clip with the output bounds (OutputHead, OutputTail).
func clipOutput(s string) string { return clip(s, OutputHead, OutputTail) }

// capWriter keeps at most max bytes of what is written to it and counts
// all of it: a Backend's answer is bounded here whatever it sends.
type capWriter struct {
	max   int
	buf   []byte
	total int64
}

// Write keeps what fits and never fails.
func (w *capWriter) Write(p []byte) (int, error) {
	w.total += int64(len(p))
	if room := w.max - len(w.buf); room > 0 {
		w.buf = append(w.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}
