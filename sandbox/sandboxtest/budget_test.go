package sandboxtest

import (
	"context"
	"errors"
	"testing"

	"github.com/moat-sandbox/moat/sandbox"
)

// TestBudgets: the fake's budgets behave as the real runtime's do, minus
// enforcement: a spec must name a live budget; Close is ErrBusy while a
// sandbox of the budget lives (Run's too, until it returns) and removes
// the id once none does; ids and limits are checked.
func TestBudgets(t *testing.T) {
	r := New()
	ctx := context.Background()
	b, err := r.NewBudget("grp-1", sandbox.Limits{CPUs: 1, MemoryBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.NewBudget("grp-1", sandbox.Limits{}); !errors.Is(err, sandbox.ErrBusy) {
		t.Errorf("a second budget of a live id: %v", err)
	}
	if _, err := r.Create(ctx, &sandbox.Spec{Budget: "grp-2"}); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("create in no budget: %v", err)
	}
	if res, err := r.Run(ctx, &sandbox.Spec{Budget: "grp-1"}, &sandbox.Process{Args: []string{"true"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("run in the budget: %v %+v", err, res)
	}
	sb, err := r.Create(ctx, &sandbox.Spec{Budget: "grp-1"})
	if err != nil {
		t.Fatal(err)
	}
	if n := b.(*Budget).Live(); n != 1 {
		t.Errorf("%d live sandboxes in the budget, want 1 (Run's has ended)", n)
	}
	if err := b.Close(); !errors.Is(err, sandbox.ErrBusy) {
		t.Fatalf("Close with a live sandbox: %v", err)
	}
	if err := sb.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if ids := r.Budgets(); len(ids) != 0 {
		t.Errorf("budgets after Close: %v", ids)
	}
	if _, err := r.Create(ctx, &sandbox.Spec{Budget: "grp-1"}); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("create in a closed budget: %v", err)
	}
	for _, id := range []string{"", "a/b", "a b"} {
		if _, err := r.NewBudget(id, sandbox.Limits{}); !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Errorf("id %q: %v", id, err)
		}
	}
	for _, l := range []sandbox.Limits{{DiskBytes: 1 << 30}, {CPUWeight: 10001}, {Pids: -1}} {
		if _, err := r.NewBudget("grp-3", l); !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Errorf("limits %+v: %v", l, err)
		}
	}
}
