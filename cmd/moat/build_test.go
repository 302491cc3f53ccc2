package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/spf13/pflag"

	"github.com/moat-sandbox/moat/api"
)

// parseBuild parses a moat build command line as the CLI does and checks
// it (lookup reads --pass-env).
func parseBuild(t *testing.T, args []string, lookup lookupEnv) (*buildInvocation, error) {
	t.Helper()
	f := &buildFlags{}
	fl := pflag.NewFlagSet("moat build", pflag.ContinueOnError)
	fl.SetOutput(io.Discard)
	f.declare(fl)
	if err := fl.Parse(args); err != nil {
		return nil, usageError("%v", err)
	}
	return f.invocation(fl.Args(), fl.ArgsLenAtDash(), lookup)
}

func noEnv(string) (string, bool) { return "", false }

func TestBuildCommandLine(t *testing.T) {
	env := func(name string) (string, bool) {
		if name == "TOKEN" {
			return "s3cret", true
		}
		return noEnv(name)
	}
	inv, err := parseBuild(t, []string{"--output", "a.out", "./src", "--json", "--timeout", "1500us", "--memory", "512m", "--pids", "64",
		"--disk", "64m", "--cpus", "1.5", "-e", "A=1", "--pass-env", "TOKEN", "--net", "proxy", "--allow-domain", "example.com",
		"--max-files", "10", "--max-file-bytes", "1k", "--max-total-bytes", "2048", "--template", "gcc", "--out", "o",
		"--", "cc", "--json", "-o", "a.out", "--", "x.c"}, env)
	if err != nil {
		t.Fatal(err)
	}
	want := api.CreateBuild{
		Template: "gcc", Command: []string{"cc", "--json", "-o", "a.out", "--", "x.c"}, Outputs: []string{"a.out"},
		Env: []string{"A=1", "TOKEN=s3cret"}, TimeoutMs: 2, MemoryBytes: 512 << 20, CPUs: 1.5, Pids: 64, DiskBytes: 64 << 20,
		Net: "proxy", AllowDomains: []string{"example.com"}, MaxFiles: 10, MaxFileBytes: 1024, MaxTotalBytes: 2048,
	}
	got, _ := json.Marshal(inv.req)
	if w, _ := json.Marshal(want); !bytes.Equal(got, w) {
		t.Errorf("request\n got %s\nwant %s", got, w)
	}
	if inv.source != "./src" || inv.out != "o" || !inv.json || inv.local {
		t.Errorf("invocation %+v", inv)
	}
	// The defaults: nothing of moat's environment, --out ./moat-out,
	// net none.
	inv, err = parseBuild(t, []string{"src", "--", "make"}, env)
	if err != nil {
		t.Fatal(err)
	}
	if inv.req.Env != nil || inv.out != defaultBuildOut || inv.req.Net != "none" || inv.req.TimeoutMs != 0 {
		t.Errorf("defaults: %+v", inv)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "no build command"},
		{[]string{"src"}, "no build command"},
		{[]string{"src", "make"}, "goes after --"},
		{[]string{"--", "make"}, "no SOURCE"},
		{[]string{"a", "b", "--", "make"}, "one SOURCE"},
		{[]string{"src", "--"}, "no build command after --"},
		{[]string{"--env", "NOVALUE", "src", "--", "make"}, `--env "NOVALUE"`},
		{[]string{"--env", "=v", "src", "--", "make"}, "want K=V"},
		{[]string{"--pass-env", "UNSET_HERE", "src", "--", "make"}, "--pass-env UNSET_HERE: the variable is not set"},
		{[]string{"--pass-env", "A=B", "src", "--", "make"}, "want a variable's NAME"},
		{[]string{"--allow-domain", "example.com", "src", "--", "make"}, "--allow-domain needs --net proxy"},
		{[]string{"--net", "open", "src", "--", "make"}, `--net "open": want none or proxy`},
		{[]string{"--timeout", "-1s", "src", "--", "make"}, "--timeout must not be negative"},
		{[]string{"--memory", "lots", "src", "--", "make"}, "--memory"},
		{[]string{"--disk", "0", "src", "--", "make"}, "--disk: must be above 0"},
		{[]string{"--pids", "-1", "src", "--", "make"}, "must not be negative"},
		{[]string{"--max-files", "-1", "src", "--", "make"}, "--max-files must not be negative"},
		{[]string{"--max-file-bytes", "x", "src", "--", "make"}, "--max-file-bytes"},
		{[]string{"--output", "", "src", "--", "make"}, "--output is empty"},
		{[]string{"--out", "", "src", "--", "make"}, "--out is empty"},
	} {
		_, err := parseBuild(t, c.args, env)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("moat build %q: %v, want a usage error with %q", c.args, err, c.want)
		}
	}
}

