// Package yamlnode reads moat's YAML (or JSON) documents, the agents
// document and the workflow document, node by node: it parses one
// document with line-numbered syntax errors, and its Reader reads typed
// values (strings, numbers, sizes, mappings, lists) out of yaml.v3 nodes,
// reporting every problem with its line, column and field through a
// callback, so that each document keeps its own error type and goes on
// after the first problem.
//
// It imports only yaml.v3, go-units and the standard library (tier 0 of
// docs/ARCHITECTURE.md; checked by internal/importrules).
package yamlnode

// Report records a problem at line and column (1-based; 0 when unknown)
// of the document, in the field named (dotted, "" for the document);
// format and args are as for fmt.Sprintf.
type Report func(line, col int, field, format string, args ...any)
