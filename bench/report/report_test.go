package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/bench/render"
	"github.com/moat-sandbox/moat/bench/schema"
)

// fixtures holds a results file of every kind, in the schema
// (bench/schema's test data).
var fixtures = filepath.Join("..", "schema", "testdata", "full")

// generateInto runs the report on the results in dir and returns the
// markdown, the summary and the report's directory.
func generateInto(t *testing.T, results string) (md string, sum *schema.Summary, docs string) {
	t.Helper()
	out := t.TempDir()
	docs = filepath.Join(out, "docs")
	var stdout, stderr bytes.Buffer
	code := run([]string{"--results", results, "--out", filepath.Join(docs, "PERFORMANCE.md"),
		"--plots", filepath.Join(docs, "perf"), "--summary", filepath.Join(out, "summary.json")}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
	}
	b, err := os.ReadFile(filepath.Join(docs, "PERFORMANCE.md"))
	if err != nil {
		t.Fatal(err)
	}
	sum, err = readSummary(filepath.Join(out, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b), sum, docs
}

// line returns the first line of md that starts with prefix.
func line(t *testing.T, md, prefix string) string {
	t.Helper()
	for l := range strings.SplitSeq(md, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	t.Fatalf("no line starting with %q", prefix)
	return ""
}

// readFixture reads a fixture as raw JSON.
func readFixture[T any](t *testing.T, name string) *T {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtures, name))
	if err != nil {
		t.Fatal(err)
	}
	v := new(T)
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
	return v
}

// fixture decodes the results fixture of kind through the schema.
func fixture[T schema.Result](t *testing.T, kind string) T {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtures, schema.FileName(kind)))
	if err != nil {
		t.Fatal(err)
	}
	r, err := schema.Decode(b, kind)
	if err != nil {
		t.Fatal(err)
	}
	return r.(T)
}

// The formatting the renderer applies, for the expected cells.
func num(v float64) string   { return render.Num(v) }
func ratio(v float64) string { return fmt.Sprintf("%.2f×", v) }
func mib(kib float64) string { return fmt.Sprintf("%.2f", kib/1024) }
func verdict(met bool) string {
	if met {
		return "**met**"
	}
	return "**not met**"
}

