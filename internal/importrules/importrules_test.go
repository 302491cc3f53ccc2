package importrules

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// module is the module's path; rule patterns without a dot in their first
// element are relative to it.
const module = "github.com/moat-sandbox/moat"

// goos are the systems the rules are checked for: the daemon's, and those
// of the SDK's users.
var goos = []string{"linux", "darwin", "windows"}

// engines are what the wire contract and the Go SDK must not compile: the
// daemon's packages and the libraries only they need (the shell parser,
// TOML, SQLite, OCI images, the kernel's sandboxing). Package fstree is
// not one: the SDK's host copies (client.Sandbox.CopyIn, CopyOut) are
// built on it, on Linux; its OCI import, which links the image
// libraries, is fstree/oci.
var engines = []string{
	"policy/...", "audit", "netproxy", "store", "runtime/...", "server",
	"templates", "guest", "fstree/oci", "config", "cmd/...",
	"mvdan.cc/sh/...", "github.com/pelletier/go-toml/...", "github.com/BurntSushi/toml/...",
	"modernc.org/sqlite/...", "github.com/google/go-containerregistry/...",
	"github.com/landlock-lsm/...", "github.com/opencontainers/...",
}

// A rule forbids the packages matching from to depend on the packages
// matching any of not (but those matching any of but), directly or
// through others.
type rule struct {
	from []string
	not  []string
	but  []string
	why  string
}

var rules = []rule{
	{
		from: []string{"server"},
		not:  []string{"runtime/linux/..."},
		why:  "the server drives sandboxes through the runtime's interface; cmd/moat picks the Linux runtime",
	},
	{
		from: []string{"api", "client"},
		not:  engines,
		why:  "the wire contract and the Go SDK are plain structs and HTTP: SDK users must not compile the engines (convert at the server boundary)",
	},
	{
		from: []string{"fstree"},
		not:  engines,
		why:  "the SDK's host copies link fstree: it stays free of the engines (the OCI import is fstree/oci)",
	},
	{
		from: []string{"runtime/..."},
		not:  []string{"server"},
		why:  "the runtime sits below the server, never above it",
	},
	{
		from: []string{"admit"},
		not:  []string{"server", "runtime/...", "cmd/..."},
		why:  "admission is shared by both front doors (cmd/moat and server) and hands the runtime a spec: it depends on neither",
	},
	{
		from: []string{"workflow/..."},
		not:  append([]string{"client"}, engines...),
		why:  "workflows are scheduled through the engine's Backend and Journal interfaces, which the server implements: the document and the scheduler link no runtime, store, policy or server",
	},
	{
		from: []string{"agent/model/..."},
		not:  append([]string{"agent", "api", "sandbox", "client", "admit", "workflow/...", "build", "metrics", "internal/..."}, engines...),
		why:  "the model client is a leaf: it links the model SDKs and nothing of moat (the runner, the server and the daemon's config use it, never the reverse)",
	},
	{
		from: []string{"agent"},
		not:  append([]string{"client", "admit", "workflow/...", "build", "metrics", "output", "internal/..."}, engines...),
		but:  []string{"internal/yamlnode"},
		why:  "the agent runner calls the daemon through its Backend and Journal interfaces, which the server implements: it links api, sandbox and agent/model of moat, never a runtime, the store, the policy or the server",
	},
	{
		from: []string{"build"},
		not:  append([]string{"admit", "client", "workflow/...", "metrics", "output", "display", "internal/..."}, engines...),
		why:  "package build (source check, settings, log) imports only api, sandbox and fstree of moat: the server drives it, and it stays testable alone",
	},
	{
		from: []string{"internal/yamlnode"},
		not:  []string{module + "/..."},
		why:  "the YAML node readers the agents and workflow documents share are a leaf: yaml.v3, go-units and the standard library only",
	},
}

// pkg is a package as go list -deps -json sees it.
type pkg struct {
	ImportPath string
	Standard   bool
	Imports    []string
	Deps       []string
	Module     *struct{ Path string }
	Error      *struct{ Err string }
}

// graph is every package the module's packages build with, by import path.
type graph map[string]*pkg

