package machine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// BwrapArgs mirrors the host's top-level system paths as they are: links
// as links (merged /usr), directories as read-only binds, missing ones not
// at all.
func TestBwrapArgsMirrorsHostLayout(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"usr/bin", "usr/lib", "sbin", "lib64"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("usr/bin", filepath.Join(root, "bin")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("usr/lib", filepath.Join(root, "lib")); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(BwrapArgs("/usr/bin/bwrap", root, "/bin/echo", "hello"), " ")
	want := "/usr/bin/bwrap --unshare-all --die-with-parent --new-session --ro-bind /usr /usr" +
		" --symlink usr/bin /bin --symlink usr/lib /lib" +
		" --ro-bind " + root + "/lib64 /lib64 --ro-bind " + root + "/sbin /sbin" +
		" --ro-bind /etc /etc --proc /proc --dev /dev --tmpfs /tmp --tmpfs /workspace --chdir /workspace /bin/echo hello"
	if got != want {
		t.Errorf("BwrapArgs:\n got %s\nwant %s", got, want)
	}
}

func TestShellQuote(t *testing.T) {
	got := ShellQuote([]string{"/usr/bin/moat", "run", "--", "/bin/true", "it's", "", "a b", "--soak", "5s"})
	want := `/usr/bin/moat run -- /bin/true 'it'\''s' '' 'a b' --soak 5s`
	if got != want {
		t.Errorf("ShellQuote = %s, want %s", got, want)
	}
}

func TestVersion(t *testing.T) {
	if got := Version("/bin/sh", "-c", "echo 'x 1.2'; echo more"); got != "x 1.2" {
		t.Errorf("Version = %q, want the first line", got)
	}
	if got := Version("/bin/sh", "-c", "exit 3"); !strings.HasPrefix(got, "unknown (sh -c exit 3: ") {
		t.Errorf("Version of a failing command = %q", got)
	}
}

func newTimer(t *testing.T, timeout time.Duration, captureStdout bool) *Timer {
	t.Helper()
	tm, err := NewTimer(timeout, captureStdout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tm.Close)
	return tm
}

func TestTimer(t *testing.T) {
	tm := newTimer(t, 10*time.Second, true)
	if _, err := tm.Time([]string{"/bin/sh", "-c", "echo hello"}); err != nil {
		t.Fatal(err)
	}
	if got := string(tm.Stdout(64)); got != "hello\n" {
		t.Errorf("Stdout = %q", got)
	}
	// The files are emptied between runs.
	if _, err := tm.Time([]string{"/bin/sh", "-c", "echo hi"}); err != nil {
		t.Fatal(err)
	}
	if got := string(tm.Stdout(64)); got != "hi\n" {
		t.Errorf("Stdout of the second run = %q", got)
	}
	_, err := tm.Time([]string{"/bin/sh", "-c", "echo oops >&2; echo again >&2; exit 2"})
	if err == nil || !strings.Contains(err.Error(), "stderr: oops | again") {
		t.Errorf("failing run: %v", err)
	}

	quiet := newTimer(t, 50*time.Millisecond, false)
	if _, err := quiet.Time([]string{"/bin/sh", "-c", "echo hello"}); err != nil {
		t.Fatal(err)
	}
	if got := quiet.Stdout(64); got != nil {
		t.Errorf("Stdout without capture = %q", got)
	}
	if _, err := quiet.Time([]string{"sleep", "5"}); err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Errorf("slow run: %v", err)
	}
}

func TestDescribe(t *testing.T) {
	h := Describe()
	if h.CPUs < 1 || h.GoVersion == "" || h.Kernel == "" {
		t.Errorf("Describe = %+v", h)
	}
	if _, err := os.Stat("/proc/meminfo"); err == nil && h.MemTotalKiB <= 0 {
		t.Errorf("Describe read no MemTotal: %+v", h)
	}
}
