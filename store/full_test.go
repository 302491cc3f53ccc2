package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testutil"
)

// TestFullDisk: on a full file system a write fails with an error that
// says so (ENOSPC, naming the directory), commits nothing, leaves reads
// working, and the store recovers by itself once space returns.
func TestFullDisk(t *testing.T) {
	dir := testutil.Tmpfs(t, 4<<20)
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(dir, "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	if err := s.PutSandbox(ctx, &Sandbox{ID: "sb-1", Tenant: "a", State: StateRunning, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	fill := testutil.FillDisk(t, dir, "fill")

	// The WAL may still have room for a few pages: write until refused.
	big := strings.Repeat("x", 64<<10)
	var failed string
	for i := 0; i < 1000 && failed == ""; i++ {
		id := "sb-1/" + strconv.Itoa(i)
		err = s.PutCall(ctx, &Call{ID: id, Sandbox: "sb-1", Tenant: "a", Kind: "exec", Args: []string{big}, StartedAt: now})
		if err != nil {
			failed = id
		}
	}
	if failed == "" {
		t.Fatal("1000 calls of 64 KiB were written to a full disk")
	}
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("write to a full disk: %v; want ENOSPC naming %s", err, dir)
	}
	// Nothing of the refused write was kept, and reads work.
	if _, err := s.GetCall(ctx, "a", failed); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the refused call: %v", err)
	}
	if _, err := s.GetSandbox(ctx, "a", "sb-1"); err != nil {
		t.Fatalf("read on a full disk: %v", err)
	}
	if err := s.EndSandbox(ctx, "sb-1", "deleted", now, now); err != nil && !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("end sandbox on a full disk: %v", err)
	}

	// Space returns: the next write succeeds, without reopening.
	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	if err := s.PutCall(ctx, &Call{ID: failed, Sandbox: "sb-1", Tenant: "a", Kind: "exec", Args: []string{"true"}, StartedAt: now}); err != nil {
		t.Fatalf("after space returned: %v", err)
	}
	if err := s.FinishCall(ctx, failed, now, 0, "exited", nil); err != nil {
		t.Fatalf("after space returned: %v", err)
	}
	if c, err := s.GetCall(ctx, "a", failed); err != nil || c.EndedAt == nil {
		t.Fatalf("after space returned: %+v %v", c, err)
	}
}

// TestOpenFullDisk: opening a store on a full disk says the disk is full
// and names the directory, not "disk I/O error".
func TestOpenFullDisk(t *testing.T) {
	dir := testutil.Tmpfs(t, 1<<20)
	testutil.FillDisk(t, dir, "fill")
	s, err := Open(context.Background(), filepath.Join(dir, "moat.db"))
	if err == nil {
		s.Close()
		t.Fatal("opened a new store on a full disk")
	}
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), dir+": no space left on device") {
		t.Fatalf("open on a full disk: %v; want ENOSPC naming %s", err, dir)
	}
}
