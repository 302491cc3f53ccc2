package workflow

import (
	"bytes"
	"encoding/json"

	"github.com/moat-sandbox/moat/internal/yamlnode"
	"go.yaml.in/yaml/v3"
)

// parseYAML reads data, one YAML (or JSON) document, into its root
// node. A syntax error is recorded in errs (on the document's own line
// numbering) and nil returned.
func parseYAML(data []byte, errs *errList) *yaml.Node {
	return yamlnode.Parse(unescapeSolidus(data), errs.add, yamlnode.DocumentLine)
}

// unescapeSolidus rewrites the JSON escape \/ (which YAML's double-quoted
// strings lack) to a plain '/' when data is JSON; lines do not move.
func unescapeSolidus(data []byte) []byte {
	if !bytes.Contains(data, []byte(`\/`)) || !json.Valid(data) {
		return data
	}
	out := make([]byte, 0, len(data))
	in := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch {
		case !in:
			in = c == '"'
		case c == '"':
			in = false
		case c == '\\' && i+1 < len(data):
			i++
			if data[i] == '/' {
				c = '/'
			} else {
				out = append(out, c)
				c = data[i]
			}
		}
		out = append(out, c)
	}
	return out
}
