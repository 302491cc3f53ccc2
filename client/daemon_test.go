package client_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// TestAgainstDaemon runs the SDK against a real `moat serve`, over HTTP and
// over stdio, so the SDK, the API document and the server are held to one
// behaviour.
func TestAgainstDaemon(t *testing.T) {
	testutil.RequireRoot(t)
	d := testutil.StartDaemon(t, t.TempDir(), "--listen", "127.0.0.1:0")
	for _, tc := range []struct {
		name string
		opt  client.Option
	}{
		{"http", client.WithHTTP(d.URL, d.Token)},
		{"stdio", client.WithStdio(testutil.Moat(t), "serve", "--stdio", "--data", t.TempDir())},
	} {
		t.Run(tc.name, func(t *testing.T) { exercise(t, tc.opt) })
	}
}

func exercise(t *testing.T, opt client.Option) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sb, err := c.CreateSandbox(ctx, api.CreateSandbox{Labels: map[string]string{"test": t.Name()}})
	if err != nil {
		t.Fatal(err)
	}

	// A streamed exec: output events in order, the exit last.
	var out, errOut string
	var last api.Event
	for ev, err := range sb.ExecStream(ctx, api.Exec{Args: []string{"sh", "-c", "echo a; echo b >&2; exit 3"}}) {
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Type {
		case api.EventStdout:
			out += string(ev.Output())
		case api.EventStderr:
			errOut += string(ev.Output())
		}
		last = ev
	}
	if out != "a\n" || errOut != "b\n" || last.Type != api.EventExit || last.Result.ExitCode != 3 {
		t.Fatalf("stream: %q %q %+v", out, errOut, last)
	}

	// A background process fed through stdin, followed through a channel.
	p, err := sb.Start(ctx, api.Exec{Args: []string{"sh", "-c", "while read l; do echo got $l; done; echo done"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WriteStdin(ctx, []byte("x\n")); err != nil {
		t.Fatal(err)
	}
	if err := p.CloseStdin(ctx); err != nil {
		t.Fatal(err)
	}
	events, errc := p.Events(ctx, 0)
	var got string
	for ev := range events {
		got += ev.Text
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if got != "got x\ndone\n" {
		t.Fatalf("background output %q", got)
	}
	info, err := p.Wait(ctx)
	if err != nil || info.State != api.ProcExited || info.Result.ExitCode != 0 {
		t.Fatalf("wait: %+v %v", info, err)
	}

	// A second exec while one runs is refused as busy; once the first is
	// abandoned (the SDK cancels it), the sandbox takes execs again.
	for ev, err := range sb.ExecStream(ctx, api.Exec{Args: []string{"sh", "-c", "echo up; exec sleep 30"}}) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == api.EventStdout {
			if _, err := sb.Exec(ctx, api.Exec{Args: []string{"true"}}); !client.IsBusy(err) {
				t.Fatalf("exec beside a running one: %v", err)
			}
			break
		}
	}
	for {
		res, err := sb.Exec(ctx, api.Exec{Args: []string{"true"}})
		if client.IsBusy(err) {
			continue // the abandoned exec is still being killed
		}
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec after the abandoned one: %+v %v", res, err)
		}
		break
	}

	// Files, one by one and as archives.
	if err := sb.Mkdir(ctx, "/workspace/d/e", true); err != nil {
		t.Fatal(err)
	}
	if err := sb.WriteFile(ctx, "d/e/f.txt", []byte("content"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := sb.Move(ctx, "d/e/f.txt", "d/g.txt"); err != nil {
		t.Fatal(err)
	}
	if b, err := sb.ReadFile(ctx, "/workspace/d/g.txt"); err != nil || string(b) != "content" {
		t.Fatalf("read: %q %v", b, err)
	}
	if fi, err := sb.Stat(ctx, "d/g.txt"); err != nil || fi.Size != 7 || fi.Mode != 0o600 {
		t.Fatalf("stat: %+v %v", fi, err)
	}
	if ents, err := sb.ListDir(ctx, "d"); err != nil || len(ents) != 2 {
		t.Fatalf("list: %+v %v", ents, err)
	}
	if _, err := sb.ReadFile(ctx, "missing"); !client.IsNotFound(err) {
		t.Fatalf("read of a missing file: %v", err)
	}
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	_ = tw.WriteHeader(&tar.Header{Name: "up.txt", Mode: 0o644, Size: 2, Typeflag: tar.TypeReg})
	_, _ = tw.Write([]byte("up"))
	_ = tw.Close()
	if err := sb.Upload(ctx, "/workspace/d", &tb); err != nil {
		t.Fatal(err)
	}
	var down bytes.Buffer
	if err := sb.Download(ctx, "/workspace/d", &down); err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	tr := tar.NewReader(&down)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		b, _ := io.ReadAll(tr)
		names[h.Name] = string(b)
	}
	if names["d/up.txt"] != "up" || names["d/g.txt"] != "content" {
		t.Fatalf("downloaded %v", names)
	}
	if err := sb.Remove(ctx, "d", true); err != nil {
		t.Fatal(err)
	}

	// The audit trail names the calls; a deleted sandbox refuses calls.
	page, err := c.Audit(ctx, api.AuditQuery{Sandbox: sb.ID(), Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range page.Events {
		kinds = append(kinds, e.Kind)
	}
	for _, k := range []string{"sandbox.create", "process.exec", "process.start", "process.stdin", "file.write", "file.upload"} {
		if !strings.Contains(strings.Join(kinds, " "), k) {
			t.Errorf("audit lacks %s: %v", k, kinds)
		}
	}
	if err := sb.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Exec(ctx, api.Exec{Args: []string{"true"}}); !client.IsGone(err) {
		t.Fatalf("exec in a deleted sandbox: %v", err)
	}
	if _, err := c.Sandbox("sb-0000000000000000").Info(ctx); !client.IsNotFound(err) {
		t.Fatalf("info of an unknown sandbox: %v", err)
	}
}