func TestFullReport(t *testing.T) {
	md, sum, docs := generateInto(t, fixtures)

	// Figures computed from the fixtures, formatted as the report does.
	st := fixture[*schema.Startup](t, "startup")
	moat, bwrap, runc := st.System("moat"), st.System("bwrap"), st.System("runc")
	row := line(t, md, "| cold start, `moat run -- /bin/true` |")
	for _, want := range []string{
		num(*moat.P50) + " ms", num(*moat.P95) + " ms", num(*moat.P99) + " ms",
		fmt.Sprintf("moat / bwrap %.2f×", *moat.P50 / *bwrap.P50), "**not met**",
	} {
		if !strings.Contains(row, want) {
			t.Errorf("moat's headline row lacks %q:\n%s", want, row)
		}
	}
	row = line(t, md, "| cold start, runc |")
	if want := fmt.Sprintf("moat %.2f× faster", *runc.P50 / *moat.P50); !strings.Contains(row, want) {
		t.Errorf("runc's row lacks %q:\n%s", want, row)
	}

	// A skipped peer has its reason in its own row, in the peers table
	// and in the headline; the peers never runnable here too.
	reason := st.System("runsc").SkippedReason
	for _, prefix := range []string{"| gVisor (`runsc`) |", "| cold start, gVisor `runsc` |"} {
		if row := line(t, md, prefix); !strings.Contains(row, "skipped: "+reason) {
			t.Errorf("row %q lacks the skipped reason:\n%s", prefix, row)
		}
	}
	if row := line(t, md, "| Firecracker |"); !strings.Contains(row, "nested PVM") {
		t.Errorf("Firecracker's row lacks its reason:\n%s", row)
	}
	if row := line(t, md, "| hosted agent sandboxes"); !strings.Contains(row, "hosted services, not runnable on this machine") {
		t.Errorf("the hosted sandboxes' row lacks its reason:\n%s", row)
	}
	notMeasured := md[strings.Index(md, "## What could not be measured"):]
	for _, want := range []string{reason, "Firecracker"} {
		if !strings.Contains(notMeasured, want) {
			t.Errorf("\"What could not be measured\" lacks %q", want)
		}
	}

	// The other benchmarks' headline figures.
	cp := fixture[*schema.Controlplane](t, "controlplane")
	api := schema.Row(cp.TTI, "sequential", schema.KindAPI)
	row = line(t, md, "| time to interactive (API create → first `echo`), sequential |")
	if !strings.Contains(row, num(api.Stats.P50)+" ms") || !strings.Contains(row, "**met**") {
		t.Errorf("TTI row: %s", row)
	}
	row = line(t, md, "| exec round trip")
	if !strings.Contains(row, num(cp.Exec.Stats.P50)+" ms") || !strings.Contains(row, "**met**") {
		t.Errorf("exec row: %s", row)
	}
	de := fixture[*schema.Density](t, "density")
	row = line(t, md, "| density: moat memory (PSS) per sandbox at 1000 live |")
	if !strings.Contains(row, num(de.Density.MoatPSSPerSandboxKiB)+" KiB") || !strings.Contains(row, "**met**") {
		t.Errorf("density row: %s", row)
	}
	last := de.Levels[len(de.Levels)-1]
	row = line(t, md, "| scaling: create → first `echo` (API) at 1000 live |")
	if want := fmt.Sprintf("vs 1 live %.2f×", last.TTI.P50/de.Levels[0].TTI.P50); !strings.Contains(row, want) {
		t.Errorf("scaling row lacks %q: %s", want, row)
	}
	for _, prefix := range []string{"| syscall overhead: getppid |", "| file I/O overhead: open-close |",
		"| egress proxy throughput: proxy HTTP forward |", "| egress proxy, added connect latency", "| policy decision",
		"| warm start: create served by the warm pool", "| fork: create from that snapshot"} {
		line(t, md, prefix)
	}
	if row := line(t, md, "| syscall overhead: getppid |"); !strings.Contains(row, "+20.0%") || !strings.Contains(row, "**not met**") {
		t.Errorf("getppid row: %s", row)
	}
	if row := line(t, md, "| egress proxy throughput: proxy HTTP forward |"); !strings.Contains(row, "0.70×") || !strings.Contains(row, "**not met**") {
		t.Errorf("HTTP forward row: %s", row)
	}

	// The machine and the run.
	for _, want := range []string{"Linux 6.1.0-test", "2 × Test CPU @ 2.0GHz", "23.5 GiB", "go1.26.8", "abc123def456", "bubblewrap 0.8.0", "runc version 1.1.5"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(md, "not run in this invocation (no ") {
		t.Error("a benchmark is reported not run although every results file is there")
	}

	// Plots: written, non-empty PNGs, linked relatively.
	for _, name := range render.KnownPlots() {
		if !strings.Contains(md, "](perf/"+name+".png)") {
			t.Errorf("report does not link perf/%s.png", name)
		}
		f, err := os.Open(filepath.Join(docs, "perf", name+".png"))
		if err != nil {
			t.Error(err)
			continue
		}
		cfg, err := png.DecodeConfig(f)
		f.Close()
		if err != nil || cfg.Width < 600 || cfg.Height < 300 {
			t.Errorf("%s.png: %v, %dx%d", name, err, cfg.Width, cfg.Height)
		}
	}

	// summary.json: stable IDs, the same numbers, goals and verdicts.
	byID := map[string]schema.Figure{}
	for _, f := range sum.Figures {
		byID[f.ID] = f
	}
	if f := byID["startup.moat.p50_ms"]; f.Value != *moat.P50 || f.Unit != "ms" {
		t.Errorf("startup.moat.p50_ms = %+v, want %v ms", f, *moat.P50)
	}
	for id, met := range map[string]bool{
		"startup.moat.ratio_to_bwrap":            false,
		"controlplane.tti.sequential.api.p50_ms": true,
		"controlplane.tti.bursts.api.p50_ms":     false,
		"controlplane.exec.p50_ms":               true,
		"rootfs.warm.p50_ms":                     false,
		"rootfs.fork.p50_ms":                     true,
		"density.live":                           true,
		"density.moat_pss_per_sandbox_kib":       true,
		"syscall.getppid.overhead_pct":           false,
		"netproxy.connect.added_p50_ms":          true,
		"policy.mix.p99_us":                      true,
	} {
		f, ok := byID[id]
		if !ok || f.Met == nil || *f.Met != met || f.Goal == "" {
			t.Errorf("%s: %+v, want a goal and met=%v", id, f, met)
		}
	}
	if _, ok := byID["density.L1000.tti.p50_ms"]; !ok {
		t.Error("no density.L1000.tti.p50_ms")
	}
	if sum.Commit != "abc123def456" || sum.Machine == nil || sum.Machine.MemTotalKiB != 24627000 || len(sum.Benchmarks) != len(schema.Kinds()) {
		t.Errorf("summary header: commit %q machine %+v benchmarks %v", sum.Commit, sum.Machine, sum.Benchmarks)
	}
	for _, f := range sum.Figures {
		if strings.Contains(f.ID, "#") {
			t.Errorf("figure ID %q is not stable (a duplicate)", f.ID)
		}
	}
}

// The same results give the same report, byte for byte.
func TestDeterministic(t *testing.T) {
	out := t.TempDir()
	args := []string{"--results", fixtures, "--out", filepath.Join(out, "P.md"), "--plots", filepath.Join(out, "perf")}
	var first []byte
	var firstPNG []byte
	for i := range 2 {
		var stderr bytes.Buffer
		if code := run(args, &bytes.Buffer{}, &stderr); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		md, _ := os.ReadFile(filepath.Join(out, "P.md"))
		img, _ := os.ReadFile(filepath.Join(out, "perf", "scaling.png"))
		if i == 0 {
			first, firstPNG = md, img
			continue
		}
		if !bytes.Equal(md, first) || !bytes.Equal(img, firstPNG) {
			t.Error("a second run on the same results wrote a different report or plot")
		}
	}
}

func copyFixture(t *testing.T, dst string, names ...string) {
	t.Helper()
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(fixtures, n))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestMissingResults(t *testing.T) {
	results := t.TempDir()
	copyFixture(t, results, "startup.json")
	out := t.TempDir()
	perf := filepath.Join(out, "perf")
	// A plot of an earlier run that this one cannot draw must go.
	if err := os.MkdirAll(perf, 0o755); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(perf, "scaling.png")
	if err := os.WriteFile(stale, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	if code := run([]string{"--results", results, "--out", filepath.Join(out, "PERFORMANCE.md"), "--plots", perf}, &bytes.Buffer{}, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	b, _ := os.ReadFile(filepath.Join(out, "PERFORMANCE.md"))
	md := string(b)
	for _, bench := range []string{"syscall", "policy", "netproxy", "controlplane", "daemon", "rootfs", "density", "workflow"} {
		if row := line(t, md, "| `bench/"+bench+"` |"); !strings.Contains(row, "not run in this invocation") {
			t.Errorf("provenance row of %s: %s", bench, row)
		}
		want := fmt.Sprintf("**Not run in this invocation**: `%s` is missing", filepath.ToSlash(filepath.Join(results, bench+".json")))
		if !strings.Contains(md, want) {
			t.Errorf("no %q", want)
		}
	}
	if row := line(t, md, "| time to interactive (API), sequential |"); !strings.Contains(row, "not run in this invocation") {
		t.Errorf("headline row of a missing benchmark: %s", row)
	}
	if !strings.Contains(md, "](perf/startup.png)") || strings.Contains(md, "perf/tti.png") {
		t.Error("the plots linked do not match the results present")
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale scaling.png left in place: %v", err)
	}
	if _, err := os.Stat(filepath.Join(perf, "startup.png")); err != nil {
		t.Error(err)
	}
}

func TestNoResultsAtAll(t *testing.T) {
	md, sum, _ := generateInto(t, t.TempDir())
	if !strings.Contains(md, fmt.Sprintf("Benchmarks found: 0 of %d", len(schema.Kinds()))) || len(sum.Figures) != 0 {
		t.Errorf("empty results: %d figures", len(sum.Figures))
	}
	if row := line(t, md, "| runc |"); !strings.Contains(row, "bench/startup was not run in this invocation") {
		t.Errorf("runc's row: %s", row)
	}
}

func TestMalformed(t *testing.T) {
	for name, content := range map[string]string{
		"not JSON":       "{\"systems\": [",
		"wrong type":     `{"systems": 3}`,
		"not its shape":  `{}`,
		"trailing bytes": `{"systems": []} x`,
	} {
		t.Run(name, func(t *testing.T) {
			results := t.TempDir()
			copyFixture(t, results, "density.json")
			if err := os.WriteFile(filepath.Join(results, "startup.json"), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			out := t.TempDir()
			var stderr bytes.Buffer
			code := run([]string{"--results", results, "--out", filepath.Join(out, "P.md"), "--plots", filepath.Join(out, "perf")}, &bytes.Buffer{}, &stderr)
			if code != 1 {
				t.Fatalf("exit %d, want 1", code)
			}
			if msg := stderr.String(); !strings.Contains(msg, "malformed") || !strings.Contains(msg, "startup.json") {
				t.Errorf("error does not name the file: %s", msg)
			}
			if _, err := os.Stat(filepath.Join(out, "P.md")); !os.IsNotExist(err) {
				t.Error("a report was written from malformed results")
			}
		})
	}
}

func writeSummaryFile(t *testing.T, s *schema.Summary) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "summary.json")
	if err := writeSummary(p, s); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCompare(t *testing.T) {
	yes, no := true, false
	old := writeSummaryFile(t, &schema.Summary{Commit: "aaa", Date: "2026-01-01T00:00:00Z", Figures: []schema.Figure{
		{ID: "startup.moat.p50_ms", Title: "cold start, moat, p50", Unit: "ms", Value: 10, Better: "lower"},
		{ID: "controlplane.tti.sequential.api.p50_ms", Title: "tti", Unit: "ms", Value: 12, Goal: "< 10", Met: &no, Better: "lower"},
		{ID: "gone", Title: "a figure removed", Unit: "ms", Value: 1},
	}})
	cur := writeSummaryFile(t, &schema.Summary{Schema: schema.Version, Commit: "bbb", Date: "2026-01-02T00:00:00Z", Figures: []schema.Figure{
		{ID: "startup.moat.p50_ms", Title: "cold start, moat, p50", Unit: "ms", Value: 11, Better: "lower"},
		{ID: "controlplane.tti.sequential.api.p50_ms", Title: "tti", Unit: "ms", Value: 9, Goal: "< 10", Met: &yes, Better: "lower"},
		{ID: "added", Title: "a new figure", Unit: "×", Value: 2},
	}})
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--compare", old, cur}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	out := stdout.String()
	for _, c := range []struct{ id, want string }{
		{"startup.moat.p50_ms", "| 10 | 11 | +10.0% | worse |"},
		{"controlplane.tti.sequential.api.p50_ms", "| 12 | 9 | -25.0% | better | < 10: not met → met |"},
		{"gone", "| 1 | — | — | only in old |"},
		{"added", "| — | 2 | — | only in new |"},
	} {
		if row := line(t, out, "| "+strings.SplitN(rowTitle(c.id), "|", 2)[0]); !strings.Contains(row, c.want) {
			t.Errorf("%s: row lacks %q:\n%s", c.id, c.want, row)
		}
	}
	if !strings.Contains(out, "commit aaa") || !strings.Contains(out, "commit bbb") {
		t.Errorf("no commits in the comparison:\n%s", out)
	}
	if !strings.Contains(out, "2 figures in both (1 better, 1 worse") {
		t.Errorf("no tally:\n%s", out)
	}

	// A summary that is not one is an error.
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"commit": "x"}`), 0o644)
	stderr.Reset()
	if code := run([]string{"--compare", old, bad}, &bytes.Buffer{}, &stderr); code != 1 || !strings.Contains(stderr.String(), "malformed") {
		t.Errorf("bad summary: exit %d, %s", code, stderr.String())
	}
	if code := run([]string{"--compare", old}, &bytes.Buffer{}, &bytes.Buffer{}); code != 2 {
		t.Errorf("--compare with one file: exit %d, want 2", code)
	}
}

// rowTitle maps the IDs of TestCompare to the titles its rows start with.
func rowTitle(id string) string {
	return map[string]string{
		"startup.moat.p50_ms":                    "cold start, moat, p50 |",
		"controlplane.tti.sequential.api.p50_ms": "tti |",
		"gone":                                   "a figure removed |",
		"added":                                  "a new figure |",
	}[id]
}

// A full run's summary compared with itself: every figure, no change.
func TestCompareSelf(t *testing.T) {
	_, sum, _ := generateInto(t, fixtures)
	p := writeSummaryFile(t, sum)
	var stdout bytes.Buffer
	if code := run([]string{"--compare", p, p}, &stdout, &bytes.Buffer{}); code != 0 {
		t.Fatal(code)
	}
	if want := fmt.Sprintf("%d figures in both (0 better, 0 worse", len(sum.Figures)); !strings.Contains(stdout.String(), want) {
		t.Errorf("no %q in:\n%s", want, stdout.String()[max(0, stdout.Len()-300):])
	}
}

// The log axis marks 1, 2 and 5 times the powers of ten.
func TestLogTicks(t *testing.T) {
	var labels []string
	for _, tk := range (logTicks{}).Ticks(0.4, 60) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if got := strings.Join(labels, " "); got != "0.5 1 2 5 10 20 50" {
		t.Errorf("log ticks: %s", got)
	}
}

// A density run that did not reach its last level, and rootfs results
// without samples (written before bench/rootfs recorded them).
func TestPartialResults(t *testing.T) {
	results := t.TempDir()
	de := readFixture[map[string]any](t, "density.json")
	levels := (*de)["levels"].([]any)
	(*de)["levels"] = levels[:len(levels)-1]
	(*de)["failed"] = true
	(*de)["errors"] = []string{"create 412: the daemon refused: out of pids"}
	rf := readFixture[map[string]any](t, "rootfs.json")
	delete(*rf, "samples")
	for name, v := range map[string]any{"density.json": de, "rootfs.json": rf} {
		b, _ := json.Marshal(v)
		if err := os.WriteFile(filepath.Join(results, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	md, _, docs := generateInto(t, results)
	for _, want := range []string{
		"bench/density level 1000 live: not reached in this run; first error: `create 412: the daemon refused: out of pids`",
		"The bench/rootfs plot: rootfs.json holds no samples",
		"**bench/density reported 1 failure(s)**",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if _, err := os.Stat(filepath.Join(docs, "perf", "rootfs.png")); !os.IsNotExist(err) {
		t.Error("a rootfs plot without samples")
	}
	if _, err := os.Stat(filepath.Join(docs, "perf", "scaling.png")); err != nil {
		t.Error(err)
	}
}

// bench/daemon's section: the floods against their budgets, the byte
// accounting, the durable exec throughput against the old daemon, the
// auth flood, their headline rows and figures; --section prints the
// section and those rows alone.
func TestDaemonSection(t *testing.T) {
	md, sum, _ := generateInto(t, fixtures)
	de := fixture[*schema.Daemon](t, "daemon")
	def, small := &de.Flood[0], &de.Flood[1]

	// Default budgets: growth under budget + 25%; but one exec's answer
	// lacks bytes it did not report: not every byte accounted.
	row := line(t, md, "| output flood (1 GiB / 256 MiB), daemon peak RSS growth |")
	for _, want := range []string{"≤ documented bound (1280 MiB)", "+" + mib(float64(def.PeakGrowthKiB)) + " MiB", "**met**"} {
		if !strings.Contains(row, want) {
			t.Errorf("default flood row lacks %q:\n%s", want, row)
		}
	}
	if row := line(t, md, "| output flood (1 GiB / 256 MiB), every byte printed accounted for |"); !strings.Contains(row, "**not met**") {
		t.Errorf("default accounting row: %s", row)
	}
	row = line(t, md, "| output flood (64 MiB / 16 MiB), daemon peak RSS growth |")
	for _, want := range []string{"(80 MiB)", "+" + mib(float64(small.PeakGrowthKiB)) + " MiB", "**not met**"} {
		if !strings.Contains(row, want) {
			t.Errorf("small flood row lacks %q:\n%s", want, row)
		}
	}
	if row := line(t, md, "| output flood (64 MiB / 16 MiB), every byte printed accounted for |"); !strings.Contains(row, "| **met** |") {
		t.Errorf("small accounting row: %s", row)
	}
	if !strings.Contains(md, "default budgets: execs printed 134217728 bytes, their answers count 134197248") {
		t.Error("the accounting error is not in the section")
	}

	// Throughput: one row per level, the ratio from the JSON, verdict by
	// the ≥ 1.0× goal.
	for _, l := range de.Throughput.Levels {
		row := line(t, md, fmt.Sprintf("| durable exec throughput (`/bin/true`), %d client(s): new / old daemon |", l.Clients))
		want := verdict(*l.Ratio >= 1)
		if !strings.Contains(row, ratio(*l.Ratio)) || !strings.Contains(row, want+" |") {
			t.Errorf("%d clients: row lacks %s and %s:\n%s", l.Clients, ratio(*l.Ratio), want, row)
		}
	}
	// The auth flood and the section's place.
	if row := line(t, md, "| new | 178837 |"); !strings.Contains(row, "| 29 | 178808 |") {
		t.Errorf("auth row: %s", row)
	}
	if i, j, k := strings.Index(md, "## Time to interactive through the API"), strings.Index(md, "## Daemon under exhaustion (`bench/daemon`)"),
		strings.Index(md, "## Warm pools"); i < 0 || j < i || k < j {
		t.Errorf("the daemon section is not between the control plane's and rootfs' (%d, %d, %d)", i, j, k)
	}
	if row := line(t, md, "| `bench/daemon` |"); !strings.Contains(row, "`daemon.json`") {
		t.Errorf("provenance row: %s", row)
	}

	byID := map[string]schema.Figure{}
	for _, f := range sum.Figures {
		byID[f.ID] = f
	}
	for id, met := range map[string]bool{
		"daemon.flood.default.peak_growth_mib": true,
		"daemon.flood.small.peak_growth_mib":   false,
		"daemon.flood.default.accounted":       false,
		"daemon.flood.small.accounted":         true,
		"daemon.exec.c1.ratio":                 *de.Throughput.Levels[0].Ratio >= 1,
	} {
		f, ok := byID[id]
		if !ok || f.Met == nil || *f.Met != met {
			t.Errorf("%s: %+v, want met=%v", id, f, met)
		}
	}
	for _, id := range []string{"daemon.auth.new.events_per_1000", "daemon.auth.old.answered_per_s", "daemon.record.w32.ratio", "daemon.exec.c32.new.p99_ms"} {
		if _, ok := byID[id]; !ok {
			t.Errorf("no figure %s", id)
		}
	}

	// --section: the section alone, then its headline rows; nothing else.
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--results", fixtures, "--section", "daemon"}, &stdout, &stderr); code != 0 {
		t.Fatalf("--section: exit %d: %s", code, stderr.String())
	}
	out := stdout.String()
	if !strings.HasPrefix(out, "## Daemon under exhaustion (`bench/daemon`)\n") || strings.Contains(out, "## Warm pools") ||
		strings.Contains(out, "## Time to interactive") {
		t.Errorf("--section printed more or less than the section:\n%.300s", out)
	}
	rows := out[strings.Index(out, "<!-- The headline rows"):]
	if strings.Count(rows, "\n| output flood") != 4 || strings.Count(rows, "\n| durable exec throughput") != 3 || strings.Contains(rows, "| cold start") {
		t.Errorf("--section's headline rows:\n%s", rows)
	}
	if code := run([]string{"--results", fixtures, "--section", "nope"}, &bytes.Buffer{}, &bytes.Buffer{}); code != 1 {
		t.Errorf("--section nope: exit %d, want 1", code)
	}
}

// --render prints one results file's markdown, as its benchmark writes
// it; a file of another schema version is refused.
func TestRender(t *testing.T) {
	for _, kind := range schema.Kinds() {
		var stdout, stderr bytes.Buffer
		if code := run([]string{"--render", filepath.Join(fixtures, schema.FileName(kind))}, &stdout, &stderr); code != 0 {
			t.Fatalf("%s: exit %d: %s", kind, code, stderr.String())
		}
		want, err := render.Markdown(fixture[schema.Result](t, kind))
		if err != nil || stdout.String() != want {
			t.Errorf("%s: --render printed something else than render.Markdown (%v)", kind, err)
		}
	}
	old := filepath.Join(t.TempDir(), "daemon.json")
	if err := os.WriteFile(old, []byte(`{"machine": {}, "flood": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	if code := run([]string{"--render", old}, &bytes.Buffer{}, &stderr); code != 1 || !strings.Contains(stderr.String(), "another schema version") {
		t.Errorf("a version 1 file: exit %d: %s", code, stderr.String())
	}
}
