package linux

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/moat-sandbox/moat/runtime/linux/leaninit"
)

func testBinary(b []byte) leaninit.Binary {
	sum := sha256.Sum256(b)
	return leaninit.Binary{Bytes: b, SHA256: hex.EncodeToString(sum[:])}
}

// TestInstallLeanInit: the init is written once, content-addressed,
// root-owned and read-only, in a directory others may search but not
// write; a second install finds it; an embedded binary that does not
// match its checksum, a file someone could have written and a state
// directory others may write to are refused.
func TestInstallLeanInit(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (uid 0): the init must be root-owned")
	}
	state := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(state, 0o711); err != nil {
		t.Fatal(err)
	}
	bin := testBinary([]byte("#!/bin/true\n"))
	p, err := installLeanInit(state, bin)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(state, initDir, "moat-init-"+bin.SHA256); p != want {
		t.Fatalf("path %s, want %s", p, want)
	}
	fi, err := os.Lstat(p)
	if err != nil || fi.Mode() != initFileMode || fi.Size() != int64(len(bin.Bytes)) {
		t.Fatalf("installed file: %v %v", fi.Mode(), err)
	}
	if di, err := os.Lstat(filepath.Dir(p)); err != nil || di.Mode().Perm() != initDirMode {
		t.Fatalf("init directory: %v %v", di.Mode(), err)
	}
	if again, err := installLeanInit(state, bin); err != nil || again != p {
		t.Fatalf("second install: %s %v", again, err)
	}

	// A checksum that is not the content's: nothing is written.
	bad := bin
	bad.Bytes = []byte("other")
	bad.SHA256 = testBinary([]byte("something else")).SHA256
	if _, err := installLeanInit(state, bad); err == nil {
		t.Fatal("mismatched checksum accepted")
	}
	if _, err := os.Lstat(filepath.Join(state, initDir, "moat-init-"+bad.SHA256)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("mismatched binary written: %v", err)
	}

	// A writable file in its place is not used.
	if err := os.Chmod(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := installLeanInit(state, bin); !errors.Is(err, errUntrustedInit) {
		t.Fatalf("writable init: %v", err)
	}
	if err := os.Chmod(p, initFileMode); err != nil {
		t.Fatal(err)
	}

	// A state directory others may write to is refused.
	if err := os.Chmod(state, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := installLeanInit(state, bin); !errors.Is(err, errUntrustedInit) {
		t.Fatalf("world-writable state directory: %v", err)
	}
}

// TestResolveInitFallback: WithInitPath, or a build without the lean init,
// starts sandboxes from initPath.
func TestResolveInitFallback(t *testing.T) {
	r := &Runtime{initPath: "/opt/moat-test", stateDir: t.TempDir()}
	r.resolveInit()
	if r.initExe != "/opt/moat-test" {
		t.Fatalf("initExe %q with WithInitPath", r.initExe)
	}
	if _, ok := leaninit.Embedded(); !ok {
		r := &Runtime{initPath: selfExe, stateDir: t.TempDir()}
		r.resolveInit()
		if r.initExe != selfExe {
			t.Fatalf("initExe %q without the lean init", r.initExe)
		}
	}
}