// load runs go list for the whole module (not its tests) on one system.
func load(t *testing.T, system string) graph {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-deps", "-json=ImportPath,Standard,Imports,Deps,Module,Error", "./...")
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "GOOS="+system, "GOARCH=amd64", "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("GOOS=%s go list: %v\n%s", system, err, stderr.Bytes())
	}
	g := graph{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		p := new(pkg)
		if err := dec.Decode(p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("GOOS=%s go list: %v", system, err)
		}
		g[p.ImportPath] = p
	}
	if g[module+"/api"] == nil || g[module+"/client"] == nil {
		t.Fatalf("GOOS=%s go list: no api or client package in its answer", system)
	}
	return g
}

// full makes a pattern absolute: "server" is the module's.
func full(pattern string) string {
	first, _, _ := strings.Cut(pattern, "/")
	if strings.Contains(first, ".") {
		return pattern
	}
	return module + "/" + pattern
}

// match says whether import path p matches pattern ("x/..." matches x and
// everything below it).
func match(pattern, p string) bool {
	pattern = full(pattern)
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return p == base || strings.HasPrefix(p, base+"/")
	}
	return p == pattern
}

func matchAny(patterns []string, p string) bool {
	return slices.ContainsFunc(patterns, func(pat string) bool { return match(pat, p) })
}

// chain is a shortest import chain from one package to another, for the
// failure message.
func (g graph) chain(from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == to {
			var out []string
			for p := to; p != ""; p = prev[p] {
				out = append(out, p)
			}
			slices.Reverse(out)
			return out
		}
		if g[cur] == nil {
			continue
		}
		for _, next := range g[cur].Imports {
			if _, seen := prev[next]; !seen {
				prev[next] = cur
				queue = append(queue, next)
			}
		}
	}
	return []string{from, "…", to}
}

// violations lists, one line each, the dependencies of g that break r.
// It fails when no package of the module matches r's from: a rule that
// names nothing checks nothing.
func (g graph) violations(r rule) ([]string, error) {
	var out []string
	matched := false
	for _, name := range slices.Sorted(maps.Keys(g)) {
		p := g[name]
		if p.Standard || p.Module == nil || p.Module.Path != module || !matchAny(r.from, name) {
			continue
		}
		matched = true
		// A package go list could not load hides its imports.
		for _, d := range append([]string{name}, p.Deps...) {
			if q := g[d]; q != nil && q.Error != nil {
				return nil, fmt.Errorf("%s: go list: %s", d, q.Error.Err)
			}
		}
		for _, d := range p.Deps {
			if matchAny(r.not, d) && !matchAny(r.but, d) {
				out = append(out, fmt.Sprintf("%s depends on %s (%s)", name, d, strings.Join(g.chain(name, d), " -> ")))
			}
		}
	}
	if !matched {
		return nil, fmt.Errorf("no package matches %v", r.from)
	}
	return out, nil
}

// TestImportRules checks the rules on every system of goos.
func TestImportRules(t *testing.T) {
	for _, system := range goos {
		t.Run(system, func(t *testing.T) {
			g := load(t, system)
			for _, r := range rules {
				bad, err := g.violations(r)
				if err != nil {
					t.Errorf("GOOS=%s: rule %v must not depend on %v: %v", system, r.from, r.not, err)
					continue
				}
				for _, b := range bad {
					t.Errorf("GOOS=%s: %s; not allowed: %s", system, b, r.why)
				}
			}
		})
	}
}