// TestBuildUsageExit: a bad command line exits 125 with one line on
// stderr, before anything is opened or any daemon looked for.
func TestBuildUsageExit(t *testing.T) {
	t.Setenv("MOAT_URL", "http://127.0.0.1:1")
	for _, args := range [][]string{
		{"build"},
		{"build", "src"},
		{"build", "--pass-env", "MOAT_TEST_SURELY_UNSET", "src", "--", "make"},
		{"build", "--allow-domain", "x.test", "src", "--", "make"},
		{"build", filepath.Join(t.TempDir(), "absent"), "--", "make"},
		{"build", "/dev/null", "--", "make"},
	} {
		var stdout, stderr bytes.Buffer
		code := execute(context.Background(), args, &stdout, &stderr)
		if code != 125 || stdout.Len() != 0 || strings.Count(stderr.String(), "\n") != 1 || !strings.HasPrefix(stderr.String(), "moat build: ") {
			t.Errorf("moat %q: exit %d, stdout %q, stderr %q; want 125 and one line on stderr", args, code, stdout.String(), stderr.String())
		}
	}
}

func TestBuildExit(t *testing.T) {
	for _, c := range []struct {
		status, reason string
		want           int
	}{
		{api.BuildSucceeded, "", 0},
		{api.BuildFailed, api.ReasonCompileFailed, 1},
		{api.BuildFailed, api.ReasonOOM, 1},
		{api.BuildFailed, api.ReasonOutputMissing, 1},
		{api.BuildFailed, api.ReasonOutputTooLarge, 1},
		{api.BuildRefused, api.ReasonSourceBadPath, 2},
		{api.BuildRefused, api.ReasonSourceTooManyFiles, 2},
		{api.BuildRefused, api.ReasonSourceUnreadable, 2},
		{api.BuildTimeout, api.ReasonTimeout, 124},
		{api.BuildFailed, api.ReasonSetupFailed, 125},
		{api.BuildFailed, api.ReasonInterrupted, 125},
		{api.BuildRunning, "", 125},
		{api.BuildRefused, api.ReasonPolicyDenied, 126},
	} {
		if got := buildExit(&api.Build{Status: c.status, Reason: c.reason}); got != c.want {
			t.Errorf("%s/%s: exit %d, want %d", c.status, c.reason, got, c.want)
		}
	}
}

// artifact describes b as the build's record would.
func artifact(p string, b []byte, mode uint32) api.BuildArtifact {
	sum := sha256.Sum256(b)
	return api.BuildArtifact{Path: p, Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:]), Mode: mode}
}

// openDir opens dir for writeArtifact.
func openDir(t *testing.T, dir string) int {
	t.Helper()
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	return fd
}

func fetchOf(b []byte) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	}
}

// leftovers lists the entries of dir named like createTemp's files.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	var left []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".moat-") {
			left = append(left, p)
		}
		return nil
	})
	return left
}

