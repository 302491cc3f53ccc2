package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The same-machine references: one process that builds a sandbox, runs
// `echo hello` in it and exits, timed like bench/startup times /bin/true.

// oneShot runs one command and times it, fork to reaped exit. stdin is
// /dev/null, stdout and stderr temporary files, all handed to the child
// as plain files, so os/exec starts no copying goroutine inside the timed
// window; stdout is checked afterwards.
type oneShot struct {
	devnull, out, errf *os.File
	timeout            time.Duration
}

func newOneShot(timeout time.Duration) (*oneShot, error) {
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	o := &oneShot{devnull: devnull, timeout: timeout}
	for _, f := range []**os.File{&o.out, &o.errf} {
		*f, err = os.CreateTemp("", "moat-bench-oneshot-")
		if err != nil {
			o.close()
			return nil, err
		}
		os.Remove((*f).Name())
	}
	return o, nil
}

func (o *oneShot) close() {
	for _, f := range []*os.File{o.devnull, o.out, o.errf} {
		if f != nil {
			f.Close()
		}
	}
}

// time runs argv once and returns its wall-clock duration; an error when
// it did not exit 0 in time or did not print want.
func (o *oneShot) time(argv []string, want string) (time.Duration, error) {
	for _, f := range []*os.File{o.out, o.errf} {
		if err := f.Truncate(0); err != nil {
			return 0, err
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return 0, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = o.devnull, o.out, o.errf

	begin := time.Now()
	err := cmd.Run()
	d := time.Since(begin)

	if err == nil {
		got := make([]byte, len(want)+64)
		n, _ := o.out.ReadAt(got, 0)
		if !bytes.Equal(got[:n], []byte(want)) {
			return d, fmt.Errorf("stdout %q, want %q", got[:n], want)
		}
		return d, nil
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("timed out after %s (killed): %w", o.timeout, err)
	}
	buf := make([]byte, 1024)
	n, _ := o.errf.ReadAt(buf, 0)
	if msg := strings.TrimSpace(string(buf[:n])); msg != "" {
		return d, fmt.Errorf("%w; stderr: %s", err, strings.ReplaceAll(msg, "\n", " | "))
	}
	return d, err
}

// bwrapArgs is bench/startup's bubblewrap command (every namespace, binds
// comparable to moat's sandbox) with cmd in place of /bin/true: the
// host's /usr and /etc read-only, its top-level system links or
// directories mirrored under hostRoot, fresh /proc and /dev, tmpfs /tmp
// and /workspace as the working directory.
func bwrapArgs(bin, hostRoot string, cmd ...string) []string {
	args := []string{bin, "--unshare-all", "--die-with-parent", "--new-session",
		"--ro-bind", "/usr", "/usr"}
	for _, d := range []string{"/bin", "/lib", "/lib64", "/sbin", "/lib32", "/libx32"} {
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
			args = append(args, "--symlink", target, d)
		case fi.IsDir():
			args = append(args, "--ro-bind", host, d)
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

// versionOf runs bin with args and returns the first line of its output,
// or a note saying why the version is unknown.
func versionOf(bin string, args ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("unknown (%s %s: %v)", filepath.Base(bin), strings.Join(args, " "), err)
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(line)
}

// shellQuote renders argv as one line a POSIX shell splits back into the
// same words.
func shellQuote(argv []string) string {
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
