package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/templates"
)

// imagePackages are the Debian packages whose files (and those of their
// dependencies) make the image-like template of TestImageTemplateWritableRoot.
var imagePackages = []string{"python3", "python3-pip", "nodejs", "dash", "coreutils", "grep"}

// imageSkip are host paths left out of that template: documentation, and
// Debian's EXTERNALLY-MANAGED marker, which python images do not have.
var imageSkip = []string{"/usr/share/doc/", "/usr/share/man/", "/usr/share/info/", "/usr/share/locale/",
	"/usr/include/", "/usr/share/lintian/", "EXTERNALLY-MANAGED"}

// debClosure returns the installed packages pkgs depend on (Depends and
// Pre-Depends, first alternatives, virtual packages through Provides),
// pkgs included, from dpkg's database: nothing is downloaded.
func debClosure(t *testing.T, pkgs []string) []string {
	t.Helper()
	out, err := exec.Command("dpkg-query", "-W", "-f", "${Package}\t${db:Status-Status}\t${Provides}\t${Pre-Depends}, ${Depends}\n").Output()
	if err != nil {
		testutil.SkipOrFail(t, "needs dpkg-query (a Debian host): "+err.Error())
	}
	deps, provider := map[string][]string{}, map[string]string{}
	name := func(s string) string {
		s = strings.TrimSpace(strings.Split(s, "|")[0])
		s, _, _ = strings.Cut(s, " ")
		s, _, _ = strings.Cut(s, ":")
		return strings.TrimSpace(s)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 4 || f[1] != "installed" {
			continue
		}
		for _, d := range strings.Split(f[3], ",") {
			if n := name(d); n != "" {
				deps[f[0]] = append(deps[f[0]], n)
			}
		}
		for _, p := range strings.Split(f[2], ",") {
			if n := name(p); n != "" {
				provider[n] = f[0]
			}
		}
	}
	seen := map[string]bool{}
	var order []string
	queue := append([]string(nil), pkgs...)
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if _, ok := deps[p]; !ok {
			if prov, ok := provider[p]; ok {
				p = prov
			} else if !seen[p] && slices.Contains(pkgs, p) {
				testutil.SkipOrFail(t, "needs the Debian package "+p+" installed (make test-deps)")
			}
		}
		if seen[p] {
			continue
		}
		seen[p] = true
		if _, ok := deps[p]; ok {
			order = append(order, p)
			queue = append(queue, deps[p]...)
		}
	}
	return order
}

