package server

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// What the runners' journals over the store (agJournal, wfJournal) do
// alike: a record and its events to and from their rows, and the audit
// state of the runs they save.

// journalRuns are the runs a journal saved since the daemon started and
// has not seen end, each with the state T its audit compares the run's
// next record with. Its zero value is empty and ready to use.
type journalRuns[T any] struct {
	mu   sync.Mutex
	runs map[string]*T
}

// get returns run id's state, a zero T the first time.
func (m *journalRuns[T]) get(id string) *T {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.runs[id]
	if st == nil {
		if m.runs == nil {
			m.runs = map[string]*T{}
		}
		st = new(T)
		m.runs[id] = st
	}
	return st
}

// forget drops run id's state, once the run has ended.
func (m *journalRuns[T]) forget(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.runs, id)
}

// encodeJournal encodes a save of run id for the store: its record r as
// JSON, and each of evs as JSON made a row by row (which reads the
// event's sequence number). what names the journal in errors ("agent
// journal").
func encodeJournal[E, Row any](what, id string, r any, evs []E, row func(ev *E, body json.RawMessage) Row) (json.RawMessage, []Row, error) {
	body, err := json.Marshal(r)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: encoding run %s: %w", what, id, err)
	}
	rows := make([]Row, len(evs))
	for i := range evs {
		b, err := json.Marshal(evs[i])
		if err != nil {
			return nil, nil, fmt.Errorf("%s: encoding an event of %s: %w", what, id, err)
		}
		rows[i] = row(&evs[i], b)
	}
	return body, rows, nil
}

// journalTimes are a run's created and updated times as its row keeps
// them: an unset updated is now, an unset created is updated.
func journalTimes(created, updated time.Time) (time.Time, time.Time) {
	if updated.IsZero() {
		updated = time.Now()
	}
	if created.IsZero() {
		created = updated
	}
	return created, updated
}

// decodeJournalEvents decodes the event rows of run, row giving each
// row's sequence number and body. what names the journal in errors.
func decodeJournalEvents[E, Row any](what, run string, rows []Row, row func(*Row) (uint64, json.RawMessage)) ([]E, error) {
	out := make([]E, len(rows))
	for i := range rows {
		seq, body := row(&rows[i])
		if err := json.Unmarshal(body, &out[i]); err != nil {
			return nil, fmt.Errorf("%s: event %d of %s: %w", what, seq, run, err)
		}
	}
	return out, nil
}

// decodeJournalRecords decodes run rows with decode; a row that does not
// decode is logged (msg, with the run id that id gives) and left out:
// one bad row must not hide the others, nor stop a restart.
func decodeJournalRecords[Row, Rec any](log *slog.Logger, msg string, rows []Row, decode func(*Row) (*Rec, error), id func(*Row) string) []*Rec {
	out := make([]*Rec, 0, len(rows))
	for i := range rows {
		r, err := decode(&rows[i])
		if err != nil {
			log.Error(msg, "run", id(&rows[i]), "err", err)
			continue
		}
		out = append(out, r)
	}
	return out
}