func TestWriteArtifact(t *testing.T) {
	out := t.TempDir()
	root := openDir(t, out)
	content := []byte("#!/bin/sh\necho built\n")

	// A file in new directories, with the artifact's mode minus setid.
	if err := writeArtifact(root, artifact("bin/sub/tool", content, 0o4755), fetchOf(content)); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(out, "bin", "sub", "tool")
	if b, err := os.ReadFile(p); err != nil || !bytes.Equal(b, content) {
		t.Fatalf("written: %q, %v", b, err)
	}
	if fi, _ := os.Lstat(p); fi.Mode() != 0o755 {
		t.Errorf("mode %v, want -rwxr-xr-x", fi.Mode())
	}
	// A regular file is replaced.
	v2 := []byte("second\n")
	if err := writeArtifact(root, artifact("bin/sub/tool", v2, 0o644), fetchOf(v2)); err != nil {
		t.Fatalf("replacing a regular file: %v", err)
	}
	if b, _ := os.ReadFile(p); !bytes.Equal(b, v2) {
		t.Errorf("after the replacement: %q", b)
	}

	// A symlink where the file goes is refused, not followed, and left.
	victim := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(victim, []byte("host file\n"), 0o644)
	os.Symlink(victim, filepath.Join(out, "link"))
	err := writeArtifact(root, artifact("link", content, 0o644), fetchOf(content))
	if !errors.Is(err, errArtifactTarget) {
		t.Errorf("artifact over a symlink: %v, want errArtifactTarget", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "host file\n" {
		t.Errorf("ESCAPE: the symlink's target was written: %q", b)
	}
	// A symlink as a directory on the way: refused, nothing made through it.
	os.Symlink(filepath.Dir(victim), filepath.Join(out, "dirlink"))
	err = writeArtifact(root, artifact("dirlink/x", content, 0o644), fetchOf(content))
	if !errors.Is(err, errArtifactTarget) {
		t.Errorf("artifact below a symlinked dir: %v, want errArtifactTarget", err)
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(victim), "x")); err == nil {
		t.Error("ESCAPE: a file was written through the symlinked directory")
	}
	// A directory where the file goes.
	os.Mkdir(filepath.Join(out, "adir"), 0o755)
	if err := writeArtifact(root, artifact("adir", content, 0o644), fetchOf(content)); !errors.Is(err, errArtifactTarget) {
		t.Errorf("artifact over a directory: %v, want errArtifactTarget", err)
	}
	// A file on the way of a directory.
	if err := writeArtifact(root, artifact("bin/sub/tool/x", content, 0o644), fetchOf(content)); !errors.Is(err, errArtifactTarget) {
		t.Errorf("artifact below a file: %v, want errArtifactTarget", err)
	}

	// The bytes do not match the record: removed, the old file kept.
	bad := artifact("bin/sub/tool", content, 0o644)
	evil := bytes.Repeat([]byte("x"), len(content))
	if err := writeArtifact(root, bad, fetchOf(evil)); !errors.Is(err, errArtifactDigest) {
		t.Errorf("digest mismatch: %v, want errArtifactDigest", err)
	}
	if err := writeArtifact(root, bad, fetchOf(append(slices.Clone(content), 'x'))); !errors.Is(err, errArtifactDigest) {
		t.Errorf("longer than the record: %v, want errArtifactDigest", err)
	}
	if err := writeArtifact(root, bad, fetchOf(content[:3])); !errors.Is(err, errArtifactDigest) {
		t.Errorf("shorter than the record: %v, want errArtifactDigest", err)
	}
	if err := writeArtifact(root, bad, func(io.Writer) error { return io.ErrUnexpectedEOF }); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a failed download: %v", err)
	}
	if b, _ := os.ReadFile(p); !bytes.Equal(b, v2) {
		t.Errorf("a refused artifact changed the file: %q", b)
	}
	if l := leftovers(t, out); len(l) != 0 {
		t.Errorf("temporary files left: %v", l)
	}

	// Paths that are not clean relative paths never reach the disk.
	for _, p := range []string{"", ".", "/etc/passwd", "../x", "a/../../x", "a//b", "a/./b", "a/", "x\x00y"} {
		if err := writeArtifact(root, artifact(p, content, 0o644), fetchOf(content)); !errors.Is(err, errArtifactPath) {
			t.Errorf("artifact path %q: %v, want errArtifactPath", p, err)
		}
	}
}

// fakeBuilds is a daemon's builds as buildWith sees them.
type fakeBuilds struct {
	got     api.CreateBuild
	src     []byte
	final   api.Build
	log     string
	files   map[string][]byte // by sha256
	deleted []string
	logged  bool
}

func (f *fakeBuilds) Build(_ context.Context, req api.CreateBuild, source io.Reader) (*api.Build, error) {
	f.got = req
	b, err := io.ReadAll(source)
	if err != nil {
		return nil, err
	}
	f.src = b
	return &api.Build{ID: "b-1", Status: api.BuildRunning}, nil
}

