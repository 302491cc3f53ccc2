package render

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/bench/schema"
)

// fixtures holds a results file of every kind (bench/schema's test data).
var fixtures = filepath.Join("..", "schema", "testdata", "full")

func decodeFixture(t *testing.T, kind string) schema.Result {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtures, schema.FileName(kind)))
	if err != nil {
		t.Fatal(err)
	}
	r, err := schema.Decode(b, kind)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// headings are the section heading of each benchmark in the document.
var headings = map[string]string{
	"startup":      "## Cold start of one command (`bench/startup`)",
	"syscall":      "## Syscall and file I/O overhead inside the sandbox (`bench/syscall`)",
	"policy":       "## Policy decisions (`bench/policy`)",
	"netproxy":     "## Egress proxy (`bench/netproxy`)",
	"controlplane": "## Time to interactive through the API (`bench/controlplane`)",
	"daemon":       "## Daemon under exhaustion (`bench/daemon`)",
	"rootfs":       "## Warm pools, templates, snapshots and forks (`bench/rootfs`)",
	"density":      "## Density and scaling (`bench/density`)",
	"workflow":     "## Workflows (`bench/workflow`)",
	"build":        "## Sandboxed builds (`bench/build`)",
	"agent":        "## Agent runs (`bench/agent`)",
}

// The markdown of one benchmark's results, as the benchmark writes it:
// every kind renders, with its section, its figures, its headline rows
// and no plot.
func TestMarkdownEveryKind(t *testing.T) {
	// A figure of each fixture the section must print, as it prints it.
	want := map[string][]string{
		"startup":      {"| **moat** |", "moat against bubblewrap"},
		"syscall":      {"| getppid |", "Operations per loop: getppid 2000000"},
		"policy":       {"(mix)**", "Compiling the policy (three layers)"},
		"netproxy":     {"| proxy HTTP forward |", "Added p50 connect latency"},
		"controlplane": {"### Time to interactive", "### Exec round trip", "### Soak", "calls started per second"},
		"daemon":       {"### Output flood", "### Durable exec throughput, new daemon against old", "### Auth flood"},
		"rootfs":       {"| warm |", "Warm pool hits"},
		"density":      {"live idle sandboxes held at once", "Projection", "- Daemon: SIGTERM"},
		"workflow":     {"| `chain-light` |", "**Chain**", "**Retry**", "**Budget fairness**", "step.started → step.sandbox"},
		"build":        {"| `sandbox` |", "**Overhead**", "1.04× (+3.6%", "**Fixed cost**", "Both builds made the same program", "delete is 71.00 ms"},
		"agent":        {"| `tool-call` |", "**Tool-call overhead**", "2.74× (4.617 ms more)", "**Concurrency**", "p99 3.40× the p50", "at most 4 requests in flight"},
	}
	for _, kind := range schema.Kinds() {
		t.Run(kind, func(t *testing.T) {
			r := decodeFixture(t, kind)
			md, err := Markdown(r)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(md, "# moat benchmark results: bench/"+kind+"\n") {
				t.Errorf("title:\n%.200s", md)
			}
			machine := "Machine: Linux " + r.Header().Machine.Kernel + ", "
			for _, w := range append([]string{headings[kind], machine, "<!-- The headline rows of bench/" + kind}, want[kind]...) {
				if !strings.Contains(md, w) {
					t.Errorf("lacks %q", w)
				}
			}
			if strings.Contains(md, "](") || strings.Contains(md, "Not run in this invocation") {
				t.Errorf("a plot link or a missing section in:\n%s", md)
			}
			// Only this benchmark's section.
			for other, h := range headings {
				if other != kind && strings.Contains(md, h) {
					t.Errorf("holds the section of %s", other)
				}
			}
		})
	}
}

// A run that failed says so in its own markdown, with the failures.
func TestMarkdownFailedRun(t *testing.T) {
	r := decodeFixture(t, "syscall").(*schema.Syscall)
	r.Fail(5, "round 3 inside: exit status 1: moat: no cgroup")
	md, err := Markdown(r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md, "**The run failed** (bench/syscall exited non-zero)") || !strings.Contains(md, "`round 3 inside: exit status 1: moat: no cgroup`") {
		t.Errorf("markdown:\n%s", md)
	}
}

// Every kind in, the document holds every section, figures from each and
// no "not run".
func TestDocumentEveryKind(t *testing.T) {
	in := &Inputs{}
	for _, kind := range schema.Kinds() {
		if err := in.Set(decodeFixture(t, kind)); err != nil {
			t.Fatal(err)
		}
		if !in.Present(kind) || in.Get(kind) == nil {
			t.Fatalf("%s not present after Set", kind)
		}
	}
	d, err := Document(in, Options{Generator: "go run ./report", Results: "results", Plots: "perf"})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range headings {
		if !strings.Contains(d.Markdown, h) {
			t.Errorf("no %q", h)
		}
	}
	if strings.Contains(d.Markdown, "Not run in this invocation") || len(d.Plots) != len(KnownPlots()) {
		t.Errorf("%d plots; a section not run?", len(d.Plots))
	}
	seen := map[string]bool{}
	for _, f := range d.Summary.Figures {
		seen[strings.SplitN(f.ID, ".", 2)[0]] = true
	}
	for _, kind := range schema.Kinds() {
		if !seen[kind] {
			t.Errorf("no figure of %s in the summary", kind)
		}
	}
	if d.Summary.Schema != schema.Version || len(d.Summary.Benchmarks) != len(schema.Kinds()) {
		t.Errorf("summary header %+v", d.Summary)
	}
}

func TestInputsRefuseNil(t *testing.T) {
	var in Inputs
	if in.Get("startup") != nil || in.Present("density") || in.Get("docker") != nil {
		t.Error("empty inputs hold something")
	}
	if _, err := Section(&in, Options{}, "docker"); !errors.Is(err, ErrNoSection) {
		t.Errorf("Section of an unknown benchmark: %v", err)
	}
}

func TestGoalsAndFormatting(t *testing.T) {
	for _, c := range []struct {
		g    goal
		want string
	}{
		{goalTTI, "p50 < 10 ms"},
		{goalSyscall, "p50 ≤ 5%"},
		{goalDensityLive, "≥ 1000 sandboxes"},
		{goalProxyRatio, "p50 ≥ 0.8×"},
		{goalPolicy, "p99 < 50 µs"},
	} {
		if got := c.g.String(); got != c.want {
			t.Errorf("goal %+v = %q, want %q", c.g, got, c.want)
		}
	}
	if !goalTTI.met(9.99) || goalTTI.met(10) || !goalSyscall.met(5) || goalDensityLive.met(999) {
		t.Error("goal comparisons")
	}
	if got := escapePipes("`a | b` and \\| c"); got != "`a \\| b` and \\| c" {
		t.Errorf("escapePipes = %q", got)
	}
	if got := slower(6, 2); got != "3.00× slower" {
		t.Error(got)
	}
	if got := slower(2, 6); got != "3.00× faster" {
		t.Error(got)
	}
	for v, want := range map[float64]string{2.8754: "2.875", 12.5: "12.50", 135.24: "135.2", 1024.4: "1024"} {
		if got := Num(v); got != want {
			t.Errorf("Num(%v) = %q, want %q", v, got, want)
		}
	}
}
