//go:build linux

package build

import (
	"archive/tar"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/moat-sandbox/moat/api"
)

// Hostile source packages, sent as tar files (checked by the daemon) and
// as a directory (checked here too): each refused before anything runs,
// exit 2 with the reason in --json; each beside its control, the same
// package fixed or at the limit, which builds.

func hReg(name string, size int64) *tar.Header {
	return &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o644}
}

func hDir(name string) *tar.Header {
	return &tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755}
}

func hSymlink(name, target string) *tar.Header {
	return &tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}
}

// hFiles is n regular files of size bytes each.
func hFiles(n int, size int64) []*tar.Header {
	var hs []*tar.Header
	for i := range n {
		hs = append(hs, hReg(fmt.Sprintf("f%02d", i), size))
	}
	return hs
}

func TestBuildSourceRefusals(t *testing.T) {
	b := privateBuilder(t, "")
	for _, c := range []struct {
		name    string
		flags   []string
		bad     []*tar.Header
		control []*tar.Header
		reason  string
	}{
		{"absolute path", nil,
			[]*tar.Header{hReg("/etc/moat-evil", 3)}, []*tar.Header{hReg("etc/moat-evil", 3)}, api.ReasonSourceBadPath},
		{"dot-dot", nil,
			[]*tar.Header{hDir("a/"), hReg("a/../../moat-evil", 3)}, []*tar.Header{hDir("a/"), hReg("moat-evil", 3)}, api.ReasonSourceBadPath},
		{"escaping symlink", nil,
			[]*tar.Header{hDir("inc/"), hReg("inc/a.h", 3), hSymlink("link", "../../etc/passwd")},
			[]*tar.Header{hDir("inc/"), hReg("inc/a.h", 3), hSymlink("link", "inc/a.h")}, api.ReasonSourceBadPath},
		{"absolute symlink", nil,
			[]*tar.Header{hSymlink("link", "/etc/passwd")}, []*tar.Header{hReg("a", 1), hSymlink("link", "a")}, api.ReasonSourceBadPath},
		{"device", nil,
			[]*tar.Header{{Typeflag: tar.TypeChar, Name: "null", Devmajor: 1, Devminor: 3, Mode: 0o666}}, []*tar.Header{hReg("null", 0)}, api.ReasonSourceBadType},
		{"fifo", nil,
			[]*tar.Header{{Typeflag: tar.TypeFifo, Name: "pipe", Mode: 0o644}}, []*tar.Header{hReg("pipe", 0)}, api.ReasonSourceBadType},
		{"too many files", []string{"--max-files", "10"},
			hFiles(11, 1), hFiles(10, 1), api.ReasonSourceTooManyFiles},
		{"file too large", []string{"--max-file-bytes", "1024"},
			[]*tar.Header{hReg("big", 1025)}, []*tar.Header{hReg("big", 1024)}, api.ReasonSourceFileTooLarge},
		{"too large", []string{"--max-total-bytes", "4096"},
			append(hFiles(4, 1024), hReg("one-more", 1)), hFiles(4, 1024), api.ReasonSourceTooLarge},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := b.build(t, c.flags, tarFile(t, false, c.bad...), "true")
			r.want(t, "refused", api.BuildRefused, c.reason, 2)
			if len(r.build.Artifacts) != 0 || r.build.ExitCode != nil {
				t.Errorf("a refused build ran: %+v", r.build)
			}
			r = b.build(t, c.flags, tarFile(t, true, c.control...), "true")
			r.want(t, "control", api.BuildSucceeded, "", 0)
		})
	}
	t.Run("garbage", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "src.tar")
		os.WriteFile(p, []byte("this is not a tar archive, not even close to one"), 0o644)
		r := b.build(t, nil, p, "true")
		r.want(t, "garbage", api.BuildRefused, api.ReasonSourceUnreadable, 2)
	})
}

// TestBuildSourceDirectory: a FIFO in a directory SOURCE refuses the
// build here (the tar would leave it out); control: without it the same
// directory builds. The caps are checked here too, at the limit passing.
func TestBuildSourceDirectory(t *testing.T) {
	b := privateBuilder(t, "")
	src := writeTree(t, map[string]string{"a": "12345", "sub/b": "12345"})
	fifo := filepath.Join(src, "sub", "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	r := b.build(t, nil, src, "true")
	r.want(t, "a FIFO in the directory", api.BuildRefused, api.ReasonSourceBadType, 2)
	os.Remove(fifo)
	// a, sub, sub/b: three entries.
	r = b.build(t, []string{"--max-files", "2"}, src, "true")
	r.want(t, "--max-files 2", api.BuildRefused, api.ReasonSourceTooManyFiles, 2)
	r = b.build(t, []string{"--max-files", "3", "--max-file-bytes", "5", "--max-total-bytes", "10"}, src, "cat", "a", "sub/b")
	r.want(t, "control: at the limits", api.BuildSucceeded, "", 0)
}
