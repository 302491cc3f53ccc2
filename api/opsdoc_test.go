package api

import (
	"os"
	"regexp"
	"testing"
)

// TestOperationsTable: the operations table of docs/API.md lists every
// operation of Ops, with its method and path, in Ops's order, and nothing
// else.
func TestOperationsTable(t *testing.T) {
	b, err := os.ReadFile("../docs/API.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z]+\\.[a-z_]+)` \\| `([A-Z]+) ([^`]+)` \\|")
	sec := regexp.MustCompile(`(?s)\n## Operations\n(.*?)\n## `).FindSubmatch(b)
	if sec == nil {
		t.Fatal("docs/API.md has no ## Operations section")
	}
	var got []string
	for _, m := range row.FindAllStringSubmatch(string(sec[1]), -1) {
		got = append(got, m[1]+" "+m[2]+" "+m[3])
	}
	var want []string
	for _, o := range Ops {
		want = append(want, o.Name+" "+o.Method+" "+o.Path)
	}
	listed := map[string]bool{}
	for _, g := range got {
		listed[g] = true
	}
	for _, w := range want {
		if !listed[w] {
			t.Errorf("docs/API.md's operations table lacks %s", w)
		}
	}
	known := map[string]bool{}
	for _, w := range want {
		known[w] = true
	}
	for _, g := range got {
		if !known[g] {
			t.Errorf("docs/API.md's operations table lists %s, which is not in api.Ops", g)
		}
	}
	if !t.Failed() && len(got) == len(want) {
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("row %d is %s, want %s (the order of api.Ops)", i+1, got[i], want[i])
				break
			}
		}
	}
}
