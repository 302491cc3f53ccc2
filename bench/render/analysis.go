package render

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/moat-sandbox/moat/bench/internal/stats"
	"github.com/moat-sandbox/moat/bench/schema"
)

// goal is a target of the issue: a comparison against a number in the
// figure's unit.
type goal struct {
	op     string // "<", "<=", ">="
	target float64
	unit   string
	stat   string // which statistic it applies to: "p50", "p99", "" (the value)
}

func (g goal) met(v float64) bool {
	switch g.op {
	case "<":
		return v < g.target
	case "<=":
		return v <= g.target
	case ">=":
		return v >= g.target
	case ">":
		return v > g.target
	}
	return false
}

// String is the goal as the headline table writes it: "p50 < 10 ms".
func (g goal) String() string {
	op := map[string]string{"<=": "≤", ">=": "≥"}[g.op]
	if op == "" {
		op = g.op
	}
	s := op + " " + trimNum(g.target)
	if g.unit != "" {
		if g.unit == "%" || g.unit == "×" {
			s += g.unit
		} else {
			s += " " + g.unit
		}
	}
	if g.stat != "" {
		s = g.stat + " " + s
	}
	return s
}

// short is the goal without its statistic, for summary.json ("< 10").
func (g goal) short() string {
	op := map[string]string{"<=": "≤", ">=": "≥"}[g.op]
	if op == "" {
		op = g.op
	}
	return op + " " + trimNum(g.target)
}

// The goals (docs/PERFORMANCE.md, bench/README.md and the
// benchmarks' own comments word them).
var (
	goalTTI         = goal{"<", 10, "ms", "p50"}
	goalExec        = goal{"<", 3, "ms", "p50"}
	goalWarm        = goal{"<", 2, "ms", "p50"}
	goalWarmBare    = goal{"<=", 3, "×", "p50"}   // warm claim → first exec / bare /bin/true (issue 20)
	goalExecBare    = goal{"<=", 1.5, "×", "p50"} // exec round trip / bare /bin/true (issue 20)
	goalAPIBwrap    = goal{"<=", 1.5, "×", "p50"} // API create (no pool) → first exec / bwrap (issue 20)
	goalFork        = goal{"<", 30, "ms", "p50"}
	goalDensityLive = goal{">=", 1000, "sandboxes", ""}
	goalDensityPSS  = goal{"<", 2048, "KiB", ""}
	goalSyscall     = goal{"<=", 5, "%", "p50"}
	goalProxyRatio  = goal{">=", 0.80, "×", "p50"}
	goalConnect     = goal{"<", 1, "ms", "p50"}
	goalProxyStart  = goal{"<", 2, "ms", "p50"}
	goalPolicy      = goal{"<", 50, "µs", "p99"}
)

// headRow is one row of the headline table, formatted.
type headRow struct {
	Figure, Goal, P50, P95, P99, Ratio, Result string
	group                                      int    // headline order
	bench                                      string // the benchmark it comes from
}

// Groups of the headline table, in its order.
const (
	gCold = iota
	gTTI
	gWarm
	gDensity
	gSyscall
	gFileIO
	gProxy
	gScaling
	gExec
	gSoak
	gDaemon
	gWorkflow
	gBuild
	gAgent
	gPolicy
)

// analysis collects, while the sections are computed, the figures of
// summary.json, the headline rows and what could not be measured.
type analysis struct {
	figures     []schema.Figure
	head        []headRow
	notMeasured []string
	ids         map[string]bool
	grp         int    // the group of the next headline rows
	bench       string // the benchmark of the next headline rows
}

func newAnalysis() *analysis { return &analysis{ids: map[string]bool{}} }

// fig records a figure; a NaN or infinite value is not a figure.
func (a *analysis) fig(id, title, unit string, v float64, better string) *schema.Figure {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	if a.ids[id] {
		// Two rows with one name (a benchmark changed): keep both,
		// distinguishable.
		for i := 2; ; i++ {
			alt := fmt.Sprintf("%s#%d", id, i)
			if !a.ids[alt] {
				id = alt
				break
			}
		}
	}
	a.ids[id] = true
	a.figures = append(a.figures, schema.Figure{ID: id, Title: title, Unit: unit, Value: v, Better: better})
	return &a.figures[len(a.figures)-1]
}

// goalFig records a figure with a goal and returns whether it is met.
func (a *analysis) goalFig(id, title, unit string, v float64, better string, g goal) bool {
	met := g.met(v)
	if f := a.fig(id, title, unit, v, better); f != nil {
		f.Goal = g.short()
		f.Met = &met
	}
	return met
}

