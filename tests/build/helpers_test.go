//go:build linux

package build

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/internal/testutil"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.Cleanup()
	os.Exit(code)
}

// hangGuard bounds one moat build: the slowest here (a cold Go build)
// takes seconds; one still running after it is stuck.
const hangGuard = 90 * time.Second

// env is the environment moat runs with: this one without moat's own
// variables (no daemon is reached by accident), plus extra.
func env(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MOAT_") {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}

// result is one moat build: its exit code, output, and the build of its
// --json output (nil without --json or when it printed none).
type result struct {
	code           int
	stdout, stderr string
	build          *api.Build
	out            string // --out
}

// moat runs the moat binary with args and the environment e, in a
// temporary working directory.
func moat(t *testing.T, e []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, testutil.Moat(t), args...)
	cmd.Env, cmd.Dir = e, t.TempDir()
	var o, eb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &eb
	err := cmd.Run()
	r := result{stdout: o.String(), stderr: eb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("moat %q: %v", args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("moat %q: still running after %s\nstderr: %s", args, hangGuard, r.stderr)
	}
	return r
}

// builder runs moat build against one daemon: a private one (local, data
// in a temporary directory) or the daemon of the environment.
type builder struct {
	env   []string
	local bool
	data  string // a private daemon's MOAT_DATA
}

// privateBuilder builds in private daemons with data under a temporary
// directory (one per builder) and, when config is not "", that operator
// config.
func privateBuilder(t *testing.T, config string) *builder {
	t.Helper()
	testutil.RequireRoot(t)
	data := t.TempDir()
	extra := []string{"MOAT_DATA=" + data}
	if config != "" {
		p := filepath.Join(t.TempDir(), "config.toml")
		if err := os.WriteFile(p, []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
		extra = append(extra, "MOAT_CONFIG="+p)
	}
	return &builder{env: env(extra...), local: true, data: data}
}

// build runs `moat build --json --out DIR [flags] source -- argv` and
// decodes the build it prints.
func (b *builder) build(t *testing.T, flags []string, source string, argv ...string) result {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out")
	args := []string{"build", "--json", "--out", out}
	if b.local {
		args = append(args, "--local")
	}
	args = append(append(append(args, flags...), source, "--"), argv...)
	r := b.run(t, args...)
	r.out = out
	var bd api.Build
	if err := json.Unmarshal([]byte(r.stdout), &bd); err != nil {
		t.Fatalf("moat %q: exit %d, stdout not a build: %v\nstdout: %s\nstderr: %s", args, r.code, err, r.stdout, r.stderr)
	}
	r.build = &bd
	return r
}

// run runs moat with args in b's environment.
func (b *builder) run(t *testing.T, args ...string) result {
	t.Helper()
	return moat(t, b.env, args...)
}

// sh builds with `sh -c script`.
func (b *builder) sh(t *testing.T, flags []string, source, script string) result {
	t.Helper()
	return b.build(t, flags, source, "/bin/sh", "-c", script)
}

// want checks r's status, reason and exit code.
func (r result) want(t *testing.T, what, status, reason string, code int) {
	t.Helper()
	if r.build.Status != status || r.build.Reason != reason || r.code != code {
		t.Fatalf("%s: %s/%s exit %d, want %s/%s exit %d\nmessage: %s\nlog: %s\nstderr: %s", what, r.build.Status, r.build.Reason, r.code,
			status, reason, code, r.build.Message, logOf(r.build), r.stderr)
	}
}

// logOf is a build's log as the record keeps it.
func logOf(b *api.Build) string { return b.Log.Head + b.Log.Tail }

// artifact finds the artifact p of b.
func artifact(t *testing.T, b *api.Build, p string) api.BuildArtifact {
	t.Helper()
	for _, a := range b.Artifacts {
		if a.Path == p {
			return a
		}
	}
	t.Fatalf("no artifact %s in %+v", p, b.Artifacts)
	return api.BuildArtifact{}
}

// fileSHA256 is the sha256 (hex) of the file p.
func fileSHA256(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// writeTree writes files (path → content; a path ending in / is a
// directory) under a new temporary directory and returns it.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, c := range files {
		full := filepath.Join(dir, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// tarFile writes the entries as a tar (gzip when gz) in a temporary
// directory and returns its path.
func tarFile(t *testing.T, gz bool, entries ...*tar.Header) string {
	t.Helper()
	return tarWith(t, gz, func(tw *tar.Writer) {
		for _, h := range entries {
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			if h.Typeflag == tar.TypeReg && h.Size > 0 {
				if _, err := tw.Write(bytes.Repeat([]byte("x"), int(h.Size))); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}

// tarWith writes a tar (gzip when gz) made by fill.
func tarWith(t *testing.T, gz bool, fill func(*tar.Writer)) string {
	t.Helper()
	var buf bytes.Buffer
	var tw *tar.Writer
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&buf)
		tw = tar.NewWriter(zw)
	} else {
		tw = tar.NewWriter(&buf)
	}
	fill(tw)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(t.TempDir(), "src.tar")
	if gz {
		p += ".gz"
	}
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// tarOfDir packs the directory dir as a tar.gz, as another tool would:
// its own owners (12345:54321), mtimes (now) and order (reversed), with
// "./" names.
func tarOfDir(t *testing.T, dir string) string {
	t.Helper()
	type ent struct {
		rel string
		fi  os.FileInfo
	}
	var ents []ent
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		ents = append(ents, ent{rel, fi})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	return tarWith(t, true, func(tw *tar.Writer) {
		// Directories first (a tar lists a directory before its
		// entries), then the files in reverse order.
		var files []ent
		for _, e := range ents {
			if !e.fi.IsDir() {
				files = append(files, e)
				continue
			}
			h := &tar.Header{Typeflag: tar.TypeDir, Name: "./" + e.rel + "/", Mode: 0o755, Uid: 12345, Gid: 54321, ModTime: now}
			if e.rel == "." {
				h.Name = "./"
			}
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
		}
		for i := len(files) - 1; i >= 0; i-- {
			e := files[i]
			b, err := os.ReadFile(filepath.Join(dir, e.rel))
			if err != nil {
				t.Fatal(err)
			}
			h := &tar.Header{Typeflag: tar.TypeReg, Name: "./" + e.rel, Mode: int64(e.fi.Mode().Perm()), Size: int64(len(b)), Uid: 12345, Gid: 54321, ModTime: now}
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			if _, err := tw.Write(b); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// kept lists what under the directory data is named after the build id.
func kept(t *testing.T, data, id string) []string {
	t.Helper()
	var found []string
	filepath.WalkDir(data, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), id) {
			found = append(found, p)
		}
		return nil
	})
	return found
}

// markerPresent counts the processes of the host that have marker on
// their command line.
func markerPresent(t *testing.T, marker string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(marker)) {
			n++
		}
	}
	return n
}

// markerGone checks that no process on the host has marker on its
// command line: what a build started has ended with it.
func markerGone(t *testing.T, marker string) {
	t.Helper()
	if n := markerPresent(t, marker); n != 0 {
		t.Errorf("ESCAPE: %d processes with %s on their command line outlived their build", n, marker)
	}
}
