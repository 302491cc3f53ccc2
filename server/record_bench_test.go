package server

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/sandbox"
	"github.com/moat-sandbox/moat/store"
)

// noRuntime stands in for the runtime where none is used.
type noRuntime struct{ sandbox.Runtime }

// BenchmarkRecordCall measures what the daemon writes for every exec, on
// the real store and tape in a temporary directory (fsync included): the
// start of the call (store), then its end (store and tape), with 1 to 32
// calls recording at once. Figures are calls/s; go test -bench
// RecordCall ./server/ -run '^$' -benchtime 3s prints them.
func BenchmarkRecordCall(b *testing.B) {
	for _, writers := range []int{1, 2, 8, 32} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			dir := b.TempDir()
			ctx := context.Background()
			st, err := store.Open(ctx, filepath.Join(dir, "moat.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			tape, err := audit.Open(filepath.Join(dir, "audit"))
			if err != nil {
				b.Fatal(err)
			}
			defer tape.Close()
			s, err := New(Config{Runtime: noRuntime{}, Store: st, Tape: tape})
			if err != nil {
				b.Fatal(err)
			}
			now := time.Now()
			if err := st.PutSandbox(ctx, &store.Sandbox{ID: "sb-1", Tenant: "a", State: store.StateRunning, CreatedAt: now}); err != nil {
				b.Fatal(err)
			}
			m := &managed{tenant: "a", info: api.Sandbox{ID: "sb-1", Tenant: "a"}}
			c := Caller{Tenant: "a", Actor: "bench"}
			req := &api.Exec{Args: []string{"echo", "hello"}}
			res := &sandbox.Result{ExitCode: 0, ExitReason: sandbox.ReasonExited, Stdout: "hello\n", StdoutBytes: 6}
			var next atomic.Int64
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						id := fmt.Sprintf("sb-1/c%d", i)
						if err := s.newCall(ctx, c, m, id, "exec", req.Args); err != nil {
							b.Error(err)
							return
						}
						s.finishCall(c, m, id, "process.exec", req, nil, res, nil, time.Millisecond)
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "calls/s")
		})
	}
}
