//go:build linux

package build

import (
	"archive/zip"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/api"
)

// Real compilers, offline, reproducibly: each source is built twice (and
// the C one a third time from a tar.gz packed with other owners, times
// and order), and every build gives the same source digest and the same
// artifact digests; each artifact works on the host.

const helloC = `#include <stdio.h>
int main(void) { printf("hello from a sandboxed C build\n"); return 0; }
`

// TestBuildC: gcc; the artifact runs on the host. The second build is
// moat build without --json: the log streams to stderr, the summary
// names the same digests.
func TestBuildC(t *testing.T) {
	b := privateBuilder(t, "")
	dir := writeTree(t, map[string]string{"hello.c": helloC})
	script := "echo compiling >&2; gcc -O2 -Wall -o hello hello.c"

	first := b.sh(t, []string{"--output", "hello"}, dir, script)
	first.want(t, "gcc", api.BuildSucceeded, "", 0)
	a := artifact(t, first.build, "hello")
	bin := filepath.Join(first.out, "hello")
	if got := fileSHA256(t, bin); got != a.SHA256 {
		t.Fatalf("the file under --out has sha256 %s, the record %s", got, a.SHA256)
	}
	out, err := exec.Command(bin).CombinedOutput()
	if err != nil || string(out) != "hello from a sandboxed C build\n" {
		t.Fatalf("the artifact on the host: %q, %v", out, err)
	}
	if !strings.HasPrefix(first.build.SourceDigest, "sha256:") || first.build.Toolchain.Template == "" {
		t.Errorf("record: source %q, toolchain %+v", first.build.SourceDigest, first.build.Toolchain)
	}
	// A private daemon's build is deleted once its artifacts are out.
	if k := kept(t, b.data, first.build.ID); len(k) != 0 {
		t.Errorf("the private daemon kept build %s: %v", first.build.ID, k)
	}

	// Again, as a person runs it: the log on stderr, the summary on stdout.
	outDir := filepath.Join(t.TempDir(), "out")
	r := b.run(t, "build", "--local", "--out", outDir, "--output", "hello", dir, "--", "/bin/sh", "-c", script)
	if r.code != 0 || !strings.Contains(r.stderr, "compiling\n") {
		t.Fatalf("moat build: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{
		"status     succeeded\n",
		"source     " + first.build.SourceDigest,
		"  " + a.SHA256 + "  ",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the summary lacks %q:\n%s", want, r.stdout)
		}
	}
	if got := fileSHA256(t, filepath.Join(outDir, "hello")); got != a.SHA256 {
		t.Errorf("second build: artifact sha256 %s, first %s: not reproducible", got, a.SHA256)
	}

	// From a tar.gz of the same tree, packed differently.
	third := b.sh(t, []string{"--output", "hello"}, tarOfDir(t, dir), script)
	third.want(t, "gcc from a tar.gz", api.BuildSucceeded, "", 0)
	if third.build.SourceDigest != first.build.SourceDigest {
		t.Errorf("source digest from the tar.gz %s, from the directory %s", third.build.SourceDigest, first.build.SourceDigest)
	}
	if got := artifact(t, third.build, "hello").SHA256; got != a.SHA256 {
		t.Errorf("artifact from the tar.gz %s, from the directory %s: not reproducible", got, a.SHA256)
	}
}

