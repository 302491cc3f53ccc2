//go:build linux

package escape

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/sandbox"
)

// nobody is the unprivileged host uid/gid the outside controls run as.
const nobody = 65534

// hangGuard bounds one moat or control run (see moat).
const hangGuard = 20 * time.Second

// probeTarget is where the probe is bound inside every sandbox.
const probeTarget = "/opt/probe"

func TestMain(m *testing.M) {
	code := m.Run()
	if probeDir != "" {
		os.RemoveAll(probeDir)
	}
	testutil.Cleanup()
	os.Exit(code)
}

var (
	probeOnce sync.Once
	probeDir  string
	probePath string
	probeErr  error
)

// probeBin builds the probe once (static, CGO_ENABLED=0) into a directory
// that every uid can traverse, so the controls can run it as nobody.
func probeBin(t testing.TB) string {
	t.Helper()
	testutil.RequireRoot(t)
	probeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "moat-escape-probe-")
		if err != nil {
			probeErr = err
			return
		}
		probeDir = dir
		if err := os.Chmod(dir, 0o755); err != nil {
			probeErr = err
			return
		}
		probePath = filepath.Join(dir, "probe")
		cmd := exec.Command("go", "build", "-o", probePath, "./probe")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			probeErr = fmt.Errorf("go build ./probe: %v\n%s", err, out)
		}
	})
	if probeErr != nil {
		t.Fatalf("building the probe: %v", probeErr)
	}
	return probePath
}

// Outcome is one probe result (see probe.Result).
type Outcome struct {
	Op     string         `json:"op"`
	Args   []string       `json:"args"`
	OK     bool           `json:"ok"`
	Errno  string         `json:"errno"`
	Err    string         `json:"err"`
	Detail string         `json:"detail"`
	Values map[string]any `json:"values"`
}

func (o Outcome) String() string {
	s := o.Op
	if len(o.Args) > 0 {
		s += " " + strings.Join(o.Args, " ")
	}
	if o.OK {
		return s + " → ok"
	}
	return fmt.Sprintf("%s → %s (%s)", s, o.Errno, o.Err)
}

// str returns Values[k] as a string ("" if absent).
func (o Outcome) str(k string) string {
	v, ok := o.Values[k]
	if !ok {
		return ""
	}
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}

// strs returns Values[k] as a list of strings.
func (o Outcome) strs(k string) []string {
	l, _ := o.Values[k].([]any)
	out := make([]string, 0, len(l))
	for _, v := range l {
		if s, ok := v.(string); ok {
			out = append(out, s)
		} else {
			out = append(out, fmt.Sprint(v))
		}
	}
	return out
}

// ints returns Values[k] as a list of ints.
func (o Outcome) ints(k string) []int {
	l, _ := o.Values[k].([]any)
	out := make([]int, 0, len(l))
	for _, v := range l {
		if f, ok := v.(float64); ok {
			out = append(out, int(f))
		}
	}
	return out
}

// strMap returns Values[k] as a map of strings.
func (o Outcome) strMap(k string) map[string]string {
	m, _ := o.Values[k].(map[string]any)
	out := map[string]string{}
	for kk, v := range m {
		out[kk] = fmt.Sprint(v)
	}
	return out
}

// attempt is one probe invocation: op and arguments.
type attempt []string

func A(op string, args ...string) attempt { return append(attempt{op}, args...) }

