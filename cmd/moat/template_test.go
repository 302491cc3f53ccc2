package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/sandbox"
	"github.com/moat-sandbox/moat/templates"
)

// busybox is the static busybox of Debian's busybox-static.
const busybox = "/usr/bin/busybox"

// tinyRoot makes a minimal root filesystem in a temporary directory: a
// static busybox with sh, echo, cat, ls and pwd linked to it, an /etc
// with a marker file, and /srv.
func tinyRoot(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(busybox)
	if err != nil {
		testutil.SkipOrFail(t, "needs a static busybox at "+busybox+" (apt-get install busybox-static): "+err.Error())
	}
	root := filepath.Join(t.TempDir(), "root")
	for _, d := range []string{"bin", "etc", "srv"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sh", "echo", "cat", "ls", "pwd"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "marker"), []byte("tiny\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// importTiny imports tinyRoot as template name into store with extra
// import flags, and fails the test unless it worked.
func importTiny(t *testing.T, store, name string, flags ...string) testutil.Output {
	t.Helper()
	o := testutil.Exec(t, append(append([]string{"template", "import", "--store", store}, flags...), name, tinyRoot(t))...)
	if o.Code != 0 {
		t.Fatalf("template import %s: exit %d\n%s%s", name, o.Code, o.Stdout, o.Stderr)
	}
	return o
}

// TestTemplateCLI: a directory imported as a template is listed, runs
// commands as the root of a one-shot sandbox (with its defaults), and is
// removed; bad imports and unknown templates are refused cleanly.
func TestTemplateCLI(t *testing.T) {
	testutil.RequireRoot(t)
	store := t.TempDir()

	o := importTiny(t, store, "tiny")
	for _, want := range []string{"name:     tiny\n", "source:   dir:", "digest:   sha256:", "entries:  "} {
		if !strings.Contains(o.Stdout, want) {
			t.Fatalf("import output lacks %q:\n%s", want, o.Stdout)
		}
	}
	o = importTiny(t, store, "tiny-env", "--json", "-e", "GREETING=hello", "--workdir", "/srv", "--pids", "64")
	var tmpl templates.Template
	if err := json.Unmarshal([]byte(o.Stdout), &tmpl); err != nil {
		t.Fatalf("import --json: %v\n%s", err, o.Stdout)
	}
	if tmpl.Name != "tiny-env" || tmpl.Workdir != "/srv" || len(tmpl.Env) != 1 || tmpl.Limits.Pids != 64 || tmpl.Entries < 9 || tmpl.Layer == "" {
		t.Fatalf("import --json: %+v", tmpl)
	}

	// Refusals: the command line or the source (125), an existing name (1).
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"import", "Bad_Name", dir}, 125, "template name"},
		{[]string{"import", "host", dir}, 125, "template name"},
		{[]string{"import", "missing", filepath.Join(dir, "missing")}, 125, "no such file"},
		{[]string{"import", "afile", file}, 125, "not a directory"},
		{[]string{"import", "noargs"}, 125, "NAME and a DIR"},
		{[]string{"import", "both", dir, "--oci", dir}, 125, "either a DIR or --oci"},
		{[]string{"import", "ref", dir, "--ref", "latest"}, 125, "--ref"},
		{[]string{"import", "env", dir, "-e", "NOEQUALS"}, 125, "K=V"},
		{[]string{"import", "wd", dir, "--workdir", "rel"}, 125, "absolute"},
		{[]string{"import", "mem", dir, "--memory", "lots"}, 125, "--memory"},
		{[]string{"import", "tiny", dir}, 1, "already exists"},
		{[]string{"bogus"}, 125, "unknown command"},
		{[]string{"ls", "extra"}, 125, "no arguments"},
		{[]string{"rm"}, 125, "template names"},
	} {
		o := testutil.Exec(t, append([]string{"template", c.args[0], "--store", store}, c.args[1:]...)...)
		if o.Code != c.code || !strings.Contains(o.Stderr, c.want) || strings.Count(strings.TrimSpace(o.Stderr), "\n") > 0 || !strings.HasPrefix(o.Stderr, "moat template") {
			t.Errorf("template %q: exit %d (want %d), stderr %q (want one line with %q)", c.args, o.Code, c.code, o.Stderr, c.want)
		}
	}

	o = testutil.Exec(t, "template", "ls", "--store", store)
	lines := strings.Split(strings.TrimSpace(o.Stdout), "\n")
	if o.Code != 0 || len(lines) != 4 || !strings.HasPrefix(lines[0], "NAME ") || !strings.HasPrefix(lines[1], "host ") ||
		!strings.Contains(o.Stdout, "\ntiny ") || !strings.Contains(o.Stdout, "\ntiny-env ") {
		t.Fatalf("template ls: exit %d\n%s%s", o.Code, o.Stdout, o.Stderr)
	}
	o = testutil.Exec(t, "template", "ls", "--json", "--store", store)
	var list []templates.Template
	if err := json.Unmarshal([]byte(o.Stdout), &list); err != nil || len(list) != 3 || list[0].Name != templates.HostTemplate || list[1].Layer == "" {
		t.Fatalf("template ls --json: %v\n%s", err, o.Stdout)
	}

	// A one-shot run has the template as its root: its files, not the
	// host's /usr.
	o = testutil.Exec(t, "run", "--store", store, "--template", "tiny", "--", "sh", "-c", "echo hi; cat /etc/hostname; cat /etc/marker; ls /usr 2>/dev/null || echo no-usr")
	if o.Code != 0 || !strings.HasPrefix(o.Stdout, "hi\n") || !strings.HasSuffix(o.Stdout, "tiny\nno-usr\n") || strings.Count(o.Stdout, "\n") != 4 {
		t.Fatalf("run --template tiny: exit %d\nstdout %q\nstderr %q", o.Code, o.Stdout, o.Stderr)
	}
	// Its defaults: environment, working directory, limits; --json names it.
	o = testutil.Exec(t, "run", "--json", "--store", store, "--template", "tiny-env", "--", "sh", "-c", "echo $GREETING; pwd")
	var res struct {
		sandbox.Result
		Template string `json:"template"`
	}
	if err := json.Unmarshal([]byte(o.Stdout), &res); err != nil {
		t.Fatalf("run --json: %v\n%s", err, o.Stdout)
	}
	if o.Code != 0 || res.Stdout != "hello\n/srv\n" || res.Template != "tiny-env" || res.Enforcement == nil || res.Enforcement.Limits.Pids != 64 {
		t.Fatalf("run --json --template tiny-env: exit %d %+v", o.Code, res)
	}
	// A call's own settings win.
	o = testutil.Exec(t, "run", "--store", store, "--template", "tiny-env", "-e", "GREETING=bye", "--cwd", "/etc", "--", "sh", "-c", "echo $GREETING; pwd")
	if o.Code != 0 || o.Stdout != "bye\n/etc\n" {
		t.Fatalf("run with own env and cwd: exit %d %q %q", o.Code, o.Stdout, o.Stderr)
	}
	o = testutil.Exec(t, "run", "--store", store, "--template", "nope", "--", "true")
	if o.Code != 125 || !strings.Contains(o.Stderr, "no such template") || strings.Count(strings.TrimSpace(o.Stderr), "\n") > 0 {
		t.Fatalf("run --template nope: exit %d %q", o.Code, o.Stderr)
	}
	o = testutil.Exec(t, "run", "--json", "--store", store, "--template", "nope", "--", "true")
	if err := json.Unmarshal([]byte(o.Stdout), &res); err != nil || o.Code != 125 || res.ExitReason != sandbox.ReasonSetupError {
		t.Fatalf("run --json --template nope: exit %d %v %s", o.Code, err, o.Stdout)
	}

	o = testutil.Exec(t, "template", "rm", "--store", store, "tiny", "nope", "host")
	if o.Code != 1 || o.Stdout != "tiny\n" || !strings.Contains(o.Stderr, "nope: template \"nope\": not found") || !strings.Contains(o.Stderr, "host template cannot be removed") {
		t.Fatalf("template rm: exit %d %q %q", o.Code, o.Stdout, o.Stderr)
	}
	o = testutil.Exec(t, "template", "ls", "--store", store)
	if strings.Contains(o.Stdout, "\ntiny ") || !strings.Contains(o.Stdout, "\ntiny-env ") {
		t.Fatalf("template ls after rm:\n%s", o.Stdout)
	}
	o = testutil.Exec(t, "run", "--store", store, "--template", "tiny", "--", "true")
	if o.Code != 125 {
		t.Fatalf("run of a removed template: exit %d %q", o.Code, o.Stderr)
	}
	if o := testutil.Exec(t, "run", "--store", store, "--template", "tiny-env", "--", "cat", "/etc/marker"); o.Code != 0 || o.Stdout != "tiny\n" {
		t.Fatalf("run of the template left: exit %d %q %q", o.Code, o.Stdout, o.Stderr)
	}
}

