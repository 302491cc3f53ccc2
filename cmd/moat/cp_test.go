package main

import (
	"archive/tar"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/internal/hosttest"
)

// The refusals of symlinks are tested where they are made: the host
// paths, the extraction and the archiving in package fstree (TestOpenPath,
// TestExtractIntoHostile, TestWriteTarNoFollow and their fuzz targets),
// the copies in package client (TestCopyAgainstDaemon), and here through
// the command, with a fake daemon and with a real one (cp_e2e_test.go).

// The shared fixtures of host-side copy tests (internal/hosttest).
type (
	extractFixture = hosttest.Victims
)

var (
	realTempDir       = hosttest.RealTempDir
	must              = hosttest.Must
	newExtractFixture = hosttest.NewVictims
	tarOf             = hosttest.Tar
	ent               = hosttest.E
)

// TestCopyHostSymlinks: without a daemon able to bind host paths, the
// same refusals through the command (a fake daemon; the symlinks stand
// for ones a sandbox planted in its workspace).
func TestCopyHostSymlinks(t *testing.T) {
	mux := fakeDaemon(t)
	mux.HandleFunc("GET /v1/sandboxes/sb-1/archive", func(w http.ResponseWriter, r *http.Request) {
		w.Write(tarOf(ent("out", "", tar.TypeReg, "pwned")))
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
	ws := filepath.Join(x.Parent, "target")
	must(t, os.Mkdir(ws, 0o755))
	must(t, os.Symlink(x.File, filepath.Join(ws, "out")))
	must(t, os.Symlink(x.Dir, filepath.Join(ws, "dir")))
	must(t, os.Symlink(x.Parent, filepath.Join(ws, "up")))
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
	if want := []string{"x 2 " + x.File}; !slices.Equal(uploaded, want) {
		t.Errorf("uploaded %q, want %q", uploaded, want)
	}
	x.Check(t)
	// The control: a host program writing to the same path reaches the
	// victim.
	must(t, os.WriteFile(filepath.Join(ws, "out"), []byte("pwned"), 0o644))
	if b, _ := os.ReadFile(x.File); string(b) != "pwned" {
		t.Errorf("control: %q", b)
	}
}
