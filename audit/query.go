package audit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Query selects events. Zero fields do not filter. Every filter must hold
// for an event to be returned.
//
// Tenant is an exact match. An empty Tenant selects the events of every
// tenant, which only an operator may ask for: the caller must set Tenant to
// the authenticated tenant for any other requester.
type Query struct {
	// Tenant keeps only this tenant's events ("" = all tenants, operators
	// only).
	Tenant string `json:"tenant,omitempty"`
	// Actor keeps only events of this actor.
	Actor string `json:"actor,omitempty"`
	// Sandbox keeps only events of this sandbox.
	Sandbox string `json:"sandbox,omitempty"`
	// Call keeps only events of this call or process.
	Call string `json:"call,omitempty"`
	// Kind keeps events whose Kind starts with it: "process." matches
	// "process.exec" and "process.exit".
	Kind string `json:"kind,omitempty"`
	// Decision keeps only events with this decision.
	Decision string `json:"decision,omitempty"`
	// Since keeps events at or after this time.
	Since time.Time `json:"since,omitzero"`
	// Until keeps events before this time.
	Until time.Time `json:"until,omitzero"`
	// AfterSeq keeps events with a larger sequence number: pass the Seq of
	// the last event of a page to get the next page.
	AfterSeq uint64 `json:"after_seq,omitempty"`
	// BeforeSeq, when not 0, keeps events with a smaller sequence number:
	// with Newest, pass the Seq of the first event of a page to get the
	// previous page.
	BeforeSeq uint64 `json:"before_seq,omitempty"`
	// Limit is the largest number of events returned: DefaultLimit when 0
	// or negative, at most MaxLimit.
	Limit int `json:"limit,omitempty"`
	// Newest returns the last Limit matching events instead of the first
	// ones (still in sequence order), reading only the newest files needed.
	Newest bool `json:"newest,omitempty"`
}

func (q *Query) match(e *Event) bool {
	switch {
	case q.Tenant != "" && e.Tenant != q.Tenant,
		q.Actor != "" && e.Actor != q.Actor,
		q.Sandbox != "" && e.Sandbox != q.Sandbox,
		q.Call != "" && e.Call != q.Call,
		q.Decision != "" && e.Decision != q.Decision,
		!strings.HasPrefix(e.Kind, q.Kind),
		!q.Since.IsZero() && e.Time.Before(q.Since),
		!q.Until.IsZero() && !e.Time.Before(q.Until):
		return false
	}
	return true
}

// inRange reports whether seq passes AfterSeq and BeforeSeq.
func (q *Query) inRange(seq uint64) bool {
	return seq > q.AfterSeq && (q.BeforeSeq == 0 || seq < q.BeforeSeq)
}

// Page is the answer to a query.
type Page struct {
	// Events are the matching events in sequence order; never nil.
	Events []Event `json:"events"`
	// More reports that more events match beyond this page: after the last
	// event, or before the first one with Newest.
	More bool `json:"more"`
	// Malformed counts the lines read that were not valid events and were
	// skipped.
	Malformed int `json:"malformed"`
}

// Query returns the events matching q in sequence order, across the current
// and the rotated files (see QueryPage). Authorisation is the caller's job:
// see Query.Tenant.
func (t *Tape) Query(ctx context.Context, q Query) ([]Event, error) {
	p, err := t.QueryPage(ctx, q)
	return p.Events, err
}

// source is one file to read, with the sequence range it may hold.
type source struct {
	path        string
	f           *os.File // opened in advance (the current file), or nil
	size        int64    // bytes to read from f
	first, last uint64   // valid when ranged
	ranged      bool
}

// QueryPage is Query with paging information. It reads only the files whose
// sequence range can match, stops as soon as the page is full (plus one
// event, to set More), and skips and counts malformed lines. Events appended
// while it runs may or may not be included.
func (t *Tape) QueryPage(ctx context.Context, q Query) (Page, error) {
	if q.Limit <= 0 {
		q.Limit = DefaultLimit
	}
	q.Limit = min(q.Limit, MaxLimit)
	srcs, err := t.view()
	if err != nil {
		return Page{Events: []Event{}}, err
	}
	defer func() {
		for _, s := range srcs {
			if s.f != nil {
				s.f.Close()
			}
		}
	}()
	var p Page
	if q.Newest {
		p, err = queryNewest(ctx, &q, srcs)
	} else {
		p, err = queryOldest(ctx, &q, srcs)
	}
	if p.Events == nil {
		p.Events = []Event{}
	}
	// Files in a valid tape are in order; this only guards against
	// tampered ones.
	slices.SortStableFunc(p.Events, func(a, b Event) int { return cmpU64(a.Seq, b.Seq) })
	return p, err
}

