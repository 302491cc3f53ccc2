package netproxy

import (
	"fmt"
	"io"
	"testing"
)

// TestCloseConnections: an open tunnel ends (the client reads EOF) and
// the endpoint keeps serving: the next tunnel is opened and judged anew.
func TestCloseConnections(t *testing.T) {
	e := newEnv(t)
	port := echoServer(t, "hi\n")
	resp, conn := e.connect(fmt.Sprintf("api.moat.test:%d", port))
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	banner := make([]byte, 3)
	if _, err := io.ReadFull(conn, banner); err != nil {
		t.Fatal(err)
	}
	if n := e.ep.CloseConnections(); n != 1 {
		t.Errorf("CloseConnections = %d, want 1 open client connection", n)
	}
	if _, err := io.ReadAll(conn); err != nil {
		t.Fatalf("the tunnel did not end with EOF: %v", err)
	}
	resp, conn = e.connect(fmt.Sprintf("api.moat.test:%d", port))
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT after CloseConnections: %d", resp.StatusCode)
	}
	if _, err := io.ReadFull(conn, banner); err != nil {
		t.Fatal(err)
	}
}