func (f *fakeBuilds) GetBuild(context.Context, string, bool) (*api.Build, error) {
	b := f.final
	return &b, nil
}

func (f *fakeBuilds) BuildLog(_ context.Context, _ string, _ int64, _ bool, w io.Writer) (*api.Build, error) {
	f.logged = true
	_, err := io.WriteString(w, f.log)
	b := f.final
	return &b, err
}

func (f *fakeBuilds) BuildArtifact(_ context.Context, _, digest string, w io.Writer) error {
	_, err := w.Write(f.files[digest])
	return err
}

func (f *fakeBuilds) DeleteBuild(_ context.Context, id string) (*api.Build, error) {
	f.deleted = append(f.deleted, id)
	b := f.final
	return &b, nil
}

// runFake runs buildWith against f for SOURCE src.
func runFake(t *testing.T, f *fakeBuilds, inv *buildInvocation, local bool) (stdout, stderr string, err error) {
	t.Helper()
	src, err := openBuildSource(inv.source)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ctx, intr := watchBuildInterrupt(context.Background())
	defer intr.stop()
	var o, e bytes.Buffer
	err = buildWith(ctx, f, target{local: local}, inv, src, intr, sandboxIO{nil, &o, &e})
	return o.String(), e.String(), err
}

// tarNames lists the entries of the tar b.
func tarNames(t *testing.T, b []byte) []string {
	t.Helper()
	var names []string
	var r io.Reader = bytes.NewReader(b)
	if bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(r)
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatalf("the source sent is not a tar: %v", err)
		}
		names = append(names, h.Name)
	}
}

