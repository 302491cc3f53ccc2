package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

const (
	currentName = "audit.jsonl"
	nextName    = "audit.jsonl.next"
	lockName    = "audit.lock"
	segPrefix   = "audit-"
	segSuffix   = ".jsonl"
)

// seqZero is how every encoded event starts before its sequence number is
// filled in; Append replaces the "0" with the real number.
var seqZero = []byte(`{"seq":0,`)

// segment is a rotated file and the sequence range its name announces.
type segment struct {
	name        string
	first, last uint64
}

// Tape is an append-only audit log in one directory. It is safe for
// concurrent use. Only one Tape may have a directory open at a time.
type Tape struct {
	dir     string
	cfg     config
	lock    *os.File
	dropped int64

	mu       sync.Mutex
	cond     sync.Cond // on mu; signalled when an fsync ends or the tape closes
	f        *os.File  // the current file, O_APPEND
	size     int64     // bytes of complete lines in f
	seq      uint64    // last sequence number written
	curFirst uint64    // first sequence number in f, 0 if none
	rotated  []segment // oldest first
	written  uint64    // number of writes so far (group-commit generation)
	synced   uint64    // writes known to be on disk
	syncing  bool      // an fsync runs outside mu
	err      error     // sticky *brokenError
	closed   bool
}

