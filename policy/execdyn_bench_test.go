package policy_test

import (
	"fmt"
	"testing"

	"github.com/moat-sandbox/moat/internal/policyset"
	"github.com/moat-sandbox/moat/policy"
)

// BenchmarkDecideDynamic: commands with expansions and normalized git
// options against the policy of BenchmarkDecide.
func BenchmarkDecideDynamic(b *testing.B) {
	e, err := policyset.Effective()
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range []string{
		`for f in *.go; do echo "$f"; done`,
		`git -C "$d" push origin "$(git branch --show-current)"`,
		`git $sub`,
		`nice -n 5 timeout 60 env -i HOME="$HOME" git -c core.pager=cat log -n "$n"`,
	} {
		b.Run(fmt.Sprintf("%.40s", s), func(b *testing.B) {
			q := policy.ExecShell(s)
			b.ReportAllocs()
			for b.Loop() {
				e.Decide(q)
			}
		})
	}
}
