package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/bench/internal/cli"
	"github.com/moat-sandbox/moat/bench/render"
	"github.com/moat-sandbox/moat/bench/schema"
)

func TestParseFlags(t *testing.T) {
	moat := filepath.Join(t.TempDir(), "moat")
	if err := os.WriteFile(moat, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--build-rounds", "-1"}, {"--build-warmup", "-1"}, {"--units", "0"}, {"--funcs", "1001"}, {"--jobs", "0"},
		{"--call-timeout", "0s"}, {"--rounds", "0", "--build-rounds", "0"}, {"--warmup", "-1"}, {"extra"},
	} {
		if _, err := parseFlags(append([]string{"--moat", moat}, args...), io.Discard); !errors.Is(err, cli.ErrUsage) {
			t.Errorf("parseFlags(%v) = %v, want a usage error", args, err)
		}
	}
	o, err := parseFlags([]string{"--moat", moat}, io.Discard)
	if err != nil || o.Rounds != 30 || o.Warmup != 3 || o.buildRounds != 5 || o.buildWarmup != 1 || o.units != units || o.funcs != funcs ||
		o.jobs != 2 || o.callTimeout != 5*time.Minute || o.Seed == 0 {
		t.Fatalf("defaults: %+v, %v", o, err)
	}
	if o, err := parseFlags([]string{"--moat", moat, "--rounds", "0"}, io.Discard); err != nil || o.Rounds != 0 {
		t.Errorf("--rounds 0 (only the real build): %+v, %v", o, err)
	}
	if o, err := parseFlags([]string{"--moat", moat, "--build-rounds", "0"}, io.Discard); err != nil || o.buildRounds != 0 {
		t.Errorf("--build-rounds 0 (only the fixed cost): %+v, %v", o, err)
	}
}

// schedule spreads n runs over total rounds, one per round at most, the
// first in round 0.
func TestSchedule(t *testing.T) {
	for _, c := range []struct{ n, total int }{{6, 33}, {33, 33}, {1, 5}, {0, 4}, {5, 6}} {
		in := schedule(c.n, c.total)
		var at []int
		for r, ok := range in {
			if ok {
				at = append(at, r)
			}
		}
		if len(in) != c.total || len(at) != c.n || (c.n > 0 && at[0] != 0) {
			t.Errorf("schedule(%d, %d) = rounds %v", c.n, c.total, at)
		}
		// Evenly: no gap longer than the rounds over the runs, rounded up.
		for i := 1; i < len(at); i++ {
			if gap := at[i] - at[i-1]; gap > (c.total+c.n-1)/c.n {
				t.Errorf("schedule(%d, %d): gap %d in %v", c.n, c.total, gap, at)
			}
		}
	}
}

// The generated project is the same every time, and its tar holds every
// file as a regular file of mode 0644, sorted.
func TestRealProject(t *testing.T) {
	p := realProject(3, 2)
	if len(p) != 3+3 || !bytes.Equal(realProject(3, 2)["u002.c"], p["u002.c"]) {
		t.Fatalf("project: %v", p.paths())
	}
	if mk := string(p["Makefile"]); !strings.Contains(mk, "OBJS = main.o u000.o u001.o u002.o\n") || !strings.Contains(mk, "\n"+realProgram+": $(OBJS)\n") {
		t.Errorf("Makefile:\n%s", mk)
	}
	if u := string(p["u001.c"]); !strings.Contains(u, "static unsigned long f1(unsigned long x) {\n\tx = f0(x);") || !strings.Contains(u, "unsigned long u001_entry(") {
		t.Errorf("u001.c:\n%s", u)
	}
	data, err := p.tar()
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(data))
	var names []string
	var size int64
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg || h.Mode != 0o644 || h.Size != int64(len(p[h.Name])) {
			t.Errorf("entry %+v", h)
		}
		names, size = append(names, h.Name), size+h.Size
	}
	if !slices.Equal(names, p.paths()) || size != p.size() {
		t.Errorf("tar holds %v (%d bytes), want %v (%d)", names, size, p.paths(), p.size())
	}
}

// The host's build gets exactly the variables of a build's sandbox.
func TestHostEnv(t *testing.T) {
	env := hostEnv("/d")
	var names []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		names = append(names, k)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"HOME", "LANG", "PATH", "SOURCE_DATE_EPOCH", "TMPDIR", "XDG_CACHE_HOME"}) ||
		!slices.Contains(env, "HOME=/d/build/home") || !slices.Contains(env, "SOURCE_DATE_EPOCH=315532800") {
		t.Errorf("hostEnv = %v", env)
	}
}

