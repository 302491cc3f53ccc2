package agent

import (
	"strings"
	"time"

	"github.com/moat-sandbox/moat/internal/yamlnode"
	"go.yaml.in/yaml/v3"
)

// maxDocument bounds the size of an agents document.
const maxDocument = 1 << 20

// parseYAML reads data, one YAML (or JSON) document, into its root node.
// A syntax error is recorded in errs (at the line yaml.v3 names) and nil
// returned.
func parseYAML(data []byte, errs *errList) *yaml.Node {
	if len(data) > maxDocument {
		errs.add(0, 0, "", "the document is %d bytes: at most %d", len(data), maxDocument)
		return nil
	}
	return yamlnode.Parse(data, errs.add, yamlnode.NamedLine)
}

// reader reads typed values out of YAML nodes, recording what is wrong in
// errs (the readers shared with package workflow, and the agents
// document's own).
type reader struct {
	yamlnode.Reader
	errs *errList
}

// newReader returns a reader recording into errs.
func newReader(errs *errList) *reader {
	return &reader{Reader: yamlnode.Reader{Report: errs.add}, errs: errs}
}

// duration reads a Go duration ("30s", "2m") or a whole number of
// seconds, between lo and hi.
func (r *reader) duration(n *yaml.Node, field string, lo, hi time.Duration) (time.Duration, bool) {
	if !r.Plain(n, field) {
		return 0, false
	}
	const want = "want a duration (30s, 2m) or a whole number of seconds"
	if n.Kind != yaml.ScalarNode {
		r.Fail(n, field, want)
		return 0, false
	}
	var d time.Duration
	switch n.ShortTag() {
	case "!!str":
		v, err := time.ParseDuration(strings.TrimSpace(n.Value))
		if err != nil {
			r.Fail(n, field, "%q is not a duration (30s, 2m)", n.Value)
			return 0, false
		}
		d = v
	case "!!int":
		var s int64
		if n.Decode(&s) != nil || s > int64(hi/time.Second)+1 || s < 0 {
			r.Fail(n, field, "must be between %s and %s", lo, hi)
			return 0, false
		}
		d = time.Duration(s) * time.Second
	default:
		r.Fail(n, field, want)
		return 0, false
	}
	if d < lo || d > hi {
		r.Fail(n, field, "must be between %s and %s", lo, hi)
		return 0, false
	}
	return d, true
}
