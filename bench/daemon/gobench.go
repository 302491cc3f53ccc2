package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/bench/internal/machine"
	"github.com/moat-sandbox/moat/bench/schema"
)

// recordWriters are the sub-benchmarks run (BenchmarkRecordCall also has
// writers=2).
var recordWriters = []int{1, 8, 32}

// benchName matches the start of a result line, "BenchmarkRecordCall/writers=8-2",
// and benchFigs its figures, "5202  202477 ns/op  4959 calls/s": the
// daemon's log lines (a slow write) may come between the two, since go
// test prints the name before the run and the figures after it.
var (
	benchName = regexp.MustCompile(`^BenchmarkRecordCall/writers=(\d+)(?:-\d+)?(?:\s|$)`)
	benchFigs = regexp.MustCompile(`(?:^|\s)\d+\s+([\d.]+) ns/op\s+([\d.]+) calls/s`)
)

type benchFig struct{ nsPerOp, callsPerS float64 }

// parseBench reads the RecordCall results of go test -bench output.
func parseBench(out string) map[int]benchFig {
	figs := map[int]benchFig{}
	cur := -1
	for l := range strings.SplitSeq(out, "\n") {
		l = strings.TrimSpace(l)
		if m := benchName.FindStringSubmatch(l); m != nil {
			cur, _ = strconv.Atoi(m[1])
		}
		m := benchFigs.FindStringSubmatch(l)
		if m == nil || cur < 0 {
			continue
		}
		ns, _ := strconv.ParseFloat(m[1], 64)
		cps, _ := strconv.ParseFloat(m[2], 64)
		figs[cur] = benchFig{ns, cps}
		cur = -1
	}
	return figs
}

// runRecordBench runs BenchmarkRecordCall of the checkout at root and of
// the old tree, alternating, twice each.
func runRecordBench(ctx context.Context, o *options, root string, old *oldTree, logf func(string, ...any)) *schema.RecordCall {
	ws := make([]string, len(recordWriters))
	for i, w := range recordWriters {
		ws[i] = strconv.Itoa(w)
	}
	args := []string{"test", "-run", "^$", "-bench", "RecordCall/writers=(" + strings.Join(ws, "|") + ")$", "-benchtime", o.benchtime, "./server/"}
	res := &schema.RecordCall{Command: machine.ShellQuote(append([]string{"go"}, args...)), Benchtime: o.benchtime, Rounds: 2}
	type tree struct {
		name, dir string
		figs      map[int][]benchFig
	}
	trees := []*tree{{name: "new", dir: root, figs: map[int][]benchFig{}}}
	if old != nil {
		dst := filepath.Join(old.src, "server", "zz_record_bench_test.go")
		if _, err := os.Stat(filepath.Join(old.src, "server", "record_bench_test.go")); err == nil {
			res.OldSource = "the old tree's own server/record_bench_test.go"
		} else if b, err := os.ReadFile(filepath.Join(root, "server", "record_bench_test.go")); err != nil {
			res.Errors = append(res.Errors, "reading server/record_bench_test.go: "+err.Error())
			old = nil
		} else if err := os.WriteFile(dst, b, 0o644); err != nil {
			res.Errors = append(res.Errors, err.Error())
			old = nil
		} else {
			res.OldSource = "this checkout's server/record_bench_test.go, copied into the old tree"
		}
		if old != nil {
			trees = append(trees, &tree{name: "old", dir: old.src, figs: map[int][]benchFig{}})
		}
	}
	for r := range res.Rounds {
		for _, t := range trees {
			if ctx.Err() != nil {
				return res
			}
			logf("go test -bench RecordCall, %s tree, round %d", t.name, r+1)
			cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
			cmd := exec.CommandContext(cctx, "go", args...)
			cmd.Dir = t.dir
			out, err := cmd.CombinedOutput()
			cancel()
			figs := parseBench(string(out))
			if err != nil || len(figs) == 0 {
				res.Errors = append(res.Errors, fmt.Sprintf("%s tree: go test: %v: %s", t.name, err, firstN(strings.TrimSpace(string(out)), 400)))
				continue
			}
			for w, f := range figs {
				t.figs[w] = append(t.figs[w], f)
			}
		}
	}
	mean := func(fs []benchFig) (cps, ns float64) {
		for _, f := range fs {
			cps += f.callsPerS
			ns += f.nsPerOp
		}
		return cps / float64(len(fs)), ns / float64(len(fs))
	}
	for _, w := range recordWriters {
		nf := trees[0].figs[w]
		if len(nf) == 0 {
			continue
		}
		row := schema.RecordRow{Writers: w}
		row.New, row.NewNsPerOp = mean(nf)
		for _, f := range nf {
			row.NewRounds = append(row.NewRounds, f.callsPerS)
		}
		if len(trees) > 1 {
			if of := trees[1].figs[w]; len(of) > 0 {
				cps, ns := mean(of)
				row.Old, row.OldNsPerOp = &cps, &ns
				for _, f := range of {
					row.OldRounds = append(row.OldRounds, f.callsPerS)
				}
				row.Ratio = div(row.New, cps)
			}
		}
		res.Writers = append(res.Writers, row)
	}
	slices.SortFunc(res.Writers, func(a, b schema.RecordRow) int { return a.Writers - b.Writers })
	for _, row := range res.Writers {
		logf("RecordCall writers=%d: new %.0f records/s, old %s, ratio %s", row.Writers, row.New, orDash(row.Old), ratioStr(row.Ratio))
	}
	return res
}