// A tiny real build on the host: the program is made, hashed, runs, and
// the same source gives the same program in another directory.
func TestHostBuild(t *testing.T) {
	for _, tool := range []string{"gcc", "make"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s: %v", tool, err)
		}
	}
	p := realProject(2, 1)
	d, sum, err := hostBuild(context.Background(), p, 2)
	if err != nil {
		t.Fatal(err)
	}
	if d <= 0 || len(sum) != 64 {
		t.Errorf("hostBuild = %v, %q", d, sum)
	}
	_, again, err := hostBuild(context.Background(), p, 1)
	if err != nil || again != sum {
		t.Errorf("a second build gave %q (%v), the first %q", again, err, sum)
	}
	bad := project{"Makefile": []byte(realProgram + ":\n\tfalse\n")}
	if _, _, err := hostBuild(context.Background(), bad, 1); err == nil {
		t.Error("a failing make was not an error")
	}
}

func TestCheckBuild(t *testing.T) {
	ok := &api.Build{ID: "b1", Status: api.BuildSucceeded, DurationMs: 5, Artifacts: []api.BuildArtifact{{Path: "prog", SHA256: "ab"}}}
	if err := checkBuild(ok, "prog"); err != nil {
		t.Error(err)
	}
	for name, c := range map[string]struct {
		b    api.Build
		want string
	}{
		"failed":        {api.Build{ID: "b2", Status: api.BuildFailed, Reason: api.ReasonCompileFailed, Log: api.BuildLog{Head: "cc: error"}}, "prog"},
		"extra output":  {*ok, ""},
		"wrong output":  {api.Build{ID: "b3", Status: api.BuildSucceeded, DurationMs: 1, Artifacts: []api.BuildArtifact{{Path: "other"}}}, "prog"},
		"no duration":   {api.Build{ID: "b4", Status: api.BuildSucceeded}, ""},
		"missing artif": {api.Build{ID: "b5", Status: api.BuildSucceeded, DurationMs: 1}, "prog"},
	} {
		if err := checkBuild(&c.b, c.want); !errors.Is(err, errBuild) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := checkBuild(&api.Build{ID: "b2", Status: api.BuildFailed, Reason: api.ReasonCompileFailed, Log: api.BuildLog{Head: "cc: error"}}, ""); err == nil ||
		!strings.Contains(err.Error(), "failed/compile_failed") || !strings.Contains(err.Error(), "cc: error") {
		t.Errorf("a failed build's error: %v", err)
	}
}

// The rows, ordered and summarised, render through bench/render with
// the goals judged against their references.
func TestRowsRender(t *testing.T) {
	rows := map[string]*row{}
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	for kind, samples := range map[string][]float64{
		schema.BuildHost:          {6000, 6100, 6200},
		schema.BuildSandbox:       {6500, 6600, 6700},
		schema.BuildBaseline:      {40, 50, 60},
		schema.BuildTrivial:       {60, 70, 80},
		schema.BuildTrivialOutput: {70, 80, 90},
	} {
		r := newRow(kind, "what "+kind)
		for _, v := range samples {
			s := sample{wall: ms(v)}
			switch kind {
			case schema.BuildBaseline:
				s.delete = ms(v / 2)
			case schema.BuildSandbox, schema.BuildTrivial, schema.BuildTrivialOutput:
				s.duration, s.call, s.peak = ms(v-20), ms(v-5), 1<<20
			}
			r.add(s)
		}
		rows[kind] = r
	}
	rep := &schema.Build{Run: schema.Run{Bench: "build"}, Config: schema.BuildConfig{Units: 24, BuildRounds: 3}, Rows: ordered(rows)}
	if len(rep.Rows) != 5 || rep.Rows[0].Kind != schema.BuildHost || rep.Rows[4].Kind != schema.BuildTrivialOutput {
		t.Fatalf("ordered: %+v", rep.Rows)
	}
	if r := rep.Row(schema.BuildTrivial); r.Duration == nil || r.Duration.P50 != 50 || r.Call.P50 != 65 || r.PeakMemoryBytes != 1<<20 {
		t.Errorf("trivial: %+v", r)
	}
	if r := rep.Row(schema.BuildBaseline); r.Delete == nil || r.Delete.P50 != 25 || r.Duration != nil {
		t.Errorf("baseline: %+v", r)
	}
	if r := rep.Row(schema.BuildHost); r.Duration != nil || r.Call != nil || r.Delete != nil {
		t.Errorf("host row with a daemon's duration: %+v", r)
	}
	fail(rep, "round 2, sandbox: boom")
	md, err := render.Markdown(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"1.08× (+8.2%, 500.0 ms). The goal (≤ 1.05×) is not met", "1.40× the cold create → first exec of the same daemon (50.00 ms). The goal (≤ 1.5×) is met",
		"1.60× the cold create → first exec", "the other 20.00 ms are outside it", "round 2, sandbox: boom",
		"took 25.00 ms at p50); create → first exec → delete is 75.00 ms, and the trivial build 0.93× of that",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}