// Open opens the tape in dir, creating the directory (mode 0700) and the
// current file (mode 0600) when missing. It repairs a partial last line left
// by a crash (see DroppedBytes), continues the sequence after the highest
// number found, and deletes rotated files beyond the configured maximum. It
// fails with ErrLocked when another Tape has dir open.
func Open(dir string, opts ...Option) (*Tape, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if dir == "" {
		return nil, errors.New("audit: empty directory name")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	lock, err := lockDir(filepath.Join(dir, lockName))
	if err != nil {
		return nil, err
	}
	t := &Tape{dir: dir, cfg: cfg, lock: lock}
	t.cond.L = &t.mu
	if err := t.open(); err != nil {
		if t.f != nil {
			t.f.Close()
		}
		unlockDir(lock)
		return nil, err
	}
	return t, nil
}

func (t *Tape) open() error {
	// A crash in the middle of a rotation may leave an empty next file.
	if err := os.Remove(filepath.Join(t.dir, nextName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("audit: %w", err)
	}
	segs, err := listSegments(t.dir)
	if err != nil {
		return err
	}
	t.rotated = segs
	f, err := os.OpenFile(filepath.Join(t.dir, currentName), os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	t.f = f
	if err := f.Chmod(0o600); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	size, dropped, err := repairTail(f)
	if err != nil {
		return err
	}
	t.size, t.dropped = size, dropped
	first, last, err := seqRange(f, size)
	if err != nil {
		return err
	}
	t.curFirst, t.seq = first, last
	for _, s := range segs {
		t.seq = max(t.seq, s.last)
	}
	if err := syncDir(t.dir); err != nil {
		return fmt.Errorf("audit: sync directory: %w", err)
	}
	t.prune()
	return nil
}

// listSegments returns the rotated files of dir, oldest first.
func listSegments(dir string) ([]segment, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	var segs []segment
	for _, de := range ents {
		if !de.Type().IsRegular() {
			continue
		}
		if s, ok := parseSegmentName(de.Name()); ok {
			segs = append(segs, s)
		}
	}
	slices.SortFunc(segs, func(a, b segment) int {
		if c := cmpU64(a.first, b.first); c != 0 {
			return c
		}
		if c := cmpU64(a.last, b.last); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	return segs, nil
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// parseSegmentName parses "audit-<first>-<last>[-<n>].jsonl".
func parseSegmentName(name string) (segment, bool) {
	rest, ok := strings.CutPrefix(name, segPrefix)
	if !ok {
		return segment{}, false
	}
	rest, ok = strings.CutSuffix(rest, segSuffix)
	if !ok {
		return segment{}, false
	}
	parts := strings.Split(rest, "-")
	if len(parts) < 2 || len(parts) > 3 {
		return segment{}, false
	}
	first, err1 := strconv.ParseUint(parts[0], 10, 64)
	last, err2 := strconv.ParseUint(parts[1], 10, 64)
	if err1 != nil || err2 != nil || first > last {
		return segment{}, false
	}
	if len(parts) == 3 {
		if _, err := strconv.ParseUint(parts[2], 10, 64); err != nil {
			return segment{}, false
		}
	}
	return segment{name: name, first: first, last: last}, true
}

func segmentName(first, last uint64, n int) string {
	if n == 0 {
		return fmt.Sprintf("%s%020d-%020d%s", segPrefix, first, last, segSuffix)
	}
	return fmt.Sprintf("%s%020d-%020d-%d%s", segPrefix, first, last, n, segSuffix)
}

// Dir returns the directory of the tape.
func (t *Tape) Dir() string { return t.dir }

// DroppedBytes returns how many bytes of a partial last line Open removed
// from the current file (0 when the file ended cleanly).
func (t *Tape) DroppedBytes() int64 { return t.dropped }

// LastSeq returns the sequence number of the last event appended (0 for an
// empty tape).
func (t *Tape) LastSeq() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.seq
}

// Append assigns the event its sequence number, and its time when e.Time is
// zero, then writes it to the tape as one line and waits until it is on disk.
// It returns the event as assigned (Request, Result and Error as given, not
// as redacted). An event whose line would exceed MaxEventBytes is refused
// with a *TooLargeError and consumes no sequence number.
func (t *Tape) Append(e Event) (Event, error) {
	if e.Time.IsZero() {
		e.Time = t.cfg.now().UTC() // UTC also drops the monotonic reading
	}
	e.Seq = 0
	body, err := t.encode(e)
	if err != nil {
		return Event{}, err
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	var n int
	triedRotate := false
	for {
		if t.closed {
			return Event{}, ErrClosed
		}
		if t.err != nil {
			return Event{}, t.err
		}
		if t.seq == math.MaxUint64 {
			return Event{}, errors.New("audit: sequence numbers exhausted")
		}
		n = len(body) - len(seqZero) + len(`{"seq":`) + decimalLen(t.seq+1) + len(",") + 1
		if n > MaxEventBytes {
			return Event{}, &TooLargeError{Size: n, Limit: MaxEventBytes}
		}
		if t.size == 0 || t.size+int64(n) <= t.cfg.maxFileBytes || triedRotate {
			break
		}
		if t.syncing { // never swap the file under a running fsync
			t.cond.Wait()
			continue
		}
		t.rotate()
		triedRotate = true
	}

	seq := t.seq + 1
	line := make([]byte, 0, n)
	line = append(line, `{"seq":`...)
	line = strconv.AppendUint(line, seq, 10)
	line = append(line, body[len(seqZero)-1:]...) // from the comma on
	line = append(line, '\n')
	if _, err := t.f.Write(line); err != nil {
		// Undo a partial write so that the next line starts clean.
		if terr := t.f.Truncate(t.size); terr != nil {
			t.err = &brokenError{fmt.Errorf("write: %w; truncate: %w", err, terr)}
			t.cond.Broadcast()
			return Event{}, t.err
		}
		return Event{}, fmt.Errorf("audit: write: %w", err)
	}
	t.seq = seq
	t.size += int64(len(line))
	if t.curFirst == 0 {
		t.curFirst = seq
	}
	t.written++
	if err := t.waitSynced(t.written); err != nil {
		return Event{}, err
	}
	e.Seq = seq
	return e, nil
}

// waitSynced returns once write generation gen is on disk. It runs with mu
// held; one caller at a time runs fsync without mu, and its fsync covers
// every write made before it started (group commit).
func (t *Tape) waitSynced(gen uint64) error {
	for t.synced < gen {
		if t.err != nil {
			return t.err
		}
		if t.closed {
			return ErrClosed
		}
		if t.syncing {
			t.cond.Wait()
			continue
		}
		t.syncing = true
		target, f := t.written, t.f
		t.mu.Unlock()
		err := f.Sync()
		t.mu.Lock()
		t.syncing = false
		if err != nil {
			// After a failed fsync the kernel may have dropped the dirty
			// pages; a later fsync could succeed without them.
			t.err = &brokenError{fmt.Errorf("fsync: %w", err)}
		} else if target > t.synced {
			t.synced = target
		}
		t.cond.Broadcast()
	}
	return nil
}

func decimalLen(v uint64) int {
	n := 1
	for v >= 10 {
		v /= 10
		n++
	}
	return n
}

// encode returns the event's JSON line, without newline, starting with
// seqZero, after redaction.
func (t *Tape) encode(e Event) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		return nil, fmt.Errorf("audit: encode event: %w", err)
	}
	b := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if t.cfg.redact != nil {
		b = t.cfg.redact(b)
		if !bytes.HasPrefix(b, seqZero) || bytes.IndexByte(b, '\n') >= 0 || !json.Valid(b) {
			return nil, ErrBadRedaction
		}
	}
	// Early refusal; Append checks the exact size.
	if len(b)+1 > MaxEventBytes {
		return nil, &TooLargeError{Size: len(b) + 1, Limit: MaxEventBytes}
	}
	return b, nil
}

// rotate moves the current file aside and starts a new one. It runs with mu
// held and no fsync running. A failure that leaves the tape usable keeps the
// current file (the tape grows past its limit rather than losing events);
// any other failure breaks the tape.
func (t *Tape) rotate() {
	if err := t.f.Sync(); err != nil {
		t.err = &brokenError{fmt.Errorf("fsync: %w", err)}
		t.cond.Broadcast()
		return
	}
	t.synced = t.written
	first, last := t.curFirst, t.seq
	if first == 0 { // the file holds no valid event
		first = last
	}
	var name string
	for i := 0; ; i++ {
		name = segmentName(first, last, i)
		if _, err := os.Lstat(filepath.Join(t.dir, name)); err != nil {
			break // free (or unknowable: the rename below then decides)
		}
	}
	cur := filepath.Join(t.dir, currentName)
	next := filepath.Join(t.dir, nextName)
	dst := filepath.Join(t.dir, name)
	nf, err := os.OpenFile(next, os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return
	}
	if err := os.Rename(cur, dst); err != nil {
		nf.Close()
		os.Remove(next)
		return
	}
	if err := os.Rename(next, cur); err != nil {
		if os.Rename(dst, cur) == nil {
			nf.Close()
			os.Remove(next)
			return
		}
		nf.Close()
		t.err = &brokenError{fmt.Errorf("rotate: %w", err)}
		t.cond.Broadcast()
		return
	}
	// The renames are durable once the directory is synced; if that fails,
	// a crash leaves the old names, which Open also handles.
	_ = syncDir(t.dir)
	t.f.Close()
	t.f = nf
	t.size = 0
	t.curFirst = 0
	t.rotated = append(t.rotated, segment{name: name, first: first, last: last})
	t.prune()
}

// prune deletes the oldest rotated files beyond the maximum. It runs with mu
// held (or before the tape is shared).
func (t *Tape) prune() {
	for len(t.rotated) > t.cfg.maxFiles {
		err := os.Remove(filepath.Join(t.dir, t.rotated[0].name))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return // try again at the next rotation
		}
		t.rotated = t.rotated[1:]
	}
}

// Close flushes the current file to disk and closes the tape. Appends
// waiting for their fsync complete first. Further calls return nil.
func (t *Tape) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for t.syncing {
		t.cond.Wait()
	}
	if t.closed {
		return nil
	}
	var errs []error
	if t.err == nil {
		if err := t.f.Sync(); err != nil {
			t.err = &brokenError{fmt.Errorf("fsync: %w", err)}
			errs = append(errs, t.err)
		} else {
			t.synced = t.written
		}
	}
	if err := t.f.Close(); err != nil {
		errs = append(errs, fmt.Errorf("audit: close: %w", err))
	}
	unlockDir(t.lock)
	t.closed = true
	t.cond.Broadcast()
	return errors.Join(errs...)
}