// snapshot lists the files to read, oldest first, and opens the current
// file under the lock so that a concurrent rotation cannot hide it.
func (t *Tape) view() ([]source, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrClosed
	}
	srcs := make([]source, 0, len(t.rotated)+1)
	for _, s := range t.rotated {
		srcs = append(srcs, source{path: filepath.Join(t.dir, s.name), first: s.first, last: s.last, ranged: true})
	}
	if t.size > 0 {
		path := filepath.Join(t.dir, currentName)
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("audit: %w", err)
		}
		cur := source{path: path, f: f, size: t.size}
		if t.curFirst != 0 {
			cur.first, cur.last, cur.ranged = t.curFirst, t.seq, true
		}
		srcs = append(srcs, cur)
	}
	return srcs, nil
}

// scan calls fn for every valid event of s until fn returns false. It
// returns the number of malformed lines. A rotated file deleted meanwhile
// reads as empty.
func scan(ctx context.Context, s *source, fn func(*Event) bool) (int, error) {
	var r io.Reader
	if s.f != nil {
		r = io.NewSectionReader(s.f, 0, s.size)
	} else {
		f, err := os.Open(s.path)
		if errors.Is(err, fs.ErrNotExist) {
			return 0, nil
		}
		if err != nil {
			return 0, fmt.Errorf("audit: %w", err)
		}
		defer f.Close()
		r = f
	}
	lr := newLineReader(r)
	malformed := 0
	for i := 0; ; i++ {
		if i%256 == 0 {
			if err := ctx.Err(); err != nil {
				return malformed, err
			}
		}
		line, tooLong, err := lr.next()
		if errors.Is(err, io.EOF) {
			return malformed, nil
		}
		if err != nil {
			return malformed, fmt.Errorf("audit: read %s: %w", s.path, err)
		}
		if tooLong {
			malformed++
			continue
		}
		e, ok := parseEvent(line)
		if !ok {
			malformed++
			continue
		}
		if !fn(&e) {
			return malformed, nil
		}
	}
}

// queryOldest returns the first Limit matches, reading files oldest first.
func queryOldest(ctx context.Context, q *Query, srcs []source) (Page, error) {
	var p Page
	want := q.Limit + 1
	for i := range srcs {
		s := &srcs[i]
		if s.ranged && s.last <= q.AfterSeq {
			continue
		}
		if s.ranged && q.BeforeSeq != 0 && s.first >= q.BeforeSeq {
			break
		}
		done := false
		bad, err := scan(ctx, s, func(e *Event) bool {
			if q.BeforeSeq != 0 && e.Seq >= q.BeforeSeq {
				done = true
				return false
			}
			if q.inRange(e.Seq) && q.match(e) {
				p.Events = append(p.Events, *e)
				if len(p.Events) >= want {
					done = true
					return false
				}
			}
			return true
		})
		p.Malformed += bad
		if err != nil {
			return p, err
		}
		if done {
			break
		}
	}
	if len(p.Events) > q.Limit {
		p.Events, p.More = p.Events[:q.Limit], true
	}
	return p, nil
}

// queryNewest returns the last Limit matches, reading files newest first.
func queryNewest(ctx context.Context, q *Query, srcs []source) (Page, error) {
	var p Page
	want := q.Limit + 1
	var chunks [][]Event // newest file first
	total := 0
	for i := len(srcs) - 1; i >= 0 && total < want; i-- {
		s := &srcs[i]
		if s.ranged && q.BeforeSeq != 0 && s.first >= q.BeforeSeq {
			continue
		}
		if s.ranged && s.last <= q.AfterSeq {
			break
		}
		room := want - total
		var got []Event // the last room matches of this file
		bad, err := scan(ctx, s, func(e *Event) bool {
			if q.BeforeSeq != 0 && e.Seq >= q.BeforeSeq {
				return false
			}
			if q.inRange(e.Seq) && q.match(e) {
				got = append(got, *e)
				if len(got) > room {
					got = got[1:]
				}
			}
			return true
		})
		p.Malformed += bad
		if err != nil {
			return p, err
		}
		chunks = append(chunks, got)
		total += len(got)
	}
	p.Events = make([]Event, 0, total)
	for i := len(chunks) - 1; i >= 0; i-- {
		p.Events = append(p.Events, chunks[i]...)
	}
	if len(p.Events) > q.Limit {
		p.Events, p.More = p.Events[len(p.Events)-q.Limit:], true
	}
	return p, nil
}