// dockerArchive writes the tree at root as a one-layer image in a
// `docker save` archive, with env, workdir and user in its config, and
// returns its path.
func dockerArchive(t *testing.T, root, tag string, env []string, workdir, user string) string {
	t.Helper()
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if d.Type()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name, h.Uid, h.Gid, h.Uname, h.Gname = filepath.ToSlash(rel), 0, 0, "", ""
		if d.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			_, err = tw.Write(b)
			return err
		}
		return nil
	})
	if err != nil || tw.Close() != nil {
		t.Fatalf("layer: %v", err)
	}
	diffID := sha256.Sum256(layer.Bytes())
	cfg, _ := json.Marshal(map[string]any{
		"architecture": goruntime.GOARCH, "os": "linux",
		"config": map[string]any{"Env": env, "WorkingDir": workdir, "User": user},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diffID[:])}},
	})
	cfgSum := sha256.Sum256(cfg)
	cfgName := hex.EncodeToString(cfgSum[:]) + ".json"
	manifest, _ := json.Marshal([]map[string]any{{"Config": cfgName, "RepoTags": []string{tag}, "Layers": []string{"layer.tar"}}})
	out := filepath.Join(t.TempDir(), "image.tar")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	aw := tar.NewWriter(f)
	for _, e := range []struct {
		name string
		data []byte
	}{{"manifest.json", manifest}, {cfgName, cfg}, {"layer.tar", layer.Bytes()}} {
		if err := aw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := aw.Write(e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := aw.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTemplateImportOCI: a docker-save archive imports as a template
// whose image config gives its sandboxes' defaults; an image user that
// its /etc/passwd lacks refuses the import, --user names another.
func TestTemplateImportOCI(t *testing.T) {
	testutil.RequireRoot(t)
	store := t.TempDir()
	img := dockerArchive(t, tinyRoot(t), "tiny:1", []string{"PATH=/bin", "FROM_IMAGE=yes"}, "/srv", "nobody")
	o := testutil.Exec(t, "template", "import", "--store", store, "--oci", img, "--ref", "tiny:1", "-e", "EXTRA=1", "img")
	if o.Code != 125 || !strings.Contains(o.Stderr, `"nobody": no such user in the template's /etc/passwd (give --user)`) {
		t.Fatalf("import --oci of an image whose user is not in its passwd: exit %d\n%s%s", o.Code, o.Stdout, o.Stderr)
	}
	o = testutil.Exec(t, "template", "import", "--store", store, "--oci", img, "--ref", "tiny:1", "-e", "EXTRA=1", "--user", "65534:65534", "img")
	if o.Code != 0 || !strings.Contains(o.Stdout, "source:   oci:"+img+"@tiny:1\n") || !strings.Contains(o.Stdout, "image:    sha256:") ||
		!strings.Contains(o.Stdout, "workdir:  /srv\n") || !strings.Contains(o.Stdout, "env:      FROM_IMAGE=yes\n") || !strings.Contains(o.Stdout, "user:     65534:65534 ") {
		t.Fatalf("import --oci: exit %d\n%s%s", o.Code, o.Stdout, o.Stderr)
	}
	o = testutil.Exec(t, "run", "--store", store, "--template", "img", "--", "sh", "-c", "echo $FROM_IMAGE $EXTRA; pwd; cat /etc/marker")
	if o.Code != 0 || o.Stdout != "yes 1\n/srv\ntiny\n" {
		t.Fatalf("run --template img: exit %d %q %q", o.Code, o.Stdout, o.Stderr)
	}
	o = testutil.Exec(t, "template", "import", "--store", store, "--oci", img, "--ref", "other:2", "img2")
	if o.Code != 125 || !strings.Contains(o.Stderr, "choose one of: tiny:1") {
		t.Fatalf("import --oci of a missing ref: exit %d %q", o.Code, o.Stderr)
	}
}