func multiArg(t testing.TB, atts []attempt) string {
	t.Helper()
	b, err := json.Marshal(atts)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// parseOutcomes decodes what the probe printed: one object or an array. A
// terminal adds carriage returns.
func parseOutcomes(s string) ([]Outcome, error) {
	s = strings.TrimSpace(strings.ReplaceAll(s, "\r", ""))
	if i := strings.IndexAny(s, "[{"); i > 0 {
		s = s[i:]
	}
	if strings.HasPrefix(s, "{") {
		var o Outcome
		if err := json.Unmarshal([]byte(s), &o); err != nil {
			return nil, err
		}
		return []Outcome{o}, nil
	}
	var out []Outcome
	err := json.Unmarshal([]byte(s), &out)
	return out, err
}

// moatBin is the moat binary under test: the one testutil builds from this
// checkout, or the prebuilt binary named by MOAT_ESCAPE_MOAT.
func moatBin(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("MOAT_ESCAPE_MOAT"); p != "" {
		return p
	}
	return testutil.Moat(t)
}

// moatOpts are how the moat process itself is started.
type moatOpts struct {
	flags      []string   // moat run flags, before "--"
	env        []string   // added to the moat process's environment
	extraFiles []*os.File // inherited by the moat process as fds 3, 4, ...
	stdin      *os.File   // moat's stdin (default /dev/null)
	noProbe    bool       // do not bind the probe
}

// moat runs `moat run --json FLAGS --ro PROBE:/opt/probe -- ARGV` and
// decodes its result.
func moat(t testing.TB, o moatOpts, argv ...string) *sandbox.Result {
	t.Helper()
	testutil.RequireRoot(t)
	args := append([]string{"run", "--json"}, o.flags...)
	if !o.noProbe {
		args = append(args, "--ro", probeBin(t)+":"+probeTarget)
	}
	args = append(append(args, "--"), argv...)
	// A hang guard, not a timed assertion: one moat run takes
	// milliseconds; one still running after hangGuard is stuck. It gets
	// SIGTERM (moat then tears the sandbox down and prints its result),
	// SIGKILL 5 s later if need be, and the test fails.
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, moatBin(t), args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = append(os.Environ(), o.env...)
	cmd.ExtraFiles = o.extraFiles
	if o.stdin != nil {
		cmd.Stdin = o.stdin
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	hung := ctx.Err() != nil
	if hung {
		t.Errorf("moat %v did not end within %v and was terminated", args, hangGuard)
	}
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) && !hung {
			t.Fatalf("moat %v: %v", args, err)
		}
		if ee != nil {
			code = ee.ExitCode()
		}
	}
	var res sandbox.Result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("moat %v: exit %d, not a JSON result: %v\nstdout: %s\nstderr: %s", args, code, err, out.String(), errb.String())
	}
	if res.ExitCode != code && !hung {
		t.Fatalf("moat %v: JSON exit_code %d but process exit %d", args, res.ExitCode, code)
	}
	return &res
}

// insideWith runs the attempts in one sandbox started with o and returns
// their outcomes. The probe must exit 0.
func insideWith(t testing.TB, o moatOpts, atts ...attempt) []Outcome {
	t.Helper()
	res := moat(t, o, probeTarget, "multi", multiArg(t, atts))
	if res.ExitCode != 0 {
		t.Fatalf("probe in sandbox (flags %v): exit %d (%s) %s\nstdout: %s\nstderr: %s",
			o.flags, res.ExitCode, res.ExitReason, res.Error, res.Stdout, res.Stderr)
	}
	out, err := parseOutcomes(res.Stdout)
	if err != nil || len(out) != len(atts) {
		t.Fatalf("probe in sandbox: bad output (%v): %q stderr %q", err, res.Stdout, res.Stderr)
	}
	return out
}

// inside runs the attempts in one default sandbox plus flags.
func inside(t testing.TB, flags []string, atts ...attempt) []Outcome {
	t.Helper()
	return insideWith(t, moatOpts{flags: flags}, atts...)
}

// who says how a control runs outside the sandbox.
type who int

const (
	// asNobody: uid/gid 65534 in the host's namespaces, no capabilities.
	asNobody who = iota
	// asRoot: root in the host's namespaces. Only for reads and for
	// calls the kernel rejects for their arguments: never destructive.
	asRoot
	// inUserNS: root of a throwaway user namespace (mapped to host uid
	// 65534) with its own mount, uts, ipc and network namespaces; what
	// it mounts, renames or sets there dies with it.
	inUserNS
)

func (w who) String() string {
	return [...]string{"nobody", "root", "userns"}[w]
}

// outOpts are how a control probe is started.
type outOpts struct {
	who        who
	env        []string
	extraFiles []*os.File
	stdin      *os.File
	dir        string
	// ctty makes stdin (a terminal) the probe's controlling terminal in
	// a new session.
	ctty bool
}

func sysAttr(w who) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	switch w {
	case asNobody:
		a.Credential = &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}
	case inUserNS:
		a.Cloneflags = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWNET
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: nobody, Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: nobody, Size: 1}}
		a.GidMappingsEnableSetgroups = true
		// Become uid 0 of the new namespace (host uid 65534): host root,
		// which the child starts as, is not mapped there.
		a.Credential = &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}}
	}
	return a
}

