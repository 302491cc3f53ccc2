package sandbox

import (
	"errors"
	"testing"
)

func TestBudgetUse(t *testing.T) {
	var u BudgetUse
	if err := u.Enter("g"); err != nil {
		t.Fatal(err)
	}
	if err := u.Close("g"); !errors.Is(err, ErrBusy) {
		t.Fatalf("close with a live sandbox: %v", err)
	}
	if err := u.Enter("g"); err != nil || u.Live() != 2 {
		t.Fatalf("a refused close changed nothing: %v, live %d", err, u.Live())
	}
	u.Leave()
	u.Leave()
	if err := u.Close("g"); err != nil {
		t.Fatal(err)
	}
	if err := u.Enter("g"); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("enter after close: %v", err)
	}
	if err := u.Close("g"); err != nil {
		t.Fatalf("second close: %v", err)
	}
}