// TestRulesCatch checks the checker on a made-up graph, so that a rule
// cannot pass for want of matching anything.
func TestRulesCatch(t *testing.T) {
	m := func(p string) *pkg {
		return &pkg{ImportPath: module + "/" + p, Module: &struct{ Path string }{module}}
	}
	g := graph{}
	add := func(p *pkg, imports ...string) {
		for _, i := range imports {
			p.Imports = append(p.Imports, full(i))
		}
		g[p.ImportPath] = p
	}
	add(m("server"), "runtime")
	add(m("runtime"), "runtime/linux")
	add(m("runtime/linux"), "server")
	add(m("api"), "sandbox")
	add(m("admit"), "sandbox", "server")
	add(m("client"), "api", "mvdan.cc/sh/v3/syntax")
	add(m("fstree"), "fstree/oci")
	add(m("fstree/oci"), "github.com/google/go-containerregistry/pkg/v1")
	add(m("sandbox"))
	add(m("workflow/engine"), "workflow", "store")
	add(m("workflow"), "api")
	add(m("store"))
	add(m("build"), "api", "fstree", "store")
	add(m("agent/model"), "agent")
	add(m("agent"), "internal/yamlnode") // allowed: the agent rule's but
	add(m("internal/yamlnode"), "display")
	add(m("display"))
	add(&pkg{ImportPath: "mvdan.cc/sh/v3/syntax", Module: &struct{ Path string }{"mvdan.cc/sh/v3"}})
	add(&pkg{ImportPath: "github.com/google/go-containerregistry/pkg/v1", Module: &struct{ Path string }{"github.com/google/go-containerregistry"}})
	// Deps are transitive.
	for name := range g {
		seen := map[string]bool{}
		var walk func(string)
		walk = func(p string) {
			for _, i := range g[p].Imports {
				if !seen[i] {
					seen[i] = true
					walk(i)
				}
			}
		}
		walk(name)
		g[name].Deps = slices.Sorted(maps.Keys(seen))
	}
	var got []string
	for _, r := range rules {
		bad, err := g.violations(r)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, bad...)
	}
	want := []string{
		module + "/server depends on " + module + "/runtime/linux",
		module + "/client depends on mvdan.cc/sh/v3/syntax",
		module + "/fstree depends on " + module + "/fstree/oci",
		module + "/fstree depends on github.com/google/go-containerregistry/pkg/v1",
		module + "/runtime depends on " + module + "/server",
		module + "/runtime/linux depends on " + module + "/server",
		module + "/admit depends on " + module + "/server",
		module + "/admit depends on " + module + "/runtime",
		module + "/admit depends on " + module + "/runtime/linux",
		module + "/workflow/engine depends on " + module + "/store",
		module + "/build depends on " + module + "/store",
		module + "/build depends on " + module + "/fstree/oci",
		module + "/build depends on github.com/google/go-containerregistry/pkg/v1",
		module + "/agent/model depends on " + module + "/agent",
		module + "/agent/model depends on " + module + "/internal/yamlnode",
		module + "/internal/yamlnode depends on " + module + "/display",
	}
	for _, w := range want {
		if !slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, w+" (") }) {
			t.Errorf("no violation %q in %q", w, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("violations %q, want %d", got, len(want))
	}
	if c := strings.Join(g.chain(module+"/server", module+"/runtime/linux"), " -> "); c != module+"/server -> "+module+"/runtime -> "+module+"/runtime/linux" {
		t.Errorf("chain %s", c)
	}
}

var update = flag.Bool("update", false, "rewrite client/DEPS.txt")

// depsFile is the list of the packages the Go SDK links, outside the
// standard library, checked in like Tailscale's depaware.txt: a change
// to it shows in review.
const depsFile = "client/DEPS.txt"

const depsHeader = `# The packages github.com/moat-sandbox/moat/client (the Go SDK) links,
# outside the standard library: what every user of the SDK compiles.
# A package that only some systems link is followed by their GOOS.
# Checked by internal/importrules (TestClientDeps); after a change that
# is meant, regenerate it from the module root with
#   go test ./internal/importrules -run TestClientDeps -update
`

// clientDeps renders depsFile.
func clientDeps(t *testing.T) []byte {
	t.Helper()
	on := map[string][]string{} // package -> systems
	for _, system := range goos {
		g := load(t, system)
		c := g[module+"/client"]
		for _, d := range append([]string{c.ImportPath}, c.Deps...) {
			if p := g[d]; p != nil && !p.Standard {
				on[d] = append(on[d], system)
			}
		}
	}
	var buf bytes.Buffer
	buf.WriteString(depsHeader)
	for _, p := range slices.Sorted(maps.Keys(on)) {
		buf.WriteString(p)
		if len(on[p]) != len(goos) {
			buf.WriteString(" (" + strings.Join(on[p], ", ") + ")")
		}
		buf.WriteByte('\n')
	}
	return buf.Bytes()
}

func TestClientDeps(t *testing.T) {
	got := clientDeps(t)
	path := filepath.Join("..", "..", filepath.FromSlash(depsFile))
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v; create it from the module root with `go test ./internal/importrules -run TestClientDeps -update`", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not current: the SDK now links\n%s\nIf that is meant, regenerate it from the module root with `go test ./internal/importrules -run TestClientDeps -update` and review the diff.", depsFile, got)
	}
}