// TestBuildGo: a Go module with a local dependency (replace), built
// offline with the host's toolchain, the module and build caches inside
// the build (HOME and XDG_CACHE_HOME are /build's).
func TestBuildGo(t *testing.T) {
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Skipf("no Go toolchain on the host: %v", err)
	}
	b := privateBuilder(t, "")
	dir := writeTree(t, map[string]string{
		"go.mod": "module example.com/app\n\ngo 1.22\n\nrequire example.com/greet v0.0.0\n\nreplace example.com/greet => ./greet\n",
		// No import of the standard library but the runtime's: a cold
		// build compiles the fewest packages.
		"main.go":        "package main\n\nimport \"example.com/greet\"\n\nfunc main() { println(greet.Hello()) }\n",
		"greet/go.mod":   "module example.com/greet\n\ngo 1.22\n",
		"greet/greet.go": "package greet\n\n// Hello greets.\nfunc Hello() string { return \"hello from a sandboxed Go build\" }\n",
	})
	flags := []string{"--output", "app", "--memory", "1g", "--disk", "1g",
		"--env", "PATH=" + filepath.Join(strings.TrimSpace(string(goroot)), "bin") + ":/usr/bin:/bin",
		"--env", "GOFLAGS=-trimpath -buildvcs=false", "--env", "GOTOOLCHAIN=local", "--env", "GOPROXY=off", "--env", "CGO_ENABLED=0"}
	argv := []string{"go", "build", "-ldflags=-s -w", "-o", "app", "."}
	first := b.build(t, flags, dir, argv...)
	first.want(t, "go build", api.BuildSucceeded, "", 0)
	a := artifact(t, first.build, "app")
	out, err := exec.Command(filepath.Join(first.out, "app")).CombinedOutput()
	if err != nil || string(out) != "hello from a sandboxed Go build\n" {
		t.Fatalf("the artifact on the host: %q, %v", out, err)
	}
	second := b.build(t, flags, dir, argv...)
	second.want(t, "go build again", api.BuildSucceeded, "", 0)
	if second.build.SourceDigest != first.build.SourceDigest || artifact(t, second.build, "app").SHA256 != a.SHA256 {
		t.Errorf("not reproducible: source %s then %s, app %s then %s", first.build.SourceDigest, second.build.SourceDigest,
			a.SHA256, artifact(t, second.build, "app").SHA256)
	}
}

// TestBuildPythonWheel: a wheel with pip and setuptools, offline (no
// index, no build isolation); SOURCE_DATE_EPOCH fixes the zip's times.
func TestBuildPythonWheel(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import setuptools, wheel, pip").Run(); err != nil {
		t.Skipf("the host's python3 lacks pip, setuptools or wheel (make test-deps): %v", err)
	}
	b := privateBuilder(t, "")
	dir := writeTree(t, map[string]string{
		"pyproject.toml": "[build-system]\nrequires = [\"setuptools\"]\nbuild-backend = \"setuptools.build_meta\"\n\n[project]\nname = \"moatdemo\"\nversion = \"1.0\"\n",
		"moatdemo.py":    "def hello():\n    return \"hello from a sandboxed wheel\"\n",
	})
	argv := []string{"python3", "-m", "pip", "wheel", "--disable-pip-version-check", "--no-deps", "--no-build-isolation", "--no-index", "-w", "dist", "."}
	first := b.build(t, []string{"--output", "dist"}, dir, argv...)
	first.want(t, "pip wheel", api.BuildSucceeded, "", 0)
	if len(first.build.Artifacts) != 1 || !regexp.MustCompile(`^dist/moatdemo-1\.0-py3-none-any\.whl$`).MatchString(first.build.Artifacts[0].Path) {
		t.Fatalf("artifacts %+v, want the wheel", first.build.Artifacts)
	}
	a := first.build.Artifacts[0]
	whl := filepath.Join(first.out, a.Path)
	zr, err := zip.OpenReader(whl)
	if err != nil {
		t.Fatalf("the wheel on the host: %v", err)
	}
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
	}
	zr.Close()
	if !strings.Contains(strings.Join(names, " "), "moatdemo.py") {
		t.Errorf("the wheel holds %v", names)
	}
	out, err := exec.Command("/usr/bin/python3", "-c", "import sys; sys.path.insert(0, sys.argv[1]); import moatdemo; print(moatdemo.hello())", whl).CombinedOutput()
	if err != nil || string(out) != "hello from a sandboxed wheel\n" {
		t.Errorf("importing from the wheel on the host: %q, %v", out, err)
	}
	second := b.build(t, []string{"--output", "dist"}, dir, argv...)
	second.want(t, "pip wheel again", api.BuildSucceeded, "", 0)
	if len(second.build.Artifacts) != 1 || second.build.Artifacts[0].SHA256 != a.SHA256 {
		t.Errorf("not reproducible: %+v then %+v", a, second.build.Artifacts)
	}
}
