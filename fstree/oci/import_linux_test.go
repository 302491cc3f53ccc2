package oci

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/compression"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/moat-sandbox/moat/fstree"
)

// layerOf makes a layer of a tar archive (gzip-compressed or not).
func layerOf(t *testing.T, b []byte) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// imageOf makes an image of tar layers with the given config.
func imageOf(t *testing.T, cfg v1.Config, layers ...[]byte) v1.Image {
	t.Helper()
	var ls []v1.Layer
	for _, b := range layers {
		ls = append(ls, layerOf(t, b))
	}
	img, err := mutate.AppendLayers(empty.Image, ls...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.Config = cfg
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// writeLayout writes the images, annotated with their ref names, as an OCI
// layout in a new directory.
func writeLayout(t *testing.T, imgs ...any) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(imgs); i += 2 {
		opt := layout.WithAnnotations(map[string]string{annotationRefName: imgs[i].(string)})
		switch x := imgs[i+1].(type) {
		case v1.Image:
			err = p.AppendImage(x, opt)
		case v1.ImageIndex:
			err = p.AppendIndex(x, opt)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// tarDir archives a directory (an oci-archive of a layout).
func tarDir(t *testing.T, dir string) []byte {
	t.Helper()
	var ents []ent
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if fi.IsDir() {
			ents = append(ents, dirEnt(rel, 0o755))
			return nil
		}
		b, err := os.ReadFile(p)
		ents = append(ents, fileEnt(rel, string(b), 0o644))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return mkTar(t, ents...)
}

// dockerArchive writes the images as a "docker save" archive with
// go-containerregistry (compressed layers).
func dockerArchive(t *testing.T, imgs map[string]v1.Image) []byte {
	t.Helper()
	refs := make(map[name.Reference]v1.Image)
	for tag, img := range imgs {
		ref, err := name.NewTag(tag)
		if err != nil {
			t.Fatal(err)
		}
		refs[ref] = img
	}
	var b bytes.Buffer
	if err := tarball.MultiRefWrite(refs, &b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// legacyDockerArchive writes a "docker save" archive as older docker did:
// uncompressed <id>/layer.tar files and <config digest>.json. badDiffID
// corrupts the config's first diff_id.
func legacyDockerArchive(t *testing.T, tag string, cfg v1.Config, badDiffID bool, layers ...[]byte) []byte {
	t.Helper()
	var ents []ent
	var paths []string
	var diffIDs []v1.Hash
	for _, l := range layers {
		if zr, err := gzip.NewReader(bytes.NewReader(l)); err == nil { // docker save writes plain tars
			l, _ = io.ReadAll(zr)
		}
		sum := sha256.Sum256(l)
		id := hex.EncodeToString(sum[:])
		paths = append(paths, id+"/layer.tar")
		ents = append(ents, dirEnt(id, 0o755), fileEnt(id+"/layer.tar", string(l), 0o644))
		diffIDs = append(diffIDs, v1.Hash{Algorithm: "sha256", Hex: id})
	}
	if badDiffID {
		diffIDs[0].Hex = strings.Repeat("0", 64)
	}
	raw, err := json.Marshal(v1.ConfigFile{OS: "linux", Architecture: runtime.GOARCH, Config: cfg, RootFS: v1.RootFS{Type: "layers", DiffIDs: diffIDs}})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	cfgName := hex.EncodeToString(sum[:]) + ".json"
	m, _ := json.Marshal([]map[string]any{{"Config": cfgName, "RepoTags": []string{tag}, "Layers": paths}})
	ents = append(ents, fileEnt(cfgName, string(raw), 0o644), fileEnt("manifest.json", string(m), 0o644))
	return mkTar(t, ents...)
}

// writeSrc writes b to a new file outside any test's destination parent.
func writeSrc(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// importOCI runs Import into a confined destination and checks that
// nothing was left outside it (temporary files included).
func importOCI(t *testing.T, src, ref string, opt fstree.Options) (*Image, *fstree.Stats, string, error) {
	t.Helper()
	dst, _, check := confined(t)
	img, st, err := Import(context.Background(), src, ref, dst, opt)
	check()
	return img, st, dst, err
}

// whiteoutLayers are three layers whose whiteouts and opaque directories
// shape the final tree (want).
func whiteoutLayers(t *testing.T) ([][]byte, []string) {
	l1 := mkTar(t,
		dirEnt("a", 0o755), fileEnt("a/keep", "k", 0o644), fileEnt("a/gone", "g", 0o644),
		dirEnt("b", 0o755), fileEnt("b/x", "x", 0o644), dirEnt("b/sub", 0o755), fileEnt("b/sub/y", "y", 0o644),
		fileEnt("c", "c", 0o644),
		dirEnt("d", 0o755), fileEnt("d/e", "e", 0o644),
		dirEnt("f/deep", 0o755), fileEnt("f/deep/z", "z", 0o644),
	)
	l2 := mkTar(t,
		fileEnt("a/.wh.gone", "", 0o644),
		fileEnt("b/new", "n", 0o644), // before the opaque marker: same layer, kept
		fileEnt("b/.wh..wh..opq", "", 0o644),
		fileEnt(".wh.c", "", 0o644),
		fileEnt("d", "now a file", 0o644), // replaces a lower non-empty directory
		fileEnt("f/.wh.deep", "", 0o644),
		fileEnt(".wh.never-existed", "", 0o644),
	)
	l3 := mkTar(t,
		fileEnt("a/gone", "back", 0o644),
		fileEnt("b/sub/y2", "y2", 0o644),
		symlinkEnt("l", "/etc"),
	)
	want := []string{
		"a dir", "a/gone file back", "a/keep file k",
		"b dir", "b/new file n", "b/sub dir", "b/sub/y2 file y2",
		"d file now a file", "f dir", "l -> /etc",
	}
	return [][]byte{l1, gz(t, l2), l3}, want
}

// TestImportOCIFormats: the same image as an OCI layout, an oci-archive
// (plain and gzip) and docker-save archives (go-containerregistry's and the
// legacy layout, plain and gzip) imports to the same tree, with its
// whiteouts applied and its config returned.
func TestImportOCIFormats(t *testing.T) {
	requireRoot(t)
	layers, want := whiteoutLayers(t)
	cfg := v1.Config{Env: []string{"PATH=/bin", "A=b"}, WorkingDir: "/work", User: "1000:1000", Entrypoint: []string{"/bin/sh", "-c"}, Cmd: []string{"echo hi"}}
	img := imageOf(t, cfg, layers...)
	manifestDigest, _ := img.Digest()
	configDigest, _ := img.ConfigName()
	dir := writeLayout(t, "example", img)
	docker := dockerArchive(t, map[string]v1.Image{"example.com/img:1": img})
	sources := map[string]struct{ src, digest string }{
		"layout":             {dir, manifestDigest.String()},
		"oci-archive":        {writeSrc(t, "oci.tar", tarDir(t, dir)), manifestDigest.String()},
		"oci-archive.gz":     {writeSrc(t, "oci.tar.gz", gz(t, tarDir(t, dir))), manifestDigest.String()},
		"docker":             {writeSrc(t, "docker.tar", docker), configDigest.String()},
		"docker.gz":          {writeSrc(t, "docker.tgz", gz(t, docker)), configDigest.String()},
		"docker-legacy":      {writeSrc(t, "legacy.tar", legacyDockerArchive(t, "img:1", cfg, false, layers...)), ""},
		"docker-legacy-name": {writeSrc(t, "whatever.bin", legacyDockerArchive(t, "img:1", cfg, false, layers...)), ""},
	}
	var treeDigest string
	for kind, s := range sources {
		t.Run(kind, func(t *testing.T) {
			got, st, dst, err := importOCI(t, s.src, "", fstree.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if tree := treeList(t, dst); !reflect.DeepEqual(tree, want) {
				t.Errorf("tree:\n got %q\nwant %q", tree, want)
			}
			if !reflect.DeepEqual(got.Env, cfg.Env) || got.WorkingDir != cfg.WorkingDir || got.User != cfg.User ||
				!reflect.DeepEqual(got.Entrypoint, cfg.Entrypoint) || !reflect.DeepEqual(got.Cmd, cfg.Cmd) || got.Layers != 3 {
				t.Errorf("config %+v", got)
			}
			if s.digest != "" && got.Digest != s.digest {
				t.Errorf("Digest %s, want %s", got.Digest, s.digest)
			}
			if d, _ := fstree.TreeDigest(dst); d != st.Digest {
				t.Errorf("Stats.Digest %s, fstree.TreeDigest %s", st.Digest, d)
			}
			if treeDigest == "" {
				treeDigest = st.Digest
			} else if st.Digest != treeDigest {
				t.Errorf("tree digest %s differs from another format's %s", st.Digest, treeDigest)
			}
		})
	}
}

// TestImportOCISelect: ref selects among several images of a layout or a
// docker archive; "" with several lists the choices; an index of several
// platforms gives this machine's.
func TestImportOCISelect(t *testing.T) {
	requireRoot(t)
	one := imageOf(t, v1.Config{Cmd: []string{"one"}}, mkTar(t, fileEnt("which", "one", 0o644)))
	two := imageOf(t, v1.Config{Cmd: []string{"two"}}, mkTar(t, fileEnt("which", "two", 0o644)))
	dir := writeLayout(t, "one", one, "two", two)
	docker := writeSrc(t, "docker.tar", dockerArchive(t, map[string]v1.Image{"example.com/one:1": one, "example.com/two:2": two}))
	for _, c := range []struct{ src, ref, want, err string }{
		{dir, "two", "two", ""},
		{dir, "one", "one", ""},
		{dir, "", "", "choose one of: one"},
		{dir, "three", "", `no image "three"`},
		{docker, "example.com/two:2", "two", ""},
		{docker, "example.com/one:1", "one", ""},
		{docker, "", "", "example.com/two:2"},
		{docker, "example.com/one:2", "", "example.com/one:1"},
	} {
		img, _, dst, err := importOCI(t, c.src, c.ref, fstree.Options{})
		if c.err != "" {
			if !errors.Is(err, ErrNoImage) || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s ref %q: got %v, want ErrNoImage listing %q", filepath.Base(c.src), c.ref, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s ref %q: %v", filepath.Base(c.src), c.ref, err)
			continue
		}
		if got := readFile(t, filepath.Join(dst, "which")); got != c.want || img.Cmd[0] != c.want {
			t.Errorf("%s ref %q: got image %q (cmd %q)", filepath.Base(c.src), c.ref, got, img.Cmd)
		}
	}

	other := "s390x"
	if runtime.GOARCH == other {
		other = "arm64"
	}
	native := imageOf(t, v1.Config{}, mkTar(t, fileEnt("arch", runtime.GOARCH, 0o644)))
	foreign := imageOf(t, v1.Config{}, mkTar(t, fileEnt("arch", other, 0o644)))
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: foreign, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: other}}},
		mutate.IndexAddendum{Add: native, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}},
	)
	multi := writeLayout(t, "multi", idx)
	for _, ref := range []string{"", "multi"} {
		img, _, dst, err := importOCI(t, multi, ref, fstree.Options{})
		if err != nil {
			t.Fatalf("multi-platform ref %q: %v", ref, err)
		}
		nd, _ := native.Digest()
		if got := readFile(t, filepath.Join(dst, "arch")); got != runtime.GOARCH || img.Digest != nd.String() {
			t.Errorf("multi-platform ref %q: got %s, digest %s", ref, got, img.Digest)
		}
	}
}

// blobPath is the path of a blob in a layout.
func blobPath(dir string, h v1.Hash) string {
	return filepath.Join(dir, "blobs", h.Algorithm, h.Hex)
}

// TestImportOCICorrupt: blobs that do not match their digests, truncated
// layers and layers that do not match the config's diff_ids are refused.
func TestImportOCICorrupt(t *testing.T) {
	requireRoot(t)
	layer := gz(t, mkTar(t, fileEnt("f", strings.Repeat("content ", 1000), 0o644), fileEnt("g", "g", 0o644)))
	img := imageOf(t, v1.Config{Cmd: []string{"x"}}, layer)
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	md, _ := img.Digest()
	other := gz(t, mkTar(t, fileEnt("evil", "not the layer", 0o644)))
	cases := map[string]func(dir string){
		"layer-replaced": func(dir string) { os.WriteFile(blobPath(dir, m.Layers[0].Digest), other, 0o644) },
		"layer-byte-flipped": func(dir string) {
			b := bytes.Clone(layer)
			b[len(b)/2] ^= 0xff
			os.WriteFile(blobPath(dir, m.Layers[0].Digest), b, 0o644)
		},
		"layer-truncated": func(dir string) { os.WriteFile(blobPath(dir, m.Layers[0].Digest), layer[:len(layer)/2], 0o644) },
		"layer-extended": func(dir string) {
			os.WriteFile(blobPath(dir, m.Layers[0].Digest), append(bytes.Clone(layer), 0), 0o644)
		},
		"config": func(dir string) {
			b, _ := os.ReadFile(blobPath(dir, m.Config.Digest))
			os.WriteFile(blobPath(dir, m.Config.Digest), bytes.Replace(b, []byte(`"x"`), []byte(`"y"`), 1), 0o644)
		},
		"manifest": func(dir string) {
			b, _ := os.ReadFile(blobPath(dir, md))
			os.WriteFile(blobPath(dir, md), append(b, ' '), 0o644)
		},
		"blob-symlink": func(dir string) {
			p := blobPath(dir, m.Config.Digest)
			os.Remove(p)
			os.Symlink("/etc/passwd", p)
		},
	}
	for name, corrupt := range cases {
		t.Run(name, func(t *testing.T) {
			dir := writeLayout(t, "x", img)
			corrupt(dir)
			_, _, _, err := importOCI(t, dir, "", fstree.Options{})
			if err == nil {
				t.Fatal("a corrupt image was imported")
			}
			if name != "blob-symlink" && !errors.Is(err, ErrDigest) {
				t.Errorf("got %v, want ErrDigest", err)
			}
			t.Logf("refused: %v", err)
		})
	}
	t.Run("control", func(t *testing.T) {
		if _, _, _, err := importOCI(t, writeLayout(t, "x", img), "", fstree.Options{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("docker-diff-id", func(t *testing.T) {
		src := writeSrc(t, "bad.tar", legacyDockerArchive(t, "img:1", v1.Config{}, true, mkTar(t, fileEnt("f", "x", 0o644))))
		if _, _, _, err := importOCI(t, src, "", fstree.Options{}); !errors.Is(err, ErrDigest) {
			t.Fatalf("got %v, want ErrDigest", err)
		}
	})
	t.Run("docker-truncated", func(t *testing.T) {
		b := legacyDockerArchive(t, "img:1", v1.Config{}, false, mkTar(t, fileEnt("f", strings.Repeat("x", 9000), 0o644)))
		src := writeSrc(t, "short.tar", b[:len(b)-3000])
		if _, _, _, err := importOCI(t, src, "", fstree.Options{}); err == nil {
			t.Fatal("a truncated archive was imported")
		}
	})
	t.Run("not-an-image", func(t *testing.T) {
		src := writeSrc(t, "plain.tar", mkTar(t, fileEnt("hello", "x", 0o644)))
		if _, _, _, err := importOCI(t, src, "", fstree.Options{}); !errors.Is(err, fstree.ErrUnsupported) {
			t.Fatalf("got %v, want fstree.ErrUnsupported", err)
		}
	})
}

// TestImportOCIHostile: a symlink written by one layer never redirects a
// later layer's entries, whiteouts or hardlinks; limits hold across layers.
func TestImportOCIHostile(t *testing.T) {
	requireRoot(t)
	for name, l2 := range map[string]func(parent string) []byte{
		"write":    func(string) []byte { return mkTar(t, fileEnt("etc/pwned", "x", 0o644)) },
		"whiteout": func(string) []byte { return mkTar(t, fileEnt("etc/.wh.sentinel", "", 0o644)) },
		"opaque":   func(string) []byte { return mkTar(t, fileEnt("etc/.wh..wh..opq", "", 0o644)) },
		"hardlink": func(string) []byte { return mkTar(t, linkEnt("h", "etc/sentinel")) },
		"dotdot":   func(string) []byte { return mkTar(t, fileEnt("../pwned", "x", 0o644)) },
	} {
		t.Run(name, func(t *testing.T) {
			dst, parent, check := confined(t)
			img := imageOf(t, v1.Config{}, mkTar(t, symlinkEnt("etc", parent)), l2(parent))
			_, _, err := Import(context.Background(), writeLayout(t, "x", img), "", dst, fstree.Options{})
			if !errors.Is(err, fstree.ErrHostile) {
				t.Fatalf("got %v, want fstree.ErrHostile", err)
			}
			check()
		})
	}
	t.Run("bomb", func(t *testing.T) {
		bomb := gz(t, mkTar(t, fileEnt("zeros", string(make([]byte, 64<<20)), 0o644)))
		img := imageOf(t, v1.Config{}, mkTar(t, fileEnt("small", "x", 0o644)), bomb)
		src := writeLayout(t, "x", img)
		start := time.Now()
		_, _, _, err := importOCI(t, src, "", fstree.Options{Limits: fstree.Limits{MaxBytes: 8 << 20}})
		if !errors.Is(err, fstree.ErrLimit) || !strings.Contains(err.Error(), "MaxBytes") {
			t.Fatalf("got %v, want a MaxBytes error", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("took %v to refuse", d)
		}
	})
	t.Run("entries-across-layers", func(t *testing.T) {
		var a, b []ent
		for i := range 60 {
			a = append(a, fileEnt(fmt.Sprintf("a%02d", i), "", 0o644))
			b = append(b, fileEnt(fmt.Sprintf("b%02d", i), "", 0o644))
		}
		img := imageOf(t, v1.Config{}, mkTar(t, a...), mkTar(t, b...))
		_, _, _, err := importOCI(t, writeLayout(t, "x", img), "", fstree.Options{Limits: fstree.Limits{MaxEntries: 100}})
		if !errors.Is(err, fstree.ErrLimit) {
			t.Fatalf("got %v, want fstree.ErrLimit", err)
		}
	})
}

// TestImportOCIBusybox: a realistic image (Debian's static busybox and
// symlinks to it) imports into a tree that runs.
func TestImportOCIBusybox(t *testing.T) {
	requireRoot(t)
	bb, err := os.ReadFile("/usr/bin/busybox")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("/usr/bin/busybox (Debian's busybox-static) is needed: %v", err)
		}
		t.Skipf("skipping: /usr/bin/busybox (Debian's busybox-static) is absent: %v", err)
	}
	base := mkTar(t,
		dirEnt("bin", 0o755), fileEnt("bin/busybox", string(bb), 0o755),
		symlinkEnt("bin/sh", "busybox"), symlinkEnt("bin/ls", "/bin/busybox"), symlinkEnt("bin/cat", "busybox"),
		dirEnt("etc", 0o755), fileEnt("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n", 0o644),
	)
	top := mkTar(t, dirEnt("tmp", 0o1777), fileEnt("etc/motd", "hello from the image\n", 0o644), fileEnt("bin/.wh.cat", "", 0o644))
	img := imageOf(t, v1.Config{Env: []string{"PATH=/bin"}, Cmd: []string{"/bin/sh"}, WorkingDir: "/"}, gz(t, base), gz(t, top))
	got, st, dst, err := importOCI(t, writeLayout(t, "busybox:latest", img), "busybox:latest", fstree.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "bin/busybox")); !bytes.Equal(b, bb) {
		t.Error("bin/busybox differs from /usr/bin/busybox")
	}
	absent(t, filepath.Join(dst, "bin/cat"))
	if got.Cmd[0] != "/bin/sh" || got.Env[0] != "PATH=/bin" || st.Symlinks != 3 || st.Files != 3 {
		t.Errorf("config %+v stats %+v", got, st)
	}
	// The imported tree runs: chroot into it and use its shell.
	cmd := exec.Command("/bin/sh", "-c", "cat /etc/motd 2>/dev/null || busybox cat /etc/motd; ls /bin")
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: dst}
	cmd.Env = []string{"PATH=/bin"}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "hello from the image") || !strings.Contains(string(out), "busybox") {
		t.Errorf("chroot %s /bin/sh: %v\n%s", dst, err, out)
	}
}

// TestImportOCIZstd: zstd-compressed layers import like gzip ones.
func TestImportOCIZstd(t *testing.T) {
	requireRoot(t)
	raw := mkTar(t, fileEnt("z", "zstd layer", 0o644))
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil },
		tarball.WithCompression(compression.ZStd), tarball.WithMediaType(types.OCILayerZStd))
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	_, _, dst, err := importOCI(t, writeLayout(t, "z", img), "", fstree.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(dst, "z")); got != "zstd layer" {
		t.Errorf("z = %q", got)
	}
}
