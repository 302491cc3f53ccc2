package machine

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Timer runs one command at a time and times it, wall-clock from fork to
// the reaped exit. stdin is /dev/null, stdout /dev/null or (captured) a
// temporary file, stderr a temporary file: all plain files handed to the
// child, so os/exec starts no copying goroutine inside the timed window
// and the clock stops when the child is reaped, not when some pipe
// closes. A Timer is not safe for concurrent use: run a burst with one
// Timer per command.
type Timer struct {
	devnull, stdout, stderr *os.File // stdout nil unless captured
	timeout                 time.Duration
}

// NewTimer returns a Timer that kills and fails a run taking longer than
// timeout. With captureStdout, Stdout returns the start of the last run's
// output; otherwise the output is discarded.
func NewTimer(timeout time.Duration, captureStdout bool) (*Timer, error) {
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	t := &Timer{devnull: devnull, timeout: timeout}
	files := []**os.File{&t.stderr}
	if captureStdout {
		files = append(files, &t.stdout)
	}
	for _, f := range files {
		*f, err = os.CreateTemp("", "moat-bench-")
		if err != nil {
			t.Close()
			return nil, err
		}
		os.Remove((*f).Name())
	}
	return t, nil
}

// Close releases the Timer's files.
func (t *Timer) Close() {
	for _, f := range []*os.File{t.devnull, t.stdout, t.stderr} {
		if f != nil {
			f.Close()
		}
	}
}

// Time runs argv once and returns its wall-clock duration, or an error
// (with the start of its stderr) if it did not exit 0 in time.
func (t *Timer) Time(argv []string) (time.Duration, error) {
	for _, f := range []*os.File{t.stdout, t.stderr} {
		if f == nil {
			continue
		}
		if err := f.Truncate(0); err != nil {
			return 0, err
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return 0, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), t.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = t.devnull, t.devnull, t.stderr
	if t.stdout != nil {
		cmd.Stdout = t.stdout
	}

	begin := time.Now()
	err := cmd.Run()
	d := time.Since(begin)

	if err == nil {
		return d, nil
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("timed out after %s (killed): %w", t.timeout, err)
	}
	buf := make([]byte, 1024)
	n, _ := t.stderr.ReadAt(buf, 0)
	if msg := strings.TrimSpace(string(buf[:n])); msg != "" {
		return d, fmt.Errorf("%w; stderr: %s", err, strings.ReplaceAll(msg, "\n", " | "))
	}
	return d, err
}

// Stdout returns up to limit bytes from the start of the last run's stdout
// (nothing unless the Timer captures it).
func (t *Timer) Stdout(limit int) []byte {
	if t.stdout == nil {
		return nil
	}
	buf := make([]byte, limit)
	n, _ := t.stdout.ReadAt(buf, 0)
	return buf[:n]
}

// Version runs bin with args and returns the first line of its output, or
// a note saying why the version is unknown (a program without a version
// flag is not an error).
func Version(bin string, args ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("unknown (%s %s: %v)", filepath.Base(bin), strings.Join(args, " "), err)
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(line)
}

// ShellQuote renders argv as one line a POSIX shell would split back into
// the same words.
func ShellQuote(argv []string) string {
	words := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
				strings.ContainsRune("-_./=:,+@%", r))
		}) < 0 {
			words[i] = a
			continue
		}
		words[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(words, " ")
}

// BwrapArgs builds a bubblewrap command running cmd in a sandbox that
// matches moat's as closely as bwrap's flags allow: all namespaces, the
// host's /usr and /etc read-only, the top-level system links or
// directories mirrored as they are on the host under hostRoot (a symlink
// as the same symlink on a merged-/usr host, a read-only bind otherwise),
// fresh /proc and /dev, and tmpfs /tmp and /workspace as the working
// directory.
func BwrapArgs(bin, hostRoot string, cmd ...string) []string {
	args := []string{bin, "--unshare-all", "--die-with-parent", "--new-session",
		"--ro-bind", "/usr", "/usr"}
	for _, l := range HostLayout(hostRoot) {
		if l.Target != "" {
			args = append(args, "--symlink", l.Target, l.Path)
		} else {
			args = append(args, "--ro-bind", filepath.Join(hostRoot, l.Path), l.Path)
		}
	}
	args = append(args,
		"--ro-bind", "/etc", "/etc",
		"--proc", "/proc",
		"--dev", "/dev",
		"--tmpfs", "/tmp",
		"--tmpfs", "/workspace",
		"--chdir", "/workspace")
	return append(args, cmd...)
}

// SystemLink is one of the host's top-level system directories as a
// sandbox mirrors it.
type SystemLink struct {
	Path   string // absolute: /bin, /lib…
	Target string // the symlink's target; "" for a directory
}

// systemDirs is the same list as moat's runtime (runtime/linux
// systemDirs), less /usr, which is always bound.
var systemDirs = []string{"/bin", "/lib", "/lib64", "/sbin", "/lib32", "/libx32"}

// HostLayout reports how the host under hostRoot has each of the system
// directories, skipping those it lacks: on a merged-/usr host /bin is a
// symlink to usr/bin, which a sandbox mirrors as the same symlink; on a
// split host it is a directory, which a sandbox binds read-only.
func HostLayout(hostRoot string) []SystemLink {
	var links []SystemLink
	for _, d := range systemDirs {
		host := filepath.Join(hostRoot, d)
		fi, err := os.Lstat(host)
		if err != nil {
			continue
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(host)
			if err != nil {
				continue
			}
			links = append(links, SystemLink{Path: d, Target: target})
		case fi.IsDir():
			links = append(links, SystemLink{Path: d})
		}
	}
	return links
}
