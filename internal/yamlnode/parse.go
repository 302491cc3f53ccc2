package yamlnode

import (
	"bytes"
	"errors"
	"io"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Placer turns a yaml.v3 syntax error in data into the line to report
// and the message without its "yaml: " prefix: NamedLine or
// DocumentLine.
type Placer func(err error, data []byte) (line int, msg string)

// Parse reads data, one YAML (or JSON) document, into its root node. An
// empty document, a second document or a syntax error (placed by place)
// is reported and nil returned.
func Parse(data []byte, report Report, place Placer) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			report(0, 0, "", "empty document")
			return nil
		}
		line, msg := place(err, data)
		report(line, 0, "", "%s", msg)
		return nil
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		report(next.Line, next.Column, "", "more than one document (a second one starts here)")
		return nil
	case !errors.Is(err, io.EOF):
		line, msg := place(err, data)
		report(line, 0, "", "%s", msg)
		return nil
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		report(0, 0, "", "empty document")
		return nil
	}
	return doc.Content[0]
}

// yamlLine finds the line in a yaml.v3 syntax error ("yaml: line 3: ...").
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// named returns the line a yaml.v3 error names (0 when none) and its
// message without the "yaml: " prefix and the line.
func named(err error) (int, string) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	return line, msg
}

// NamedLine places a syntax error at the line yaml.v3 names, line 1 when
// it names none (or line 0).
func NamedLine(err error, _ []byte) (int, string) {
	line, msg := named(err)
	return max(line, 1), msg
}

// DocumentLine places a syntax error on the document's own line
// numbering. yaml.v3 numbers the lines of its parser's errors (not its
// scanner's) from 0, and leaves out line 0: those are moved to the
// document's numbering; an error at the end is put on the last line. An
// error naming no line stays at line 0 (the whole document).
func DocumentLine(err error, data []byte) (int, string) {
	line, msg := named(err)
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
	return min(line, max(last, 1)), msg
}

// parserProblems start the messages of yaml.v3's parser errors.
var parserProblems = []string{
	"did not find expected",
	"found undefined tag handle",
	"found duplicate %",
	"found incompatible YAML document",
}
