package main

import (
	"fmt"

	"github.com/moat-sandbox/moat/bench/schema"
)

// finish sets whether the run failed: a flood not accounted for or with a
// failed call, a failed exec or auth request, a failed go test, a daemon
// that did not exit 0, or an error. The goals and their verdicts are
// bench/render's.
func finish(rep *schema.Daemon) {
	for _, f := range rep.Flood {
		rep.Failed = rep.Failed || !f.Accounted || f.Failed > 0
	}
	if t := rep.Throughput; t != nil {
		for _, l := range t.Levels {
			for _, s := range []*schema.TPSide{l.New, l.Old} {
				if s != nil && s.Errors > 0 {
					rep.Failed = true
				}
			}
		}
	}
	if a := rep.Auth; a != nil {
		for _, s := range []*schema.AuthSide{a.New, a.Old} {
			if s != nil && s.Other > 0 {
				rep.Failed = true
			}
		}
	}
	if r := rep.Record; r != nil && len(r.Errors) > 0 {
		rep.Failed = true
	}
	for _, d := range rep.Daemons {
		if !d.ExitedOK {
			rep.Failed = true
		}
	}
	rep.Failed = rep.Failed || len(rep.Errors) > 0
}

func sizeStr(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprint(n)
}

func ratioStr(v *float64) string {
	if v == nil {
		return "—"
	}
	return fmt.Sprintf("%.2f×", *v)
}

func orDash(v *float64) string {
	if v == nil {
		return "—"
	}
	return fmt.Sprintf("%.0f", *v)
}