// outsideWith runs the attempts outside any sandbox, as o says.
func outsideWith(t testing.TB, o outOpts, atts ...attempt) []Outcome {
	t.Helper()
	cmd := exec.Command(probeBin(t), "multi", multiArg(t, atts))
	cmd.SysProcAttr = sysAttr(o.who)
	if o.ctty {
		cmd.SysProcAttr.Setsid = true
		cmd.SysProcAttr.Setctty = true
		cmd.SysProcAttr.Ctty = 0
	}
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, o.env...)
	cmd.ExtraFiles = o.extraFiles
	cmd.Dir = o.dir
	if o.stdin != nil {
		cmd.Stdin = o.stdin
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	timer := time.AfterFunc(hangGuard, func() { _ = cmd.Process.Kill() })
	err := cmd.Run()
	timer.Stop()
	if err != nil {
		t.Fatalf("control probe (%v): %v\nstdout: %s\nstderr: %s", o.who, err, out.String(), errb.String())
	}
	res, err := parseOutcomes(out.String())
	if err != nil || len(res) != len(atts) {
		t.Fatalf("control probe (%v): bad output (%v): %q stderr %q", o.who, err, out.String(), errb.String())
	}
	return res
}

// outside runs the attempts as w outside any sandbox.
func outside(t testing.TB, w who, atts ...attempt) []Outcome {
	t.Helper()
	return outsideWith(t, outOpts{who: w}, atts...)
}

// denied asserts that an attempt inside the sandbox failed and, when
// errnos are given, that it failed with one of them.
func denied(t testing.TB, o Outcome, errnos ...string) {
	t.Helper()
	if o.OK {
		t.Errorf("ESCAPE: %s succeeded inside the sandbox (values %v)", o, o.Values)
		return
	}
	if len(errnos) > 0 && !slices.Contains(errnos, o.Errno) {
		t.Errorf("inside: %s: want one of %v", o, errnos)
	}
}

// works asserts that a control attempt succeeded.
func works(t testing.TB, o Outcome) {
	t.Helper()
	if !o.OK {
		t.Errorf("control: %s failed outside the sandbox: the attempt proves nothing", o)
	}
}

// reached asserts that a control attempt got past the permission checks:
// it succeeded or failed with an errno other than the ones the sandbox
// answers with.
func reached(t testing.TB, o Outcome, sandboxErrnos ...string) {
	t.Helper()
	if !o.OK && slices.Contains(sandboxErrnos, o.Errno) {
		t.Errorf("control: %s outside the sandbox fails the same way as inside: the attempt proves nothing", o)
	}
}

// openDir returns a directory that every uid can traverse, inside the
// test's temp dir.
func openDir(t testing.TB) string {
	t.Helper()
	d := t.TempDir()
	// t.TempDir creates a 0700 parent per test; the controls run as
	// nobody and need to traverse it.
	for _, p := range []string{filepath.Dir(d), d} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func mkdirs(t testing.TB, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func writeFile(t testing.TB, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func chown(t testing.TB, uid int, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if err := os.Lchown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
}

// digest identifies a host file's content, mode and owner, or
// its absence.
func digest(t testing.TB, p string) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return "absent: " + err.Error()
	}
	h := sha256.New()
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	} else if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		names, err := os.ReadDir(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			fmt.Fprintln(h, n.Name())
		}
	} else if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		l, _ := os.Readlink(p)
		fmt.Fprintln(h, l)
	}
	// The link count is left out: tests plant hardlinks themselves.
	return fmt.Sprintf("mode %o uid %d gid %d size %d mtime %d.%d sha %s", st.Mode, st.Uid, st.Gid,
		st.Size, st.Mtim.Sec, st.Mtim.Nsec, hex.EncodeToString(h.Sum(nil)))
}

// snapshot records digests of host paths; unchanged checks them again.
type snapshot map[string]string

func snap(t testing.TB, paths ...string) snapshot {
	t.Helper()
	s := snapshot{}
	for _, p := range paths {
		s[p] = digest(t, p)
	}
	return s
}

func (s snapshot) unchanged(t testing.TB) {
	t.Helper()
	for p, d := range s {
		if now := digest(t, p); now != d {
			t.Errorf("ESCAPE: host path %s changed:\n  before: %s\n  after:  %s", p, d, now)
		}
	}
}
