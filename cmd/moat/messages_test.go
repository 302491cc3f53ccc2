package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testutil"
)

// TestROSymlinkReason: a symlink given to --ro is refused for being a
// symlink, not with a policy reason about where it points.
func TestROSymlinkReason(t *testing.T) {
	testutil.RequireRoot(t)
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink("/etc/hostname", link); err != nil {
		t.Fatal(err)
	}
	o := testutil.Exec(t, "run", "--ro", link+":/x", "--", "true")
	if o.Code != 125 || !strings.Contains(o.Stderr, "--ro "+link+" is a symlink; bind the path it points to") || strings.Contains(o.Stderr, "policy") {
		t.Fatalf("exit %d stderr %q", o.Code, o.Stderr)
	}
}

// TestImportErrorPrefix: a failed import names the import and its source
// once ("moat template: import SRC: reason").
func TestImportErrorPrefix(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.tar")
	if err := os.WriteFile(bad, []byte("not a tar archive\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := testutil.Exec(t, "template", "import", "--store", filepath.Join(dir, "store"), "--oci", bad, "bad")
	want := "moat template: import " + bad + ": "
	if o.Code != 125 || !strings.HasPrefix(o.Stderr, want) || strings.Count(o.Stderr, "import") != 1 {
		t.Fatalf("exit %d stderr %q, want one line starting %q", o.Code, o.Stderr, want)
	}
}

// TestLoopbackRefusalHint: the proxy's refusal of an internal address
// tells a moat run user the flag that admits it, not policy-file syntax.
func TestLoopbackRefusalHint(t *testing.T) {
	testutil.RequireRoot(t)
	o := testutil.Exec(t, "run", "--net", "proxy", "--allow-domain", "localhost", "--",
		"curl", "-sS", "-m", "10", "--noproxy", "", "-x", "http://127.0.0.1:3128", "http://localhost:9/")
	if !regexp.MustCompile(`--allow-domain (127\.0\.0\.1|::1) \(or a range holding it`).MatchString(o.Stderr) || strings.Contains(o.Stderr, "cidr:") {
		t.Fatalf("exit %d stdout %q stderr %q", o.Code, o.Stdout, o.Stderr)
	}
}

// TestNetworkEventsDocumented: the fields of the network events moat run
// --json prints are the ones docs/CLI.md lists for their kind, and a close
// event's duration_ms is an integer like every duration_ms.
func TestNetworkEventsDocumented(t *testing.T) {
	testutil.RequireRoot(t)
	doc, err := os.ReadFile("../../docs/CLI.md")
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile("(?m)^\\| `network` \\|.*$").Find(doc)
	if line == nil {
		t.Fatal("docs/CLI.md: no `network` row")
	}
	// "each with `time`, `kind`, …; `kind` `dns` with `answers`; `connect` with …"
	documented := map[string]map[string]bool{}
	field := regexp.MustCompile("`([a-z_]+)`")
	for _, m := range regexp.MustCompile("(?:each|`(dns|connect|close)`) with ((?:`[a-z_]+`(?:, | and )?)+)").FindAllSubmatch(line, -1) {
		kind := string(m[1])
		if kind == "" {
			kind = "*"
		}
		documented[kind] = map[string]bool{}
		for _, f := range field.FindAllSubmatch(m[2], -1) {
			documented[kind][string(f[1])] = true
		}
	}
	if documented["dns"] == nil || documented["connect"] == nil || documented["close"] == nil {
		t.Fatalf("docs/CLI.md's network row: parsed %v from %s", documented, line)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello from the host") })}
	go srv.Serve(ln)
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/"
	o := testutil.Exec(t, "run", "--json", "--net", "proxy", "--allow-domain", "127.0.0.1", "--allow-domain", "localhost", "--sh",
		"curl -sS -m 10 --noproxy '' -x http://127.0.0.1:3128 "+url+"; curl -sS -m 10 --noproxy '' -x http://127.0.0.1:3128 "+strings.Replace(url, "127.0.0.1", "localhost", 1)+
			"; curl -sS -m 10 --noproxy '' -x http://127.0.0.1:3128 http://no-such-host.invalid/")
	dec := json.NewDecoder(bytes.NewReader([]byte(o.Stdout)))
	dec.UseNumber()
	var res struct {
		Stdout  string `json:"stdout"`
		Network struct {
			Events []map[string]any `json:"events"`
		} `json:"network"`
	}
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("result: %v\n%s", err, o.Stdout)
	}
	if !strings.Contains(res.Stdout, "hello from the host") {
		t.Fatalf("stdout %q (stderr %q)", res.Stdout, o.Stderr)
	}
	kinds := map[string]bool{}
	for _, ev := range res.Network.Events {
		kind, _ := ev["kind"].(string)
		kinds[kind] = true
		if documented[kind] == nil {
			t.Errorf("event kind %q is not documented: %v", kind, ev)
			continue
		}
		for k := range ev {
			if !documented["*"][k] && !documented[kind][k] {
				t.Errorf("a %s event has %q, which docs/CLI.md does not list for it: %v", kind, k, ev)
			}
		}
		if kind == "close" {
			n, ok := ev["duration_ms"].(json.Number)
			if _, err := n.Int64(); ok && err != nil {
				t.Errorf("close event's duration_ms %v is not an integer", n)
			}
		}
	}
	if !kinds["connect"] || !kinds["close"] || !kinds["dns"] {
		t.Fatalf("events %v", res.Network.Events)
	}
}