// setGoal attaches a goal to the recorded figure id and returns whether
// its value meets it (false when there is no such figure).
func (a *analysis) setGoal(id string, g goal) bool {
	for i := range a.figures {
		if f := &a.figures[i]; f.ID == id {
			met := g.met(f.Value)
			f.Goal, f.Met = g.short(), &met
			return met
		}
	}
	return false
}

// statFigs records n, p50, p95, p99 (and min, max, mean) of s under
// prefix; unit is the statistics' unit ("ms", "µs").
func (a *analysis) statFigs(prefix, title, unit string, s *stats.Summary) {
	if s == nil || s.N == 0 {
		return
	}
	suffix := "_" + map[string]string{"ms": "ms", "µs": "us"}[unit]
	a.fig(prefix+".n", title+", samples", "count", float64(s.N), "")
	a.fig(prefix+".p50"+suffix, title+", p50", unit, s.P50, "lower")
	a.fig(prefix+".p95"+suffix, title+", p95", unit, s.P95, "lower")
	a.fig(prefix+".p99"+suffix, title+", p99", unit, s.P99, "lower")
	a.fig(prefix+".max"+suffix, title+", max", unit, s.Max, "lower")
	a.fig(prefix+".mean"+suffix, title+", mean", unit, s.Mean, "lower")
}

func (a *analysis) row(r headRow) {
	r.group, r.bench = a.grp, a.bench
	a.head = append(a.head, r)
}

// headline returns the headline rows in group order.
func (a *analysis) headline() []headRow {
	rows := slices.Clone(a.head)
	slices.SortStableFunc(rows, func(x, y headRow) int { return x.group - y.group })
	return rows
}

func (a *analysis) missing(format string, args ...any) {
	a.notMeasured = append(a.notMeasured, fmt.Sprintf(format, args...))
}

// ---- formatting ----

// Num formats a measured value with about four significant digits, as
// every table of the renderer does ("2.875", "12.50", "135.2", "1024").
func Num(v float64) string { return num(v) }

// num formats a measured value with about four significant digits.
func num(v float64) string {
	switch av := math.Abs(v); {
	case math.IsNaN(v):
		return "—"
	case av < 10:
		return fmt.Sprintf("%.3f", v)
	case av < 100:
		return fmt.Sprintf("%.2f", v)
	case av < 1000:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

// trimNum formats a goal's number without trailing zeros.
func trimNum(v float64) string {
	s := fmt.Sprintf("%.3f", v)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

func ratio(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "—"
	}
	return fmt.Sprintf("%.2f×", v)
}

func pct(v float64) string { return fmt.Sprintf("%+.1f%%", v) }

func mib(kib float64) string { return fmt.Sprintf("%.2f", kib/1024) }

// slower says how a over b reads: "2.87× slower", "1.50× faster".
func slower(a, b float64) string {
	if b <= 0 || a <= 0 {
		return "—"
	}
	if a >= b {
		return fmt.Sprintf("%.2f× slower", a/b)
	}
	return fmt.Sprintf("%.2f× faster", b/a)
}

func verdict(met bool) string {
	if met {
		return "**met**"
	}
	return "**not met**"
}

func statCells(s *stats.Summary) (p50, p95, p99 string) {
	if s == nil || s.N == 0 {
		return "—", "—", "—"
	}
	return num(s.P50), num(s.P95), num(s.P99)
}

func ptr(v *float64) float64 {
	if v == nil {
		return math.NaN()
	}
	return *v
}

// oneLine makes s fit a table cell or a bullet: one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// escapePipes escapes the pipes of a table cell (inside code spans too,
// as GitHub's tables need) that are not escaped already.
func escapePipes(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '|' && (i == 0 || s[i-1] != '\\') {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// code quotes s as inline code for markdown.
func code(s string) string {
	s = oneLine(s)
	if strings.Contains(s, "`") {
		return "`` " + s + " ``"
	}
	return "`" + s + "`"
}

// table is a markdown table.
type table struct {
	head  []string
	right []bool // right-aligned columns
	rows  [][]string
}

func newTable(cols ...string) *table {
	t := &table{}
	for _, c := range cols {
		// A leading '>' marks a right-aligned (numeric) column.
		r := strings.HasPrefix(c, ">")
		t.head = append(t.head, strings.TrimPrefix(c, ">"))
		t.right = append(t.right, r)
	}
	return t
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) String() string {
	if t == nil || len(t.rows) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("| " + strings.Join(t.head, " | ") + " |\n|")
	for _, r := range t.right {
		if r {
			b.WriteString("--:|")
		} else {
			b.WriteString("---|")
		}
	}
	b.WriteString("\n")
	for _, row := range t.rows {
		cells := make([]string, len(t.head))
		for i := range cells {
			if i < len(row) {
				cells[i] = escapePipes(oneLine(row[i]))
			}
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	return b.String()
}