// imageRoot builds, offline, an image-like root filesystem from the host's
// Debian packages: python3 with pip, node with npm, dash, coreutils and grep, a
// merged /usr, an /etc/passwd that knows only root, /root, /tmp, an empty
// /usr/local as base images have, and /app (the image's WORKDIR) holding a
// file. Everything is owned by root, as in an image that names no user.
func imageRoot(t *testing.T) string {
	t.Helper()
	pkgs := debClosure(t, imagePackages)
	out, err := exec.Command("dpkg", append([]string{"-L"}, pkgs...)...).Output()
	if err != nil {
		t.Fatalf("dpkg -L: %v", err)
	}
	root := filepath.Join(t.TempDir(), "image")
	// Merged /usr, as the host (and current Debian images) have it.
	for _, d := range []string{"usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "usr/local/bin", "usr/local/lib", "usr/local/share",
		"etc", "root", "tmp", "app", "var/tmp", "home"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range [][2]string{{"usr/bin", "bin"}, {"usr/sbin", "sbin"}, {"usr/lib", "lib"}, {"usr/lib64", "lib64"}} {
		if err := os.Symlink(l[0], filepath.Join(root, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(filepath.Join(root, "root"), 0o700))
	must(os.Chmod(filepath.Join(root, "tmp"), 0o1777))
	must(os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644))
	must(os.WriteFile(filepath.Join(root, "etc/group"), []byte("root:x:0:\n"), 0o644))
	must(os.WriteFile(filepath.Join(root, "app/README"), []byte("the image's app\n"), 0o644))
	// npm's own tree, whole: the host's may have been updated by npm
	// itself since dpkg installed it.
	list := strings.Split(string(out), "\n")
	filepath.WalkDir("/usr/lib/node_modules/npm", func(p string, _ os.DirEntry, err error) error {
		if err == nil {
			list = append(list, p)
		}
		return nil
	})
	n := 0
paths:
	for _, p := range list {
		if !strings.HasPrefix(p, "/") || p == "/." {
			continue
		}
		for _, s := range imageSkip {
			if strings.Contains(p, s) {
				continue paths
			}
		}
		fi, err := os.Lstat(p)
		if err != nil {
			continue // a conffile removed, a diverted path
		}
		dst := filepath.Join(root, p)
		switch {
		case fi.IsDir():
			must(os.MkdirAll(dst, 0o755))
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			must(err)
			must(os.MkdirAll(filepath.Dir(dst), 0o755))
			if err := os.Symlink(target, dst); err != nil && !os.IsExist(err) {
				t.Fatal(err)
			}
		case fi.Mode().IsRegular():
			must(os.MkdirAll(filepath.Dir(dst), 0o755))
			b, err := os.ReadFile(p)
			must(err)
			if err := os.WriteFile(dst, b, fi.Mode().Perm()); err != nil && !os.IsExist(err) {
				t.Fatal(err)
			}
			n++
		}
	}
	for _, need := range []string{"usr/bin/python3", "usr/bin/node", "usr/bin/npm", "usr/bin/sh", "usr/lib/python3/dist-packages/pip"} {
		if _, err := os.Stat(filepath.Join(root, need)); err != nil {
			testutil.SkipOrFail(t, "the host lacks "+need+" (make test-deps installs python3-pip and npm)")
		}
	}
	t.Logf("image root: %d files of %d packages", n, len(pkgs))
	return root
}

// probeWheel writes a pure-Python wheel (a zip with the module, METADATA,
// WHEEL, entry_points.txt and RECORD) into dir and returns its name.
func probeWheel(t *testing.T, dir string) string {
	t.Helper()
	const name = "moatprobe-0.1-py3-none-any.whl"
	files := [][2]string{
		{"moatprobe/__init__.py", "VALUE = 42\n\ndef main():\n    print('moatprobe', VALUE)\n"},
		{"moatprobe-0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: moatprobe\nVersion: 0.1\n"},
		{"moatprobe-0.1.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: moat-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
		{"moatprobe-0.1.dist-info/entry_points.txt", "[console_scripts]\nmoatprobe = moatprobe:main\n"},
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		w, err := zw.Create(f[0])
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, f[1])
		sum := sha256.Sum256([]byte(f[1]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f[0], base64.RawURLEncoding.EncodeToString(sum[:]), len(f[1]))
	}
	record.WriteString("moatprobe-0.1.dist-info/RECORD,,\n")
	w, err := zw.Create("moatprobe-0.1.dist-info/RECORD")
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(w, record.String())
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return name
}

// probeNpmTarball writes an npm package tarball (what `npm pack` makes: a
// gzipped tar of package/…) with one bin into dir and returns its name.
func probeNpmTarball(t *testing.T, dir string) string {
	t.Helper()
	const name = "moat-npm-probe-1.0.0.tgz"
	files := []struct {
		name, body string
		mode       int64
	}{
		{"package/package.json", `{"name":"moat-npm-probe","version":"1.0.0","bin":{"moat-npm-probe":"cli.js"}}` + "\n", 0o644},
		{"package/cli.js", "#!/usr/bin/env node\nconsole.log('moat-npm-probe', 7 * 6);\n", 0o755},
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.body)), ModTime: time.Unix(499162500, 0), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, f.body)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return name
}

// Paths the probes install (Debian's python installs outside a venv into
// /usr/local; the template sets npm's prefix to /usr/local, as node images
// do).
var probeInstalled = []string{
	"usr/local/lib/python3.11/dist-packages/moatprobe/__init__.py",
	"usr/local/bin/moatprobe",
	"usr/local/lib/node_modules/moat-npm-probe/package.json",
	"usr/local/bin/moat-npm-probe",
	"app/written",
}

// TestImageTemplateWritableRoot (issue 18): in a sandbox of an image-like
// template (a root with python3, pip, node and npm built offline from the
// host's Debian packages, WORKDIR /app, no user named: root), the command
// — still uid 1000 with no capability and no_new_privs — installs a
// local wheel with pip into /usr/local, a local tarball with npm -g, and
// writes in /app; everything it wrote is visible inside, stays out of the
// template's layer and the host, and is gone with the sandbox. /dev, /proc
// and a read-only bind stay unwritable.
func TestImageTemplateWritableRoot(t *testing.T) {
	testutil.RequireRoot(t)
	store := t.TempDir()
	img := imageRoot(t)
	o := testutil.Exec(t, "template", "import", "--store", store, "--workdir", "/app",
		"-e", "NPM_CONFIG_PREFIX=/usr/local", "--json", "img", img)
	if o.Code != 0 {
		t.Fatalf("template import: exit %d\n%s%s", o.Code, o.Stdout, o.Stderr)
	}
	var tmpl templates.Template
	if err := json.Unmarshal([]byte(o.Stdout), &tmpl); err != nil {
		t.Fatalf("template import --json: %v\n%s", err, o.Stdout)
	}
	layerDir := filepath.Join(store, "layers", strings.TrimPrefix(tmpl.Layer, "sha256:"))
	if _, err := os.Lstat(filepath.Join(layerDir, "usr/bin/python3")); err != nil {
		t.Fatalf("template layer %q not found in the store: %v", tmpl.Layer, err)
	}

	ws := t.TempDir()
	wheel, tgz := probeWheel(t, ws), probeNpmTarball(t, ws)
	ro := t.TempDir()
	script := strings.Join([]string{
		"set -e",
		"pwd",
		"id -u",
		"grep -E '^(CapEff|CapPrm|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status",
		"python3 -m pip install --no-index --no-cache-dir --disable-pip-version-check /workspace/" + wheel,
		"python3 -c 'import moatprobe; print(\"imported\", moatprobe.VALUE)'",
		"moatprobe",
		"npm install -g --offline --no-audit --no-fund /workspace/" + tgz,
		"moat-npm-probe",
		"echo hello > /app/written && cat /app/written",
		"for p in " + strings.Join(probeInstalled, " ") + "; do test -e /$p && echo present /$p; done",
		"touch /dev/moat-probe 2>/dev/null && echo WROTE-DEV || echo dev refused",
		"touch /ref/moat-probe 2>/dev/null && echo WROTE-RO || echo ro refused",
		"mkdir /moat-top 2>/dev/null && echo MADE-TOP || echo top refused",
	}, "\n")
	res := testutil.Run(t, []string{"--store", store, "--template", "img", "-w", ws, "--ro", ro + ":/ref", "--timeout", "120s"},
		"/bin/sh", "-c", script)
	t.Logf("stdout:\n%s\nstderr:\n%s", res.Stdout, res.Stderr)
	if res.ExitCode != 0 {
		t.Fatalf("in the image template: exit %d (%s)\nstdout:\n%s\nstderr:\n%s", res.ExitCode, res.ExitReason, res.Stdout, res.Stderr)
	}
	for _, want := range []string{
		"/app\n", "1000\n",
		"CapPrm:\t0000000000000000", "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1",
		"Successfully installed moatprobe-0.1", "imported 42", "moatprobe 42",
		"moat-npm-probe 42", "hello\n",
		"dev refused", "ro refused", "top refused",
	} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	for _, p := range probeInstalled {
		if !strings.Contains(res.Stdout, "present /"+p+"\n") {
			t.Errorf("/%s was not there inside the sandbox", p)
		}
		// Nothing reached the template's layer or the host.
		if _, err := os.Lstat(filepath.Join(layerDir, p)); err == nil {
			t.Errorf("the template's layer has %s", p)
		}
		if _, err := os.Lstat("/" + p); err == nil && !strings.HasPrefix(p, "app/") {
			t.Errorf("the host has /%s", p)
		}
	}
	if ents, _ := os.ReadDir(ro); len(ents) != 0 {
		t.Errorf("the read-only bind's source has %d entries", len(ents))
	}

	// A new sandbox of the template starts from the template again.
	res = testutil.Run(t, []string{"--store", store, "--template", "img"}, "/bin/sh", "-c",
		"python3 -c 'import moatprobe' 2>&1; ls /usr/local/lib/node_modules 2>&1; test -e /app/written && echo STILL-THERE; cat /app/README")
	if strings.Contains(res.Stdout, "STILL-THERE") || !strings.Contains(res.Stdout, "No module named 'moatprobe'") ||
		strings.Contains(res.Stdout, "moat-npm-probe") || !strings.Contains(res.Stdout, "the image's app") {
		t.Fatalf("a second sandbox sees the first one's writes or lacks the image's:\n%s%s", res.Stdout, res.Stderr)
	}
}

// TestHostTemplateUsrLocal: in the default (host) template the host's
// system directories are read-only binds: a write to /usr/local fails
// with EROFS, as docs/SECURITY.md says, and nothing reaches the host. The
// control: host root can write the host's /usr/local (access(2), nothing
// written), so the refusal is the sandbox's.
func TestHostTemplateUsrLocal(t *testing.T) {
	testutil.RequireRoot(t)
	if err := unix.Access("/usr/local", unix.W_OK); err != nil {
		testutil.SkipOrFail(t, "control: the host's /usr/local is not writable by root here: "+err.Error())
	}
	probe := fmt.Sprintf("moat-probe-%d", time.Now().UnixNano())
	res := testutil.Sh(t, "touch /usr/local/"+probe+"; mkdir /usr/local/lib/"+probe+"; echo x > /usr/local/bin/"+probe+"; "+
		"mkdir -p $HOME/.local/lib && touch $HOME/.local/lib/ok && echo home-ok")
	for _, p := range []string{"/usr/local/" + probe, "/usr/local/lib/" + probe, "/usr/local/bin/" + probe} {
		if _, err := os.Lstat(p); err == nil {
			os.RemoveAll(p)
			t.Errorf("the sandbox's write reached the host: %s", p)
		}
	}
	if got := strings.Count(res.Stderr, "Read-only file system"); got != 3 {
		t.Errorf("want 3 writes refused with EROFS, got %d:\n%s", got, res.Stderr)
	}
	if !strings.Contains(res.Stdout, "home-ok") {
		t.Errorf("the home directory is not writable:\n%s%s", res.Stdout, res.Stderr)
	}
	if strings.Contains(res.Enforcement.RootFS, "writable root") {
		t.Errorf("the host template reports a writable root: %s", res.Enforcement.RootFS)
	}
}
