package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 17, item 4: a call's row keeps counts, previews as bytes (a NUL
// is one byte) and a reference, not the output.
func TestCallOutputRoundTrip(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	mustPutSandbox(t, s, running("sb-1", "a", t0))
	mustPutCall(t, s, &Call{ID: "sb-1/1", Sandbox: "sb-1", Tenant: "a", Kind: "exec", Args: []string{"x"}, StartedAt: t0})
	out := &CallOutput{StdoutBytes: 1 << 30, StderrBytes: 3, StdoutPreview: make([]byte, 4096), StderrPreview: []byte("e\x00\n"), Ref: "a/sb-1.1"}
	if err := s.FinishCallOutput(ctx, "sb-1/1", t0, 0, "exited", json.RawMessage(`{"exit_code":0}`), out); err != nil {
		t.Fatal(err)
	}
	c, err := s.GetCall(ctx, "a", "sb-1/1")
	if err != nil {
		t.Fatal(err)
	}
	if c.Output.StdoutBytes != 1<<30 || c.Output.StderrBytes != 3 || !bytes.Equal(c.Output.StdoutPreview, out.StdoutPreview) ||
		string(c.Output.StderrPreview) != "e\x00\n" || c.Output.Ref != "a/sb-1.1" {
		t.Fatalf("%+v", c.Output)
	}
	var n int
	if err := s.r.QueryRow(`SELECT length(stdout_preview) FROM calls WHERE id = 'sb-1/1'`).Scan(&n); err != nil || n != 4096 {
		t.Fatalf("4096 NUL bytes stored as %d bytes (%v)", n, err)
	}
}

// A database of schema 1, whose results hold the output, opens: the
// output moves out of result into the counts and a preview.
func TestMigrateOutputOutOfResult(t *testing.T) {
	path := filepath.Join(t.TempDir(), "moat.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	stmts := migrations[0] + `;
	INSERT INTO sandboxes (id, tenant, state, created_at, last_active_at) VALUES ('sb-1', 'a', 'stopped', 1, 1);
	INSERT INTO calls (id, sandbox, tenant, kind, args, started_at, result) VALUES
		('sb-1/1', 'sb-1', 'a', 'exec', '[]', 1, '{"exit_code":0,"stdout":"` + strings.Repeat(`\u0000`, 10000) + `","stderr":"oops","stdout_bytes":10000,"stderr_bytes":4}'),
		('sb-1/2', 'sb-1', 'a', 'exec', '[]', 1, NULL),
		('sb-1/3', 'sb-1', 'a', 'exec', '[]', 1, 'null');
	PRAGMA user_version = 1;`
	if _, err := db.Exec(stmts); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatalf("opening a schema 1 database: %v", err)
	}
	defer s.Close()
	c, err := s.GetCall(context.Background(), "a", "sb-1/1")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(c.Result), "stdout\"") || !strings.Contains(string(c.Result), `"stdout_bytes":10000`) {
		t.Fatalf("result after migration: %.200s", c.Result)
	}
	if c.Output.StdoutBytes != 10000 || c.Output.StderrBytes != 4 || len(c.Output.StdoutPreview) != 4096 ||
		string(c.Output.StderrPreview) != "oops" {
		t.Fatalf("output after migration: %d %d %d %q", c.Output.StdoutBytes, c.Output.StderrBytes, len(c.Output.StdoutPreview), c.Output.StderrPreview)
	}
	for _, id := range []string{"sb-1/2", "sb-1/3"} {
		if _, err := s.GetCall(context.Background(), "a", id); err != nil {
			t.Fatal(err)
		}
	}
}
