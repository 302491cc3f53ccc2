package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// TestSnapshotQuotaConfig: `[store] snapshot_quota` of the config file
// reaches a real daemon: snapshot.list reports it, and a snapshot past it
// is 507 insufficient_storage.
func TestSnapshotQuotaConfig(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(conf, []byte("[store]\nsnapshot_quota = \"4MiB\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "api.sock")
	d := testutil.StartDaemon(t, filepath.Join(dir, "data"), "--listen", "unix:"+sock, "--store", filepath.Join(dir, "store"), "--config", conf)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	call := func(method, path string, body, out any) int {
		t.Helper()
		var b []byte
		if body != nil {
			b, _ = json.Marshal(body)
		}
		req, err := http.NewRequest(method, "http://moat"+path, bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+d.Token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if out != nil {
			if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
				t.Fatalf("%s %s: %d: %v", method, path, resp.StatusCode, err)
			}
		}
		return resp.StatusCode
	}
	var list api.SnapshotList
	if st := call("GET", "/v1/snapshots", nil, &list); st != http.StatusOK || list.StoreQuota != 4<<20 || list.StoreBytes != 0 {
		t.Fatalf("snapshot.list: %d %+v", st, list)
	}
	var sb api.Sandbox
	if st := call("POST", "/v1/sandboxes", api.CreateSandbox{}, &sb); st != http.StatusCreated {
		t.Fatalf("create: %d", st)
	}
	var res struct{ ExitCode int }
	if st := call("POST", "/v1/sandboxes/"+sb.ID+"/exec", api.Exec{Args: []string{"sh", "-c", "head -c 6M /dev/urandom > /workspace/big"}}, &res); st != http.StatusOK || res.ExitCode != 0 {
		t.Fatalf("exec: %d %+v", st, res)
	}
	var e api.Error
	if st := call("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", api.CreateSnapshot{}, &e); st != http.StatusInsufficientStorage || e.Code != api.CodeStorage {
		t.Fatalf("snapshot past the configured quota: %d %+v", st, e)
	}
}
