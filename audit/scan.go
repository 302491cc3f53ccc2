package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// parseEvent decodes one line. Lines that are not a JSON event with a
// positive sequence number are malformed.
func parseEvent(line []byte) (Event, bool) {
	var e Event
	if len(line) == 0 || line[0] != '{' {
		return Event{}, false
	}
	if err := json.Unmarshal(line, &e); err != nil || e.Seq == 0 {
		return Event{}, false
	}
	return e, true
}

// lineReader splits a stream into lines of at most max bytes (newline
// excluded). Longer lines are skipped without being buffered whole.
type lineReader struct {
	r   *bufio.Reader
	buf []byte
	max int
}

func newLineReader(r io.Reader) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 64<<10), max: MaxEventBytes}
}

// next returns the next line without its newline, valid until the next
// call. tooLong reports a line that exceeded the maximum (line is then nil).
// A last line without newline is returned too. At the end it returns io.EOF.
func (lr *lineReader) next() (line []byte, tooLong bool, err error) {
	lr.buf = lr.buf[:0]
	for {
		chunk, err := lr.r.ReadSlice('\n')
		if !tooLong {
			if len(lr.buf)+len(chunk) > lr.max+1 {
				tooLong = true
				lr.buf = lr.buf[:0]
			} else {
				lr.buf = append(lr.buf, chunk...)
			}
		}
		switch {
		case err == nil:
			if tooLong {
				return nil, true, nil
			}
			return lr.buf[:len(lr.buf)-1], false, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if tooLong {
				return nil, true, nil
			}
			if len(lr.buf) == 0 {
				return nil, false, io.EOF
			}
			return lr.buf, false, nil
		default:
			return nil, false, err
		}
	}
}

// repairTail makes f end with a complete line: when its last byte is not a
// newline, it truncates f after the last newline (or to empty) and syncs it.
// It returns the resulting size and the number of bytes dropped.
func repairTail(f *os.File) (size, dropped int64, err error) {
	st, err := f.Stat()
	if err != nil {
		return 0, 0, fmt.Errorf("audit: %w", err)
	}
	size = st.Size()
	if size == 0 {
		return 0, 0, nil
	}
	var last [1]byte
	if _, err := f.ReadAt(last[:], size-1); err != nil {
		return 0, 0, fmt.Errorf("audit: read %s: %w", f.Name(), err)
	}
	if last[0] == '\n' {
		return size, 0, nil
	}
	nl, err := lastNewline(f, size)
	if err != nil {
		return 0, 0, err
	}
	keep := nl + 1 // 0 when there is no newline at all
	if err := f.Truncate(keep); err != nil {
		return 0, 0, fmt.Errorf("audit: repair %s: %w", f.Name(), err)
	}
	if err := f.Sync(); err != nil {
		return 0, 0, fmt.Errorf("audit: repair %s: %w", f.Name(), err)
	}
	return keep, size - keep, nil
}

// lastNewline returns the offset of the last '\n' in f[0:size], or -1.
func lastNewline(f *os.File, size int64) (int64, error) {
	buf := make([]byte, 64<<10)
	end := size
	for end > 0 {
		start := max(0, end-int64(len(buf)))
		b := buf[:end-start]
		if _, err := f.ReadAt(b, start); err != nil {
			return 0, fmt.Errorf("audit: read %s: %w", f.Name(), err)
		}
		if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
			return start + int64(i), nil
		}
		end = start
	}
	return -1, nil
}

// seqRange returns the first and the highest sequence number of the valid
// events in f[0:size] (0 when none). size is the end of a complete line.
func seqRange(f *os.File, size int64) (first, last uint64, err error) {
	if size == 0 {
		return 0, 0, nil
	}
	// First: the first valid line from the start.
	lr := newLineReader(io.NewSectionReader(f, 0, size))
	for {
		line, tooLong, err := lr.next()
		if errors.Is(err, io.EOF) {
			return 0, 0, nil // no valid event at all
		}
		if err != nil {
			return 0, 0, fmt.Errorf("audit: read %s: %w", f.Name(), err)
		}
		if tooLong {
			continue
		}
		if e, ok := parseEvent(line); ok {
			first = e.Seq
			break
		}
	}
	// Last: normally the last line, which is within the tail window.
	w := min(size, int64(MaxEventBytes)+1)
	tail := make([]byte, w)
	if _, err := f.ReadAt(tail, size-w); err != nil {
		return 0, 0, fmt.Errorf("audit: read %s: %w", f.Name(), err)
	}
	tail = tail[:len(tail)-1] // the final newline
	if i := bytes.LastIndexByte(tail, '\n'); i >= 0 || size-w == 0 {
		if e, ok := parseEvent(tail[i+1:]); ok && e.Seq >= first {
			return first, e.Seq, nil
		}
	}
	// Slow path, when the file ends with garbage: the highest number seen.
	last = first
	lr = newLineReader(io.NewSectionReader(f, 0, size))
	for {
		line, tooLong, err := lr.next()
		if errors.Is(err, io.EOF) {
			return first, last, nil
		}
		if err != nil {
			return 0, 0, fmt.Errorf("audit: read %s: %w", f.Name(), err)
		}
		if tooLong {
			continue
		}
		if e, ok := parseEvent(line); ok {
			last = max(last, e.Seq)
		}
	}
}
