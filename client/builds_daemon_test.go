package client_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// TestBuildAgainstDaemon runs the SDK's build calls against a real `moat
// serve`, over HTTP (a multipart body) and over stdio (content).
func TestBuildAgainstDaemon(t *testing.T) {
	testutil.RequireRoot(t)
	d := testutil.StartDaemon(t, t.TempDir(), "--listen", "127.0.0.1:0")
	for _, tc := range []struct {
		name string
		opt  client.Option
	}{
		{"http", client.WithHTTP(d.URL, d.Token)},
		{"stdio", client.WithStdio(testutil.Moat(t), "serve", "--stdio", "--data", t.TempDir())},
	} {
		t.Run(tc.name, func(t *testing.T) { exerciseBuild(t, tc.opt) })
	}
}

func exerciseBuild(t *testing.T, opt client.Option) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	var src bytes.Buffer
	tw := tar.NewWriter(&src)
	content := []byte("int main(void) { return 0; }\n")
	tw.WriteHeader(&tar.Header{Name: "main.c", Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg})
	tw.Write(content)
	tw.Close()
	sum := sha256.Sum256(content)
	digest := hex.EncodeToString(sum[:])

	// To its end: the artifact by its digest, the log, the settings as
	// sent (a secret's name kept, not its value).
	b, err := c.Build(ctx, api.CreateBuild{Command: []string{"sh", "-c", "echo building; echo warn >&2"}, Outputs: []string{"main.c"},
		Env: []string{"TOKEN=hunter2"}, Labels: map[string]string{"suite": "client"}}, bytes.NewReader(src.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if b.Status != api.BuildSucceeded || len(b.Artifacts) != 1 || b.Artifacts[0].SHA256 != digest || b.Labels["suite"] != "client" {
		t.Fatalf("build: %+v", b)
	}
	if !strings.Contains(strings.Join(b.Env, " "), "TOKEN") || strings.Contains(b.Log.Head, "hunter2") {
		t.Errorf("env %v, log %q", b.Env, b.Log.Head)
	}
	var art bytes.Buffer
	if err := c.BuildArtifact(ctx, b.ID, digest, &art); err != nil || !bytes.Equal(art.Bytes(), content) {
		t.Errorf("artifact: %v %q", err, art.Bytes())
	}
	if err := c.BuildArtifact(ctx, b.ID, strings.Repeat("0", 64), &art); !client.IsNotFound(err) {
		t.Errorf("an unknown digest: %v", err)
	}
	var log bytes.Buffer
	if got, err := c.BuildLog(ctx, b.ID, 0, true, &log); err != nil || got.ID != b.ID || got.Status != api.BuildSucceeded {
		t.Errorf("log: %+v %v", got, err)
	}
	if log.String() != "building\nwarn\n" && log.String() != "warn\nbuilding\n" {
		t.Errorf("log %q", log.String())
	}

	// Detached: running at once, then waited for.
	d, err := c.Build(ctx, api.CreateBuild{Command: []string{"sh", "-c", "sleep 0.2; echo late"}, Detach: true}, bytes.NewReader(src.Bytes()))
	if err != nil || d.Status != api.BuildRunning {
		t.Fatalf("detach: %+v %v", d, err)
	}
	if got, err := c.GetBuild(ctx, d.ID, true); err != nil || got.Status != api.BuildSucceeded || got.Log.Head != "late\n" {
		t.Errorf("wait: %+v %v", got, err)
	}

	// A source that is no tar is a build refused, not an error.
	r, err := c.Build(ctx, api.CreateBuild{Command: []string{"true"}}, strings.NewReader("not a tar"))
	if err != nil || r.Status != api.BuildRefused || r.Reason != api.ReasonSourceUnreadable {
		t.Errorf("no tar: %+v %v", r, err)
	}
	// Settings past the caps are an error.
	if _, err := c.Build(ctx, api.CreateBuild{Command: []string{"true"}, MaxFiles: 1 << 30}, bytes.NewReader(src.Bytes())); client.Code(err) != api.CodeInvalidArgument {
		t.Errorf("max_files above the cap: %v", err)
	}

	list, err := c.Builds(ctx, api.ListBuilds{Status: api.BuildSucceeded})
	if err != nil || len(list) != 2 || list[0].ID != d.ID {
		t.Errorf("list: %+v %v", list, err)
	}
	if got, err := c.DeleteBuild(ctx, b.ID); err != nil || got.ID != b.ID {
		t.Errorf("delete: %+v %v", got, err)
	}
	if _, err := c.GetBuild(ctx, b.ID, false); !client.IsNotFound(err) {
		t.Errorf("get after delete: %v", err)
	}
}
