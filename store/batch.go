package store

import (
	"context"
	"database/sql"
	"errors"
)

// Group commit. The daemon records the start and the end of every call;
// with one writer and an fsync per transaction, concurrent callers would
// queue behind one another's fsyncs. Call writes therefore go through a
// batcher: the writes that arrive while a commit runs are committed
// together in the next transaction, with one fsync. A write is acknowledged
// only after its transaction has committed, so durability is unchanged;
// a lone writer pays nothing extra.

// maxBatch bounds the writes committed in one transaction.
const maxBatch = 256

// ErrClosed is returned for writes queued after Close.
var ErrClosed = errors.New("store: closed")

// batchOp is one queued write.
type batchOp struct {
	run  func(tx *sql.Tx) error
	done chan error
}

// startBatcher starts the goroutine that commits queued writes.
func (s *Store) startBatcher() {
	s.batch = make(chan *batchOp)
	s.stopBatch = make(chan struct{})
	s.batchDone = make(chan struct{})
	go s.batcher()
}

// inBatch runs fn in the next group commit and returns its error, or the
// commit's. Once queued, it waits for the commit even if ctx ends, so that
// a nil error always means the write is on disk.
func (s *Store) inBatch(ctx context.Context, fn func(tx *sql.Tx) error) error {
	op := &batchOp{run: fn, done: make(chan error, 1)}
	select {
	case s.batch <- op:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stopBatch:
		return ErrClosed
	}
	return <-op.done
}

func (s *Store) batcher() {
	defer close(s.batchDone)
	for {
		var first *batchOp
		select {
		case first = <-s.batch:
		case <-s.stopBatch:
			return
		}
		ops := []*batchOp{first}
	collect:
		for len(ops) < maxBatch {
			select {
			case op := <-s.batch:
				ops = append(ops, op)
			default:
				break collect
			}
		}
		s.commit(ops)
	}
}

// commit runs ops in one transaction. A failed statement is undone by
// SQLite alone (statement-level rollback), so one op's error does not
// touch the others.
//
// A commit that fails (the disk is full, an I/O error) fails every op of
// the batch with the same *WriteError: none of them is on disk, and
// SQLite has rolled the transaction back (it does so by itself on
// SQLITE_FULL and SQLITE_IOERR; the ROLLBACK below covers the other
// cases). The connection stays usable: the next batch tries again, so the
// store recovers by itself once space returns.
func (s *Store) commit(ops []*batchOp) {
	errs := make([]error, len(ops))
	tx, err := s.w.BeginTx(context.Background(), nil)
	if err == nil {
		for i, op := range ops {
			errs[i] = op.run(tx)
			var we *WriteError
			if errors.As(writeErr(s.Dir(), errs[i]), &we) {
				// SQLite may have rolled the whole transaction back:
				// the batch fails as one.
				err = errs[i]
				break
			}
		}
		if err == nil {
			err = tx.Commit()
		} else {
			_ = tx.Rollback()
		}
		if err != nil {
			_, _ = s.w.Exec("ROLLBACK") // "no transaction is active" when SQLite already did
		}
	}
	err = writeErr(s.Dir(), err)
	for i, op := range ops {
		if err != nil {
			errs[i] = err
		}
		op.done <- errs[i]
	}
}
