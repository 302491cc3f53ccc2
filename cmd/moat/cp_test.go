package main

import (
	"archive/tar"
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/api"
)

// The refusals of symlinks are tested where they are made: the host
// paths, the extraction and the archiving in package fstree (TestOpenPath,
// TestExtractIntoHostile, TestWriteTarNoFollow and their fuzz targets),
// the copies in package client (TestCopyAgainstDaemon), and here through
// the command, with a fake daemon and with a real one (cp_e2e_test.go).

// realTempDir is t.TempDir() with its symlinks resolved.
func realTempDir(t testing.TB) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// extractFixture is a destination directory with, next to it, a 0600
// file and a directory that an escape would reach.
type extractFixture struct {
	parent, victim, victimDir string
}

const victimContent = "do not touch\n"

func newExtractFixture(t testing.TB) *extractFixture {
	t.Helper()
	x := &extractFixture{parent: realTempDir(t)}
	x.victim = filepath.Join(x.parent, "victim")
	x.victimDir = filepath.Join(x.parent, "victimdir")
	must(t, os.WriteFile(x.victim, []byte(victimContent), 0o600))
	must(t, os.Mkdir(x.victimDir, 0o755))
	return x
}

// check fails if anything next to the destination ("target") changed.
func (x *extractFixture) check(t testing.TB) {
	t.Helper()
	b, err := os.ReadFile(x.victim)
	st, serr := os.Lstat(x.victim)
	if err != nil || string(b) != victimContent || serr != nil || st.Mode() != 0o600 {
		t.Errorf("the victim file changed: %q %v %v", b, err, st)
	}
	ents, _ := os.ReadDir(x.victimDir)
	if len(ents) != 0 {
		t.Errorf("the victim directory holds %v", ents)
	}
	ents, _ = os.ReadDir(x.parent)
	for _, e := range ents {
		if n := e.Name(); n != "victim" && n != "victimdir" && n != "target" {
			t.Errorf("%s was created next to the destination", n)
		}
	}
}

type ent struct {
	name, link string
	typ        byte
	body       string
}

func tarOf(entries ...ent) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		tw.WriteHeader(&tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644, Size: int64(len(e.body)), Format: tar.FormatPAX})
		io.WriteString(tw, e.body)
	}
	tw.Close()
	return buf.Bytes()
}

// TestCopyHostSymlinks: without a daemon able to bind host paths, the
// same refusals through the command (a fake daemon; the symlinks stand
// for ones a sandbox planted in its workspace).
func TestCopyHostSymlinks(t *testing.T) {
	mux := fakeDaemon(t)
	mux.HandleFunc("GET /v1/sandboxes/sb-1/archive", func(w http.ResponseWriter, r *http.Request) {
		w.Write(tarOf(ent{"out", "", tar.TypeReg, "pwned"}))
	})
	mux.HandleFunc("GET /v1/sandboxes/sb-1/files/stat", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 404, api.Error{Code: api.CodeFile, Errno: "ENOENT", Message: "no such file"})
	})
	var uploaded []string
	mux.HandleFunc("PUT /v1/sandboxes/sb-1/archive", func(w http.ResponseWriter, r *http.Request) {
		uploaded = append(uploaded, readTar(t, r.Body)...)
		replyJSON(w, 200, api.Written{})
	})
	mux.HandleFunc("PUT /v1/sandboxes/sb-1/files", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		uploaded = append(uploaded, string(b))
		replyJSON(w, 200, api.Written{})
	})
	x := newExtractFixture(t)
	ws := filepath.Join(x.parent, "target")
	must(t, os.Mkdir(ws, 0o755))
	must(t, os.Symlink(x.victim, filepath.Join(ws, "out")))
	must(t, os.Symlink(x.victimDir, filepath.Join(ws, "dir")))
	must(t, os.Symlink(x.parent, filepath.Join(ws, "up")))
	for _, dst := range []string{"out", "dir", "dir/", "up/victim", "up/victimdir/x"} {
		_, errOut, code := sbRun(t, "", "cp", "sb-1:/workspace/out", ws+"/"+dst)
		if code == 0 || !strings.Contains(errOut, "is a symlink") {
			t.Errorf("cp to %s: %d %q", dst, code, errOut)
		}
		t.Logf("cp to %s: %s", dst, errOut)
	}
	for _, src := range []string{"dir/", "up/victim", "up/victimdir"} {
		_, errOut, code := sbRun(t, "", "cp", ws+"/"+src, "sb-1:/tmp/x")
		if code == 0 || !strings.Contains(errOut, "is a symlink") {
			t.Errorf("cp from %s: %d %q", src, code, errOut)
		}
		t.Logf("cp from %s: %s", src, errOut)
	}
	if _, errOut, code := sbRun(t, "", "cp", filepath.Join(ws, "out"), "sb-1:/tmp/x"); code != 0 {
		t.Errorf("cp of a symlink: %d %q", code, errOut)
	}
	if want := []string{"x 2 " + x.victim}; !slices.Equal(uploaded, want) {
		t.Errorf("uploaded %q, want %q", uploaded, want)
	}
	x.check(t)
	// The control: a host program writing to the same path reaches the
	// victim.
	must(t, os.WriteFile(filepath.Join(ws, "out"), []byte("pwned"), 0o644))
	if b, _ := os.ReadFile(x.victim); string(b) != "pwned" {
		t.Errorf("control: %q", b)
	}
}
