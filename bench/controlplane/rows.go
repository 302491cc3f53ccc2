package main

import (
	"github.com/moat-sandbox/moat/bench/internal/stats"
	"github.com/moat-sandbox/moat/bench/schema"
)

// row is a time-to-interactive or exec row being measured: its results
// and what measuring it needs.
type row struct {
	schema.ControlplaneRow
	argv             []string // a one-shot row's command
	createMs, execMs []float64
}

func newRow(name, mode, kind, about string) *row {
	return &row{ControlplaneRow: schema.ControlplaneRow{Name: name, Mode: mode, Kind: kind, About: about}}
}

// maxErrors is how many failures a row or phase keeps verbatim.
const maxErrors = 5

func (r *row) fail(phase string, err error) {
	r.Failed++
	if len(r.Errors) < maxErrors {
		r.Errors = append(r.Errors, phase+": "+err.Error())
	}
}

// setStats computes the row's statistics from its samples.
func (r *row) setStats() {
	r.Stats = stats.Of(r.SamplesMs)
	r.Create = stats.Of(r.createMs)
	r.FirstExec = stats.Of(r.execMs)
	r.N = 0
	if r.Stats != nil {
		r.N = r.Stats.N
	}
}

func ratio(num, den *stats.Summary) *float64 {
	if num == nil || den == nil || den.P50 <= 0 {
		return nil
	}
	r := num.P50 / den.P50
	return &r
}