func TestBuildWith(t *testing.T) {
	srcDir := t.TempDir()
	os.WriteFile(filepath.Join(srcDir, "main.c"), []byte("int main(void){return 0;}\n"), 0o644)
	os.Mkdir(filepath.Join(srcDir, "inc"), 0o755)
	os.WriteFile(filepath.Join(srcDir, "inc", "a.h"), nil, 0o644)
	os.Symlink("inc/a.h", filepath.Join(srcDir, "a.h"))
	bin := []byte("\x7fELF built")
	out := filepath.Join(t.TempDir(), "out")
	exit := 0

	t.Run("succeeded", func(t *testing.T) {
		f := &fakeBuilds{log: "compiling\x1b[31m red\n", files: map[string][]byte{}}
		a := artifact("bin/a.out", bin, 0o755)
		f.files[a.SHA256] = bin
		f.final = api.Build{ID: "b-1", Status: api.BuildSucceeded, SourceDigest: "sha256:abc", Toolchain: api.Toolchain{Template: "host"},
			ExitCode: &exit, Artifacts: []api.BuildArtifact{a}, DurationMs: 1500, PeakMemoryBytes: 3 << 20}
		inv, err := parseBuild(t, []string{"--out", out, "--output", "bin", srcDir, "--", "make"}, noEnv)
		if err != nil {
			t.Fatal(err)
		}
		stdout, stderr, err := runFake(t, f, inv, true)
		if err != nil {
			t.Fatalf("buildWith: %v\nstderr: %s", err, stderr)
		}
		if !f.got.Detach || !slices.Equal(f.got.Command, []string{"make"}) {
			t.Errorf("request %+v", f.got)
		}
		// The directory went as a tar of its entries, without a top.
		if names := tarNames(t, f.src); !slices.Equal(names, []string{"a.h", "inc/", "inc/a.h", "main.c"}) {
			t.Errorf("tar entries %q", names)
		}
		// The log passes through as the command wrote it, as moat run's.
		if !strings.Contains(stderr, "moat: build b-1\n") || !strings.Contains(stderr, f.log) {
			t.Errorf("stderr %q", stderr)
		}
		if b, err := os.ReadFile(filepath.Join(out, "bin", "a.out")); !bytes.Equal(b, bin) {
			t.Errorf("artifact on the host: %q, %v", b, err)
		}
		for _, w := range []string{"status     succeeded\n", a.SHA256 + "  10  bin/a.out\n", "source     sha256:abc\n", "toolchain  host\n", "duration   1.50s\n", "memory     3.0 MiB peak\n"} {
			if !strings.Contains(stdout, w) {
				t.Errorf("summary lacks %q:\n%s", w, stdout)
			}
		}
		if !slices.Equal(f.deleted, []string{"b-1"}) {
			t.Errorf("a private daemon's build deleted: %v, want b-1", f.deleted)
		}
	})

	t.Run("failed, json, shared daemon", func(t *testing.T) {
		code := 2
		f := &fakeBuilds{final: api.Build{ID: "b-1", Status: api.BuildFailed, Reason: api.ReasonCompileFailed, ExitCode: &code, Artifacts: []api.BuildArtifact{}}}
		tarFile := filepath.Join(t.TempDir(), "src.tar")
		os.WriteFile(tarFile, []byte("not checked here"), 0o644)
		inv, err := parseBuild(t, []string{"--json", "--out", out, tarFile, "--", "make"}, noEnv)
		if err != nil {
			t.Fatal(err)
		}
		stdout, _, err := runFake(t, f, inv, false)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 1 {
			t.Fatalf("exit %v, want 1", err)
		}
		// A file goes as it is.
		if string(f.src) != "not checked here" {
			t.Errorf("sent %q", f.src)
		}
		var b api.Build
		dec := json.NewDecoder(strings.NewReader(stdout))
		if err := dec.Decode(&b); err != nil || b.Reason != api.ReasonCompileFailed || dec.More() {
			t.Errorf("stdout is not the build alone: %v\n%s", err, stdout)
		}
		if f.logged || len(f.deleted) != 0 {
			t.Errorf("--json followed the log (%v) or a daemon's build was deleted (%v)", f.logged, f.deleted)
		}
	})

	t.Run("refused here", func(t *testing.T) {
		dir := t.TempDir()
		for _, n := range []string{"a", "b", "c"} {
			os.WriteFile(filepath.Join(dir, n), []byte("12345"), 0o644)
		}
		for _, c := range []struct {
			flags  []string
			reason string
		}{
			{[]string{"--max-files", "2"}, api.ReasonSourceTooManyFiles},
			{[]string{"--max-file-bytes", "4"}, api.ReasonSourceFileTooLarge},
			{[]string{"--max-total-bytes", "14"}, api.ReasonSourceTooLarge},
			// Controls: at the limit.
			{[]string{"--max-files", "3", "--max-file-bytes", "5", "--max-total-bytes", "15"}, ""},
		} {
			f := &fakeBuilds{final: api.Build{ID: "b-1", Status: api.BuildSucceeded}}
			inv, err := parseBuild(t, append(c.flags, "--json", dir, "--", "make"), noEnv)
			if err != nil {
				t.Fatal(err)
			}
			stdout, _, err := runFake(t, f, inv, true)
			var b api.Build
			if jerr := json.Unmarshal([]byte(stdout), &b); jerr != nil {
				t.Fatalf("%v: stdout %q: %v", c.flags, stdout, jerr)
			}
			var ee *exitError
			if c.reason == "" {
				if err != nil || b.Status != api.BuildSucceeded || len(tarNames(t, f.src)) != 3 {
					t.Errorf("control %v: %v, %+v", c.flags, err, b)
				}
				continue
			}
			if !errors.As(err, &ee) || ee.code != 2 || b.Status != api.BuildRefused || b.Reason != c.reason {
				t.Errorf("%v: exit %v, build %s/%s; want 2, refused/%s", c.flags, err, b.Status, b.Reason, c.reason)
			}
		}
		// A FIFO in the directory: refused here (the tar would lack it).
		if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
			t.Skip("mkfifo:", err)
		}
		f := &fakeBuilds{}
		inv, _ := parseBuild(t, []string{"--json", "--env", "TOKEN=s3cret", dir, "--", "make"}, noEnv)
		stdout, _, err := runFake(t, f, inv, true)
		var b api.Build
		json.Unmarshal([]byte(stdout), &b)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 || b.Reason != api.ReasonSourceBadType || !strings.Contains(b.Message, `"fifo"`) {
			t.Errorf("a FIFO in the source: %v, %+v; want exit 2, source_bad_type naming it", err, b)
		}
		if strings.Contains(stdout, "s3cret") || !slices.Equal(b.Env, []string{"TOKEN"}) {
			t.Errorf("the refusal shows a variable's value, or not its name: %s", stdout)
		}
	})
}
