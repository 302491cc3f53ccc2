// Package moatd runs a `moat serve` daemon for a benchmark: started on an
// ephemeral loopback port with a data directory of its own, ready once its
// "listening" log line is read (never after a sleep), stopped with SIGTERM
// and checked to exit 0. Its warnings and errors are kept for the report.
package moatd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Daemon is a `moat serve` started by the benchmark on an ephemeral port,
// with a data directory of its own that Stop removes.
type Daemon struct {
	Argv  []string // the exact command line
	URL   string   // http://127.0.0.1:PORT, from its "listening" log line
	Token string   // the default tenant's API token
	PID   int

	cmd     *exec.Cmd
	dataDir string

	exited chan struct{} // closed when cmd.Wait returned
	err    error         // cmd.Wait's error, valid once exited is closed

	mu        sync.Mutex
	lines     int      // log lines seen
	problems  int      // lines at level WARN or ERROR
	firstBad  []string // the first few of them
	lastLines []string // the last few lines, for a failed start
}

// maxLogKept is how many WARN/ERROR lines the report keeps verbatim.
const maxLogKept = 10

// Start starts bin serve with extra flags and returns once its
// "listening" log line has been read (never by sleeping), or fails when it
// exits first or takes longer than timeout. Its data directory is a new
// temporary directory named after prefix.
func Start(ctx context.Context, bin, prefix string, extra []string, timeout time.Duration) (*Daemon, error) {
	dir, err := os.MkdirTemp("", prefix) // mode 0700, as serve wants
	if err != nil {
		return nil, err
	}
	d := &Daemon{dataDir: dir, exited: make(chan struct{})}
	d.Argv = append([]string{bin, "serve", "--data", dir, "--listen", "127.0.0.1:0"}, extra...)
	d.cmd = exec.Command(d.Argv[0], d.Argv[1:]...)
	// If the benchmark dies, the daemon is told to stop (and to end its
	// sandboxes) instead of lingering.
	if d.cmd.SysProcAttr, err = daemonAttr(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	d.cmd.Stdin = nil
	d.cmd.Stdout = io.Discard
	stderr, err := d.cmd.StderrPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := d.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	d.PID = d.cmd.Process.Pid
	listening := make(chan string, 1)
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		d.readLog(stderr, listening)
	}()
	go func() {
		<-logDone // Wait closes the pipe: read it all first
		d.err = d.cmd.Wait()
		close(d.exited)
	}()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case line := <-listening:
		url, ok := ParseListening(line)
		if !ok {
			d.Kill()
			return nil, fmt.Errorf("daemon's listening line has no http url: %q", line)
		}
		d.URL = url
	case <-d.exited:
		d.cleanup()
		return nil, fmt.Errorf("daemon exited before listening (%v); its log: %s", d.err, d.Tail())
	case <-timer.C:
		d.Kill()
		return nil, fmt.Errorf("daemon not listening after %s; its log: %s", timeout, d.Tail())
	case <-ctx.Done():
		d.Kill()
		return nil, ctx.Err()
	}
	tok, err := os.ReadFile(filepath.Join(dir, "token"))
	if err != nil {
		d.Kill()
		return nil, fmt.Errorf("daemon token: %w", err)
	}
	d.Token = strings.TrimSpace(string(tok))
	return d, nil
}

// readLog reads the daemon's log (slog text lines) until it closes: hands
// the first "listening" line over, and keeps warnings and errors.
func (d *Daemon) readLog(r io.Reader, listening chan<- string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	sent := false
	for sc.Scan() {
		line := sc.Text()
		if !sent && strings.Contains(line, "msg=listening") {
			listening <- line
			sent = true
		}
		d.mu.Lock()
		d.lines++
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") || strings.Contains(line, "panic") {
			d.problems++
			if len(d.firstBad) < maxLogKept {
				d.firstBad = append(d.firstBad, line)
			}
		}
		d.lastLines = append(d.lastLines, line)
		if len(d.lastLines) > 10 {
			d.lastLines = d.lastLines[1:]
		}
		d.mu.Unlock()
	}
}

// ParseListening takes the url= field of a line such as
// `time=… level=INFO msg=listening url=http://127.0.0.1:41235 token_file=…`.
func ParseListening(line string) (string, bool) {
	for f := range strings.FieldsSeq(line) {
		if v, ok := strings.CutPrefix(f, "url="); ok {
			v = strings.Trim(v, `"`)
			if strings.HasPrefix(v, "http://") {
				return v, true
			}
		}
	}
	return "", false
}

// Tail returns its last few log lines, joined.
func (d *Daemon) Tail() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.lastLines) == 0 {
		return "(empty)"
	}
	return strings.Join(d.lastLines, " | ")
}

// LogProblems returns the count of log lines, of WARN/ERROR lines and
// the first few of those.
func (d *Daemon) LogProblems() (lines, n int, first []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lines, d.problems, append([]string(nil), d.firstBad...)
}

// DataDir is the daemon's data directory (its moat.db, audit/, output/,
// tokens): for a benchmark that reads what the daemon wrote. Stop removes
// it; StopKeep leaves it until RemoveData.
func (d *Daemon) DataDir() string { return d.dataDir }

// Stop sends SIGTERM and waits for the daemon to exit; it returns how long
// that took and an error unless it exited 0 within timeout (then it is
// killed). The data directory is removed either way.
func (d *Daemon) Stop(timeout time.Duration) (time.Duration, error) {
	defer d.cleanup()
	return d.stop(timeout)
}

// StopKeep is Stop without removing the data directory, so that what the
// daemon wrote as it stopped (its last audit events) can be read; the
// caller removes it with RemoveData.
func (d *Daemon) StopKeep(timeout time.Duration) (time.Duration, error) {
	return d.stop(timeout)
}

// RemoveData removes the data directory of a daemon stopped by StopKeep.
func (d *Daemon) RemoveData() { d.cleanup() }

func (d *Daemon) stop(timeout time.Duration) (time.Duration, error) {
	begin := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return 0, err
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-d.exited:
		took := time.Since(begin)
		if d.err != nil {
			return took, fmt.Errorf("daemon exited with %v after SIGTERM; its last log lines: %s", d.err, d.Tail())
		}
		return took, nil
	case <-timer.C:
		_ = d.cmd.Process.Kill()
		<-d.exited
		return time.Since(begin), fmt.Errorf("daemon still running %s after SIGTERM (killed)", timeout)
	}
}

// Kill ends a daemon that failed to start properly.
func (d *Daemon) Kill() {
	_ = d.cmd.Process.Kill()
	<-d.exited
	d.cleanup()
}

func (d *Daemon) cleanup() {
	if d.dataDir != "" {
		os.RemoveAll(d.dataDir)
	}
}
