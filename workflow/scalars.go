package workflow

import (
	"math"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/internal/yamlnode"
	"go.yaml.in/yaml/v3"
)

// maxSeconds is the largest duration, in seconds, that fits a
// time.Duration.
const maxSeconds = float64(math.MaxInt64 / int64(time.Second))

// reader reads typed values out of YAML nodes, recording what is wrong in
// errs (the readers shared with package agent, and the workflow
// document's own). Aliases and merge keys are refused with a pointer to
// defaults, the document's own way of sharing settings.
type reader struct {
	yamlnode.Reader
	errs *errList
}

// newReader returns a reader recording into errs.
func newReader(errs *errList) *reader {
	return &reader{Reader: yamlnode.Reader{Report: errs.add, Hint: "use defaults"}, errs: errs}
}

// count reads a whole number of 0 or more that fits an int.
func (r *reader) count(n *yaml.Node, field string) (int, bool) {
	v, ok := r.IntegerIn(n, field, 0, math.MaxInt32)
	return int(v), ok
}

// duration reads a Go duration string ("30s", "2m") or a number of
// seconds, of 0 or more.
func (r *reader) duration(n *yaml.Node, field string) (time.Duration, bool) {
	if !r.Plain(n, field) {
		return 0, false
	}
	const want = "want a duration (30s, 2m) or a number of seconds"
	if n.Kind != yaml.ScalarNode {
		r.Fail(n, field, want)
		return 0, false
	}
	var d time.Duration
	switch n.ShortTag() {
	case "!!str":
		v, err := time.ParseDuration(strings.TrimSpace(n.Value))
		if err != nil {
			r.Fail(n, field, "%q is not a duration (30s, 2m) or a number of seconds", n.Value)
			return 0, false
		}
		d = v
	case "!!int", "!!float":
		var s float64
		if n.Decode(&s) != nil || math.IsNaN(s) || math.IsInf(s, 0) {
			r.Fail(n, field, want)
			return 0, false
		}
		if s > maxSeconds || s < -maxSeconds {
			r.Fail(n, field, "too large")
			return 0, false
		}
		d = time.Duration(s * float64(time.Second))
	default:
		r.Fail(n, field, want)
		return 0, false
	}
	if d < 0 {
		r.Fail(n, field, "must not be negative")
		return 0, false
	}
	return d, true
}
