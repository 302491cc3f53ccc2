package output

import (
	"io"
	"unicode/utf8"
)

// JSONString writes one JSON string to an io.Writer, escaped exactly as
// encoding/json escapes a string (with HTML escaping, its default): '"',
// '\\' and control bytes escaped, '<', '>' and '&' as \u escapes, U+2028
// and U+2029 as \u escapes, each byte of invalid UTF-8 as \ufffd. Its
// bytes may come in any number of Writes; a rune split between two of
// them is encoded whole, so the result is the same as encoding their
// concatenation. It goes through one fixed buffer: a string of any
// length (6 bytes out for one in at worst) is encoded in constant memory.
type JSONString struct {
	w     io.Writer
	buf   []byte
	carry [utf8.UTFMax]byte // the start of a rune the next Write ends
	nc    int
	open  bool
	err   error
}

// jsonFlushAt leaves room for the longest escape of one rune.
const jsonFlushAt = 16

// NewJSONString returns a JSONString writing to w through a buffer of
// size bytes (at least 64).
func NewJSONString(w io.Writer, size int) *JSONString {
	return &JSONString{w: w, buf: make([]byte, 0, max(size, 64))}
}

// NewJSONStringBuffer is NewJSONString writing through buf's capacity
// (at least 64 bytes, else a buffer of 64 is made).
func NewJSONStringBuffer(w io.Writer, buf []byte) *JSONString {
	if cap(buf) < 64 {
		buf = make([]byte, 0, 64)
	}
	return &JSONString{w: w, buf: buf[:0]}
}

// Write encodes p. The error is the first of the underlying writer's.
func (j *JSONString) Write(p []byte) (int, error) {
	n := len(p)
	j.start()
	for j.nc > 0 {
		// The carried bytes come first: complete their rune (or find it
		// invalid), encode it, and go on with what is left of them.
		for j.nc < utf8.UTFMax && len(p) > 0 && !utf8.FullRune(j.carry[:j.nc]) {
			j.carry[j.nc] = p[0]
			j.nc++
			p = p[1:]
		}
		if !utf8.FullRune(j.carry[:j.nc]) {
			return n, j.err
		}
		_, size := utf8.DecodeRune(j.carry[:j.nc])
		j.escape(j.carry[:size])
		j.nc = copy(j.carry[:], j.carry[size:j.nc])
	}
	cut := incompleteTail(p)
	j.escape(p[:len(p)-cut])
	j.nc = copy(j.carry[:], p[len(p)-cut:])
	return n, j.err
}

// Close ends the string (an unfinished rune at its end is invalid) and
// flushes the buffer.
func (j *JSONString) Close() error {
	j.start()
	j.escape(j.carry[:j.nc])
	j.nc = 0
	j.buf = append(j.buf, '"')
	j.flush()
	return j.err
}

func (j *JSONString) start() {
	if !j.open {
		j.open = true
		j.buf = append(j.buf, '"')
	}
}

func (j *JSONString) flush() {
	if len(j.buf) > 0 && j.err == nil {
		_, j.err = j.w.Write(j.buf)
	}
	j.buf = j.buf[:0]
}

// incompleteTail is the length of the start of a rune that p ends with,
// which the bytes after p may complete (0 if p ends with a whole rune or
// with invalid bytes). A byte that is not a continuation byte always
// starts a rune in the decoding of the whole string.
func incompleteTail(p []byte) int {
	for k := 1; k < utf8.UTFMax && k <= len(p); k++ {
		if utf8.RuneStart(p[len(p)-k]) {
			if utf8.FullRune(p[len(p)-k:]) {
				return 0
			}
			return k
		}
	}
	return 0
}

const hexDigits = "0123456789abcdef"

// jsonSafe marks the ASCII bytes encoding/json writes as they are (with
// HTML escaping).
var jsonSafe = func() (t [utf8.RuneSelf]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\' && b != '<' && b != '>' && b != '&'
	}
	return t
}()

// escape appends src encoded, as encoding/json's appendString does with
// escapeHTML, flushing the buffer whenever less than jsonFlushAt bytes
// are left in it (the longest escape of one rune is 6 bytes).
func (j *JSONString) escape(src []byte) {
	for i := 0; i < len(src); {
		if cap(j.buf)-len(j.buf) < jsonFlushAt {
			j.flush()
		}
		b := src[i]
		if b < utf8.RuneSelf && jsonSafe[b] {
			// A run of bytes written as they are, as long as it fits.
			end := min(len(src), i+cap(j.buf)-len(j.buf)-jsonFlushAt+1)
			k := i + 1
			for k < end && src[k] < utf8.RuneSelf && jsonSafe[src[k]] {
				k++
			}
			j.buf = append(j.buf, src[i:k]...)
			i = k
			continue
		}
		if b < utf8.RuneSelf {
			switch b {
			case '\\', '"':
				j.buf = append(j.buf, '\\', b)
			case '\b':
				j.buf = append(j.buf, '\\', 'b')
			case '\f':
				j.buf = append(j.buf, '\\', 'f')
			case '\n':
				j.buf = append(j.buf, '\\', 'n')
			case '\r':
				j.buf = append(j.buf, '\\', 'r')
			case '\t':
				j.buf = append(j.buf, '\\', 't')
			default:
				j.buf = append(j.buf, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			continue
		}
		c, size := utf8.DecodeRune(src[i:])
		switch {
		case c == utf8.RuneError && size == 1:
			j.buf = append(j.buf, `\ufffd`...)
		case c == '\u2028' || c == '\u2029':
			j.buf = append(j.buf, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
		default:
			j.buf = append(j.buf, src[i:i+size]...)
		}
		i += size
	}
}
