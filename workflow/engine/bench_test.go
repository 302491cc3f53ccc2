package engine

import (
	"fmt"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/api"
)

// BenchmarkChain10 measures the engine's own cost of a 10-step chain,
// each step from its predecessor's snapshot, on the in-memory backend
// and journal (no sandbox): scheduling, journalling and events.
func BenchmarkChain10(b *testing.B) {
	var doc strings.Builder
	doc.WriteString("steps:\n  - id: s0\n    run: [ok]\n")
	for i := 1; i < 10; i++ {
		fmt.Fprintf(&doc, "  - id: s%d\n    from: s%d\n    run: [ok]\n", i, i-1)
	}
	h := &harness{t: b, b: newFakeBackend(b), j: newMemJournal(b), dir: b.TempDir()}
	h.e = New(h.b, h.j, Options{ArtifactDir: h.dir, Logger: discard()})
	defer h.e.Close(b.Context())
	b.ReportAllocs()
	for b.Loop() {
		r, err := h.e.Submit(b.Context(), owner, api.CreateWorkflow{Document: doc.String()})
		if err != nil {
			b.Fatal(err)
		}
		if r, err = h.e.Wait(b.Context(), tenant, r.ID); err != nil || r.State != api.RunSucceeded {
			b.Fatalf("%v %+v", err, r)
		}
	}
}
