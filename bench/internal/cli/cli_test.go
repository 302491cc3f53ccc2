package cli

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/bench/schema"
)

var testSpec = Spec{Name: "x", About: "a test", Rounds: 30, Warmup: 2, RoundsUsage: "rounds", WarmupUsage: "warm-up", MinRounds: 1}

// fakeMoat writes an executable file to stand for the moat binary.
func fakeMoat(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "moat")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func parse(s Spec, args ...string) (*Flags, *flag.FlagSet, error) {
	var f Flags
	fs := s.FlagSet(io.Discard, &f)
	return &f, fs, s.Parse(fs, args, &f)
}

// Every benchmark takes the same common flags, with its defaults.
func TestCommonFlags(t *testing.T) {
	moat := fakeMoat(t)
	f, _, err := parse(testSpec, "--moat", moat, "--json", "o.json", "--markdown", "o.md", "--rounds", "7", "--warmup", "0", "--seed", "9")
	if err != nil {
		t.Fatal(err)
	}
	if *f != (Flags{Moat: moat, JSON: "o.json", Markdown: "o.md", Rounds: 7, Warmup: 0, Seed: 9}) {
		t.Errorf("flags %+v", f)
	}
	f, _, err = parse(testSpec, "--moat", moat)
	if err != nil || f.Rounds != 30 || f.Warmup != 2 || f.Seed == 0 || f.JSON != "" {
		t.Errorf("defaults %+v, %v", f, err)
	}
	// A relative --moat is made absolute.
	t.Chdir(filepath.Dir(moat))
	if f, _, err = parse(testSpec, "--moat", "moat"); err != nil || f.Moat != moat {
		t.Errorf("relative --moat: %+v, %v", f, err)
	}
}

