// Package hosttest holds what the tests of host-side copies share (the
// SDK's and moat cp's extraction in fstree, the command in cmd/moat): a
// destination with victims next to it that an escape would reach, and
// small tar archives. It is linked by tests only.
package hosttest

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// RealTempDir is t.TempDir() with its symlinks resolved.
func RealTempDir(t testing.TB) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Must fails the test on err.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// VictimContent is what the victim file holds.
const VictimContent = "do not touch\n"

// Victims is a temporary Parent directory holding a 0600 File and an
// empty Dir that an escape from a destination named "target" in Parent
// would reach.
type Victims struct {
	Parent, File, Dir string
}

// NewVictims makes them in a fresh temporary directory.
func NewVictims(t testing.TB) *Victims {
	t.Helper()
	v := &Victims{Parent: RealTempDir(t)}
	v.File = filepath.Join(v.Parent, "victim")
	v.Dir = filepath.Join(v.Parent, "victimdir")
	Must(t, os.WriteFile(v.File, []byte(VictimContent), 0o600))
	Must(t, os.Mkdir(v.Dir, 0o755))
	return v
}

// Check fails the test if anything next to the destination ("target")
// changed or appeared.
func (v *Victims) Check(t testing.TB) {
	t.Helper()
	b, err := os.ReadFile(v.File)
	st, serr := os.Lstat(v.File)
	if err != nil || string(b) != VictimContent || serr != nil || st.Mode() != 0o600 {
		t.Errorf("the victim file changed: %q %v %v", b, err, st)
	}
	ents, _ := os.ReadDir(v.Dir)
	if len(ents) != 0 {
		t.Errorf("the victim directory holds %v", ents)
	}
	ents, _ = os.ReadDir(v.Parent)
	for _, e := range ents {
		if n := e.Name(); n != "victim" && n != "victimdir" && n != "target" {
			t.Errorf("%s was created next to the destination", n)
		}
	}
}

// Entry is one entry of a test archive.
type Entry struct {
	Name, Link string
	Type       byte
	Body       string
}

// Tar writes the entries as a PAX archive, mode 0644 each.
func Tar(entries ...Entry) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		tw.WriteHeader(&tar.Header{Name: e.Name, Linkname: e.Link, Typeflag: e.Type, Mode: 0o644, Size: int64(len(e.Body)), Format: tar.FormatPAX})
		io.WriteString(tw, e.Body)
	}
	tw.Close()
	return buf.Bytes()
}

// E is an Entry.
func E(name, link string, typ byte, body string) Entry {
	return Entry{Name: name, Link: link, Type: typ, Body: body}
}

// ReadTar lists a tar stream's entries as "name type [link] [content]".
func ReadTar(t testing.TB, r io.Reader) []string {
	t.Helper()
	var got []string
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return got
		}
		if err != nil {
			t.Errorf("tar: %v", err)
			return got
		}
		b, _ := io.ReadAll(tr)
		got = append(got, strings.TrimSpace(h.Name+" "+string(h.Typeflag)+" "+h.Linkname+" "+string(b)))
	}
}
