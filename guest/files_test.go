package guest

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"testing"
)

// TestSandboxPath: host-given paths become clean absolute paths of the
// sandbox; relative ones start at /workspace; ".." never climbs above "/".
func TestSandboxPath(t *testing.T) {
	for in, want := range map[string]string{
		"a":                  "/workspace/a",
		"./a/b/":             "/workspace/a/b",
		".":                  "/workspace",
		"../../../etc":       "/etc",
		"/a/../..":           "/",
		"/a//b/.":            "/a/b",
		"/":                  "/",
		"/workspace/x/../y":  "/workspace/y",
		"../../../../../../": "/",
	} {
		got, err := sandboxPath(in)
		if err != nil || got != want {
			t.Errorf("sandboxPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "a\x00b", "/\x00"} {
		_, err := sandboxPath(in)
		var fe *fileError
		if !errors.As(err, &fe) || fe.code != codeInvalid {
			t.Errorf("sandboxPath(%q): %v, want EINVAL", in, err)
		}
	}
}

func TestSplitPath(t *testing.T) {
	for in, want := range map[string][2]string{
		"/":      {"/", ""},
		"/a":     {"/", "a"},
		"/a/b":   {"/a", "b"},
		"/a/b/c": {"/a/b", "c"},
	} {
		if d, n := splitPath(in); d != want[0] || n != want[1] {
			t.Errorf("splitPath(%q) = %q, %q; want %q", in, d, n, want)
		}
	}
}

// TestCleanTarName: the name rules of extraction.
func TestCleanTarName(t *testing.T) {
	ok := map[string]string{
		"a":         "a",
		"a/b/c":     "a/b/c",
		"./a/b/":    "a/b",
		"a//b":      "a/b",
		"./":        "",
		".":         "",
		"a/./b":     "a/b",
		"...":       "...",
		"..a":       "..a",
		"a..":       "a..",
		`..\x`:      `..\x`, // a backslash is an ordinary byte on Linux
		"dir/":      "dir",
		"./a/b/./c": "a/b/c",
	}
	for in, want := range ok {
		got, err := cleanTarName(in)
		if err != nil || got != want {
			t.Errorf("cleanTarName(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "/abs", "//abs", "/", "../escape", "a/../../b", "a/..", "..", "./..", "a/b/../../..", "a\x00b"} {
		if got, err := cleanTarName(in); err == nil {
			t.Errorf("cleanTarName(%q) = %q, want an error", in, got)
		}
	}
}

// TestModes: setuid, setgid and sticky never survive; the creation umask
// (022) applies to directories and extracted entries.
func TestModes(t *testing.T) {
	for _, c := range []struct {
		mode, def, want uint32
	}{
		{0, 0o755, 0o755}, {0o700, 0o755, 0o700}, {0o777, 0o755, 0o755},
		{0o4755, 0o755, 0o755}, {0o2775, 0o755, 0o755}, {0o1777, 0o755, 0o755}, {0o7000, 0o755, 0o755},
	} {
		if got := createMode(c.mode, c.def); got != c.want {
			t.Errorf("createMode(%o, %o) = %o, want %o", c.mode, c.def, got, c.want)
		}
	}
	for mode, want := range map[int64]uint32{0o4755: 0o755, 0o6777: 0o755, 0o1777: 0o755, 0o640: 0o640, 0o444: 0o444, 0: 0, 0o7777: 0o755} {
		if got := tarPerm(mode); got != want {
			t.Errorf("tarPerm(%o) = %o, want %o", mode, got, want)
		}
	}
}

// TestEOFWatch: a complete archive ends at its marker without reaching the
// end of the stream; one that lacks the marker reaches it.
func TestEOFWatch(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range []string{"a", "b"} {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: 3, Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte("abc")); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	full := buf.Bytes()
	for _, c := range []struct {
		name      string
		data      []byte
		truncated bool
	}{
		{"complete", full, false},
		{"complete with padding", append(append([]byte(nil), full...), make([]byte, 8192)...), false},
		{"no end marker", full[:2048], true},
		{"one zero block", full[:2048+512], true},
	} {
		w := &eofWatch{r: bytes.NewReader(c.data)}
		tr := tar.NewReader(w)
		n := 0
		for {
			_, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if _, err := io.Copy(io.Discard, tr); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			n++
		}
		if n != 2 || w.eof != c.truncated {
			t.Errorf("%s: %d entries, truncated=%v, want 2 and %v", c.name, n, w.eof, c.truncated)
		}
	}
}