func TestCommonFlagsRefused(t *testing.T) {
	moat := fakeMoat(t)
	for _, args := range [][]string{
		{"--moat", moat, "--rounds", "0"},
		{"--moat", moat, "--warmup", "-1"},
		{"--moat", moat, "extra"},
		{"--moat", moat, "--nope"},
		{"--moat", filepath.Join(t.TempDir(), "missing")},
		{"--moat", filepath.Dir(moat)},
		{"--moat", ""},
	} {
		if _, _, err := parse(testSpec, args...); !errors.Is(err, ErrUsage) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
	if _, _, err := parse(testSpec, "-h"); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
	if code := testSpec.Exit(io.Discard, flag.ErrHelp); code != 0 {
		t.Errorf("exit of -h: %d", code)
	}
	if code := testSpec.Exit(io.Discard, ErrUsage); code != 2 {
		t.Errorf("exit of a usage error: %d", code)
	}
}

// A benchmark that checks the binary itself takes a missing one (or
// none); one that runs in-process takes no --moat at all; --rounds 0
// may skip what rounds measure.
func TestSpecVariants(t *testing.T) {
	unchecked := testSpec
	unchecked.MoatUnchecked = true
	missing := filepath.Join(t.TempDir(), "missing")
	if f, _, err := parse(unchecked, "--moat", missing); err != nil || f.Moat != missing {
		t.Errorf("unchecked: %+v, %v", f, err)
	}
	if f, _, err := parse(unchecked, "--moat", ""); err != nil || f.Moat != "" {
		t.Errorf("unchecked, none: %+v, %v", f, err)
	}
	inproc := testSpec
	inproc.NoMoat = true
	f, fs, err := parse(inproc)
	if err != nil || f.Moat != "" || fs.Lookup("moat") != nil {
		t.Errorf("no --moat: %+v, %v", f, err)
	}
	if _, _, err := parse(inproc, "--moat", "x"); !errors.Is(err, ErrUsage) {
		t.Errorf("--moat accepted where none is taken: %v", err)
	}
	zero := inproc
	zero.MinRounds = 0
	if f, _, err := parse(zero, "--rounds", "0"); err != nil || f.Rounds != 0 {
		t.Errorf("--rounds 0: %+v, %v", f, err)
	}
}

func TestLevels(t *testing.T) {
	got, err := Levels("--levels", " 1, 10,100 ,1000,", 20000, true)
	if err != nil || !slices.Equal(got, []int{1, 10, 100, 1000}) {
		t.Fatalf("Levels = %v, %v", got, err)
	}
	if got, err := Levels("--levels", "8,1,8", 256, false); err != nil || !slices.Equal(got, []int{8, 1, 8}) {
		t.Errorf("unordered Levels = %v, %v", got, err)
	}
	for _, bad := range []string{"", ",", "10,1", "1,1", "0", "-3", "x", "20001"} {
		if _, err := Levels("--levels", bad, 20000, true); !errors.Is(err, ErrUsage) {
			t.Errorf("Levels(%q) = %v", bad, err)
		}
	}
}

// Root finds the moat checkout above the working directory, not bench/'s
// own module.
func TestRoot(t *testing.T) {
	root := t.TempDir()
	sub := filepath.Join(root, "bench", "startup")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for path, mod := range map[string]string{"go.mod": "github.com/moat-sandbox/moat", "bench/go.mod": "github.com/moat-sandbox/moat/bench"} {
		if err := os.WriteFile(filepath.Join(root, path), []byte("module "+mod+"\n\ngo 1.26\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(sub)
	got, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := filepath.EvalSymlinks(root); got != root && got != want {
		t.Errorf("Root = %s, want %s", got, root)
	}
	if m := DefaultMoat(); m != filepath.Join(got, "bin", "moat") {
		t.Errorf("DefaultMoat = %s", m)
	}
	t.Chdir(t.TempDir())
	if _, err := Root(); !errors.Is(err, ErrNoCheckout) {
		t.Errorf("outside a checkout: %v", err)
	}
}

// Start and Finish fill the envelope; Write writes the JSON in the schema
// and the markdown of the renderer, or prints the markdown.
func TestEnvelopeAndWrite(t *testing.T) {
	f := &Flags{Rounds: 3, Warmup: 1, Seed: 5}
	start := time.Now()
	r := &schema.Syscall{Run: testSpec.Start(f, []string{"--rounds", "3"}, start), Results: []schema.SyscallResult{
		{Name: "getppid", What: "getppid(2)", Ops: 10, InsideNs: 110, OutsideNs: 100, OverheadPct: 10},
	}}
	r.Bench = "syscall" // the renderer knows the benchmarks, not "x"
	Finish(&r.Run, start)
	h := r.Header()
	if h.Schema != schema.Version || h.Command != "go run ./x --rounds 3" || h.Rounds != 3 || h.Warmup != 1 || h.Seed != 5 ||
		h.Date == "" || h.Machine.Kernel == "" || h.Versions == nil {
		t.Errorf("envelope %+v", h)
	}

	dir := t.TempDir()
	f.JSON, f.Markdown = filepath.Join(dir, "out", "syscall.json"), filepath.Join(dir, "out", "syscall.md")
	var stdout, log bytes.Buffer
	logf := func(format string, args ...any) { log.WriteString(strings.TrimSpace(format) + "\n") }
	if err := f.Write(r, &stdout, logf); err != nil {
		t.Fatal(err)
	}
	if stdout.Len() != 0 || strings.Count(log.String(), "wrote") != 2 {
		t.Errorf("stdout %q, log %q", stdout.String(), log.String())
	}
	b, err := os.ReadFile(f.JSON)
	if err != nil {
		t.Fatal(err)
	}
	back, err := schema.Decode(b, "syscall")
	if err != nil || back.(*schema.Syscall).Results[0].Ops != 10 {
		t.Errorf("the JSON written does not decode: %v", err)
	}
	md, err := os.ReadFile(f.Markdown)
	if err != nil || !strings.Contains(string(md), "| getppid |") {
		t.Errorf("markdown (%v):\n%s", err, md)
	}

	f.Markdown = ""
	if err := f.Write(r, &stdout, logf); err != nil || !strings.HasPrefix(stdout.String(), "# moat benchmark results: bench/syscall") {
		t.Errorf("printed markdown (%v): %.100q", err, stdout.String())
	}
	f.JSON = filepath.Join(dir, "out", "syscall.json", "no") // a file as a directory
	if err := f.Write(r, io.Discard, logf); err == nil {
		t.Error("an unwritable --json went unreported")
	}
}
