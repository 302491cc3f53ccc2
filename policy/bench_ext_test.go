package policy_test

import (
	"fmt"
	"testing"

	"github.com/moat-sandbox/moat/internal/policyset"
)

// BenchmarkDecide: decisions against a realistic policy of 100 rules in
// three layers (internal/policyset, also measured by bench/policy).
func BenchmarkDecide(b *testing.B) {
	e, err := policyset.Effective()
	if err != nil {
		b.Fatal(err)
	}
	reqs := policyset.Requests()
	b.Run("mix", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			e.Decide(reqs[i%len(reqs)])
		}
	})
	for _, q := range reqs {
		b.Run(fmt.Sprintf("%.40s", q.String()), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				e.Decide(q)
			}
		})
	}
}

func BenchmarkCompile(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := policyset.Effective(); err != nil {
			b.Fatal(err)
		}
	}
}
