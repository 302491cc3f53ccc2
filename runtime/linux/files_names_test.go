//go:build linux

package linux

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

// TestFilesErrorsNameOperations: the archive operations' errors name them
// as the caller knows them (upload, download), never by the protocol's
// internal tar_in and tar_out.
func TestFilesErrorsNameOperations(t *testing.T) {
	sb, f, _ := filesSandbox(t, false)
	ctx := context.Background()
	errs := map[string]error{
		"download": f.GetTar(ctx, "/workspace/missing", io.Discard, 1<<20),
		"upload":   f.PutTar(ctx, "/workspace/missing", bytes.NewReader(nil), 0),
	}
	if err := sb.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	errs["download after Shutdown"] = f.GetTar(ctx, "/workspace", io.Discard, 10)
	errs["upload after Shutdown"] = f.PutTar(ctx, "/workspace", bytes.NewReader(nil), 10)
	for what, err := range errs {
		name, _, _ := strings.Cut(what, " ")
		if err == nil || strings.Contains(err.Error(), "tar_") || !strings.HasPrefix(err.Error(), name+" /workspace") {
			t.Errorf("%s: %v", what, err)
		}
	}
}
