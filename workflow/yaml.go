package workflow

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// yamlLine finds the line in a yaml.v3 syntax error ("yaml: line 3: ...").
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parseYAML reads data, one YAML (or JSON) document, into its root
// node. A syntax error is recorded in errs and nil returned.
func parseYAML(data []byte, errs *errList) *yaml.Node {
	data = unescapeSolidus(data)
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			errs.add(0, 0, "", "empty document")
			return nil
		}
		syntaxError(err, errs, data)
		return nil
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		errs.add(next.Line, next.Column, "", "more than one document (a second one starts here)")
		return nil
	case !errors.Is(err, io.EOF):
		syntaxError(err, errs, data)
		return nil
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		errs.add(0, 0, "", "empty document")
		return nil
	}
	return doc.Content[0]
}

// syntaxError records a yaml.v3 error in data at the line it names.
// yaml.v3 numbers the lines of its parser's errors (not its scanner's)
// from 0, and leaves out line 0: those are moved to the document's
// numbering; an error at the end is put on the last line.
func syntaxError(err error, errs *errList, data []byte) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	for _, p := range parserProblems {
		if strings.HasPrefix(msg, p) {
			line++
			break
		}
	}
	last := bytes.Count(data, []byte("\n"))
	if len(data) > 0 && data[len(data)-1] != '\n' {
		last++
	}
	errs.add(min(line, max(last, 1)), 0, "", "%s", msg)
}

// parserProblems start the messages of yaml.v3's parser errors.
var parserProblems = []string{
	"did not find expected",
	"found undefined tag handle",
	"found duplicate %",
	"found incompatible YAML document",
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
