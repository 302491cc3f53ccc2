package oci

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/fstree"
)

// maxJSONSize bounds the manifests, indexes and configs read into memory.
const maxJSONSize = 16 << 20

// Annotations that name an image in an OCI index.
const (
	annotationRefName   = "org.opencontainers.image.ref.name"
	annotationImageName = "io.containerd.image.name"
)

// Import imports an image from src, read offline, into dst, an existing
// empty directory, and returns its config.
//
// src is, detected by content: an OCI image layout directory (oci-layout
// and index.json), a tar archive of one (oci-archive), or a "docker save"
// archive (manifest.json); either archive may be gzip-compressed. ref
// selects the image when src holds several: it is matched against the
// org.opencontainers.image.ref.name (or io.containerd.image.name)
// annotation or the digest of an index's entries, or a docker archive's
// RepoTags. With ref "", src must hold one image (an index of several
// platforms gives linux/GOARCH); otherwise the error lists the choices
// (ErrNoImage).
//
// The layers are applied in order by fstree.Layers, as an OCI runtime
// would: ".wh.<name>" removes <name> from what earlier layers wrote,
// ".wh..wh..opq" empties its directory of earlier layers' entries,
// whiteout files are never written, and a layer may replace a non-empty
// directory of an earlier one. Opt (limits included) applies to the
// import as a whole. Manifests, configs and layer blobs of a layout are
// verified against their digests, and every layer against the config's
// diff_ids: a mismatch is ErrDigest. Temporary files (a decompressed or
// unpacked archive) go in a directory next to dst that is removed on
// return. Errors do not repeat src: the caller names it.
func Import(ctx context.Context, src, ref, dst string, opt fstree.Options) (*Image, *fstree.Stats, error) {
	layers, err := fstree.NewLayers(ctx, dst, opt)
	if err != nil {
		return nil, nil, err
	}
	defer layers.Close()
	imp := &importer{ctx: ctx, lim: layers.Limits(), src: src, ref: ref, tmpParent: filepath.Dir(dst)}
	defer imp.cleanup()
	img, err := imp.open()
	if err != nil {
		return nil, nil, err
	}
	for i := range img.layers {
		if err := imp.apply(layers, &img.layers[i]); err != nil {
			return nil, nil, fmt.Errorf("layer %d of %d: %w", i+1, len(img.layers), err)
		}
	}
	stats, err := layers.Finish()
	if err != nil {
		return nil, nil, err
	}
	return img.info, stats, nil
}

// sourceImage is the image selected in the source, ready to apply.
type sourceImage struct {
	info   *Image
	layers []sourceLayer
}

// sourceLayer is one layer of a sourceImage.
type sourceLayer struct {
	layer  v1.Layer
	desc   *v1.Descriptor // the manifest's descriptor, checked against the blob; nil in docker archives
	diffID v1.Hash        // from the config, checked against the uncompressed layer
}

// importer holds the state of one Import.
type importer struct {
	ctx       context.Context
	lim       fstree.Limits // the limits in force, defaults applied
	src, ref  string
	tmpParent string
	tmpDir    string
	files     []*os.File
}

// canceled returns the context's error, if it is done.
func (imp *importer) canceled() error {
	if err := imp.ctx.Err(); err != nil {
		return fmt.Errorf("oci: %w", err)
	}
	return nil
}

// streamErr wraps an error of the tar or compressed stream of an archive,
// telling a truncated stream apart (fstree.ErrTruncated).
func streamErr(what string, err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || (what == "gzip" && errors.Is(err, io.EOF)) {
		return fmt.Errorf("%w: %s: %w", fstree.ErrTruncated, what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// cleanup closes the files the import opened and removes its temporary
// directory.
func (imp *importer) cleanup() {
	for _, f := range imp.files {
		f.Close()
	}
	if imp.tmpDir != "" {
		os.RemoveAll(imp.tmpDir)
	}
}

// tmp returns the import's temporary directory, creating it next to dst.
func (imp *importer) tmp() (string, error) {
	if imp.tmpDir == "" {
		d, err := os.MkdirTemp(imp.tmpParent, ".oci-")
		if err != nil {
			return "", fmt.Errorf("temporary directory: %w", err)
		}
		imp.tmpDir = d
	}
	return imp.tmpDir, nil
}

// openFile opens a file the import reads, closed by cleanup.
func (imp *importer) openFile(p string) (*os.File, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	imp.files = append(imp.files, f)
	return f, nil
}

// open detects the kind of source and selects the image.
func (imp *importer) open() (*sourceImage, error) {
	fi, err := os.Stat(imp.src)
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		return imp.fromLayout(imp.src)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: not a directory or a regular file", fstree.ErrUnsupported)
	}
	f, err := imp.openFile(imp.src)
	if err != nil {
		return nil, err
	}
	if f, err = imp.gunzip(f); err != nil {
		return nil, err
	}
	entries, err := imp.scan(f)
	if err != nil {
		return nil, err
	}
	has := func(name string) bool { _, ok := entries[name]; return ok }
	switch {
	case has("manifest.json"):
		return imp.fromDocker(f, entries)
	case has("oci-layout") && has("index.json"):
		dir, err := imp.unpack(f)
		if err != nil {
			return nil, err
		}
		if imp.tmpDir != "" && strings.HasPrefix(f.Name(), imp.tmpDir) {
			os.Remove(f.Name()) // the decompressed archive is no longer needed
		}
		return imp.fromLayout(dir)
	}
	return nil, fmt.Errorf("%w: neither an OCI layout nor a docker-save archive", fstree.ErrUnsupported)
}

// gunzip returns f, or if it is gzip-compressed a temporary file holding
// its decompressed content (within MaxBytes).
func (imp *importer) gunzip(f *os.File) (*os.File, error) {
	var magic [2]byte
	if n, _ := f.ReadAt(magic[:], 0); n < 2 || magic[0] != 0x1f || magic[1] != 0x8b {
		return f, nil
	}
	zr, err := gzip.NewReader(bufio.NewReader(f))
	if err != nil {
		return nil, streamErr("gzip", err)
	}
	dir, err := imp.tmp()
	if err != nil {
		return nil, err
	}
	out, err := os.OpenFile(filepath.Join(dir, "archive.tar"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	imp.files = append(imp.files, out)
	limit := imp.lim.MaxBytes
	n, err := io.Copy(out, io.LimitReader(zr, limit+1))
	if err != nil {
		return nil, streamErr("gzip", err)
	}
	if n > limit {
		return nil, fmt.Errorf("%w: the decompressed archive exceeds MaxBytes (%d)", fstree.ErrLimit, limit)
	}
	return out, nil
}

// scan lists the entries of the archive f by cleaned name.
func (imp *importer) scan(f *os.File) (map[string]*tar.Header, error) {
	entries := make(map[string]*tar.Header)
	tr := tar.NewReader(io.NewSectionReader(f, 0, 1<<62))
	for count := 0; ; count++ {
		if err := imp.canceled(); err != nil {
			return nil, err
		}
		if count > imp.lim.MaxEntries {
			return nil, fmt.Errorf("%w: archive has more than %d entries (MaxEntries)", fstree.ErrLimit, imp.lim.MaxEntries)
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			return entries, nil
		}
		if err != nil {
			return nil, streamErr("tar", err)
		}
		if p, err := fstree.CleanName(hdr.Name); err == nil && p != "" {
			entries[p] = hdr
		}
	}
}

// unpack extracts the oci-archive f (regular files and directories only)
// into a temporary directory and returns it.
func (imp *importer) unpack(f *os.File) (string, error) {
	dir, err := imp.tmp()
	if err != nil {
		return "", err
	}
	dir = filepath.Join(dir, "layout")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", err
	}
	opt := fstree.Options{
		Limits: imp.lim,
		Filter: func(_ string, st *unix.Stat_t) bool { return st.Mode&unix.S_IFMT == unix.S_IFREG },
	}
	if _, err := fstree.ExtractTar(imp.ctx, io.NewSectionReader(f, 0, 1<<62), dir, opt); err != nil {
		return "", fmt.Errorf("unpack oci-archive: %w", err)
	}
	return dir, nil
}

// fromLayout selects the image in the OCI layout dir.
func (imp *importer) fromLayout(dir string) (*sourceImage, error) {
	for _, f := range []string{"oci-layout", "index.json"} {
		fi, err := os.Lstat(filepath.Join(dir, f))
		if err != nil {
			return nil, fmt.Errorf("%w: not an OCI layout: %v", fstree.ErrUnsupported, err)
		}
		if !fi.Mode().IsRegular() || fi.Size() > maxJSONSize {
			return nil, fmt.Errorf("%w: %s is not a regular file of at most %d bytes", fstree.ErrHostile, f, maxJSONSize)
		}
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, err
	}
	ii, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	im, err := ii.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("index.json: %w", err)
	}
	desc, err := selectManifest(im.Manifests, imp.ref)
	if err != nil {
		return nil, err
	}
	img, digest, err := resolve(dir, ii, desc, 0)
	if err != nil {
		return nil, err
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	if err := checkBlob(dir, m.Config); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	raw, err := img.RawConfigFile()
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := verifyBytes(raw, m.Config); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, fmt.Errorf("layers: %w", err)
	}
	if len(layers) != len(m.Layers) {
		return nil, fmt.Errorf("manifest lists %d layers, image has %d", len(m.Layers), len(layers))
	}
	si, err := newSourceImage(digest.String(), raw, layers)
	if err != nil {
		return nil, err
	}
	for i := range si.layers {
		d := m.Layers[i]
		if !d.MediaType.IsLayer() {
			return nil, fmt.Errorf("layer %d: %w: media type %q", i+1, fstree.ErrUnsupported, d.MediaType)
		}
		si.layers[i].desc = &d
	}
	return si, nil
}

// newSourceImage makes a sourceImage from a raw config and the layers.
func newSourceImage(digest string, rawConfig []byte, layers []v1.Layer) (*sourceImage, error) {
	cfg, err := v1.ParseConfigFile(bytes.NewReader(rawConfig))
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if len(cfg.RootFS.DiffIDs) != len(layers) {
		return nil, fmt.Errorf("config lists %d diff_ids for %d layers", len(cfg.RootFS.DiffIDs), len(layers))
	}
	si := &sourceImage{
		info: &Image{
			Digest:     digest,
			Env:        cfg.Config.Env,
			WorkingDir: cfg.Config.WorkingDir,
			User:       cfg.Config.User,
			Entrypoint: cfg.Config.Entrypoint,
			Cmd:        cfg.Config.Cmd,
			Layers:     len(layers),
		},
	}
	for i, l := range layers {
		si.layers = append(si.layers, sourceLayer{layer: l, diffID: cfg.RootFS.DiffIDs[i]})
	}
	return si, nil
}

// describe names an index entry for an error listing the choices.
func describe(d v1.Descriptor) string {
	s := d.Digest.String()
	if n := d.Annotations[annotationRefName]; n != "" {
		s = n
	} else if n := d.Annotations[annotationImageName]; n != "" {
		s = n
	}
	if p := d.Platform; p != nil {
		s += " (" + p.String() + ")"
	}
	return s
}

// describeAll lists index entries for an error.
func describeAll(ds []v1.Descriptor) string {
	names := make([]string, len(ds))
	for i, d := range ds {
		names[i] = describe(d)
	}
	return strings.Join(names, ", ")
}

// matchesPlatform tells whether an index entry is for linux on this
// machine's architecture.
func matchesPlatform(d v1.Descriptor) bool {
	return d.Platform != nil && d.Platform.OS == "linux" && d.Platform.Architecture == runtime.GOARCH
}

// selectManifest picks the entry of index.json that ref names (see
// Import).
func selectManifest(ds []v1.Descriptor, ref string) (v1.Descriptor, error) {
	if len(ds) == 0 {
		return v1.Descriptor{}, fmt.Errorf("%w: the index is empty", ErrNoImage)
	}
	var matches []v1.Descriptor
	for _, d := range ds {
		switch {
		case ref == "":
			if matchesPlatform(d) {
				matches = append(matches, d)
			}
		case d.Annotations[annotationRefName] == ref, d.Annotations[annotationImageName] == ref, d.Digest.String() == ref:
			matches = append(matches, d)
		}
	}
	switch {
	case ref == "" && len(ds) == 1:
		return ds[0], nil
	case len(matches) == 1:
		return matches[0], nil
	case ref == "":
		return v1.Descriptor{}, fmt.Errorf("%w: several images, choose one of: %s", ErrNoImage, describeAll(ds))
	case len(matches) == 0:
		return v1.Descriptor{}, fmt.Errorf("%w: no image %q, choose one of: %s", ErrNoImage, ref, describeAll(ds))
	}
	return v1.Descriptor{}, fmt.Errorf("%w: %q names several images: %s", ErrNoImage, ref, describeAll(matches))
}

// selectPlatform picks the entry of a nested index for linux/GOARCH (or
// its only entry).
func selectPlatform(ds []v1.Descriptor) (v1.Descriptor, error) {
	if len(ds) == 1 {
		return ds[0], nil
	}
	for _, d := range ds {
		if matchesPlatform(d) {
			return d, nil
		}
	}
	return v1.Descriptor{}, fmt.Errorf("%w: no linux/%s image, platforms: %s", ErrNoImage, runtime.GOARCH, describeAll(ds))
}

// resolve returns the image an index entry names, descending into nested
// indexes; every manifest read is checked against its digest.
func resolve(dir string, ii v1.ImageIndex, d v1.Descriptor, level int) (v1.Image, v1.Hash, error) {
	if level > 4 {
		return nil, v1.Hash{}, fmt.Errorf("%w: indexes nested too deep", fstree.ErrHostile)
	}
	if err := checkBlob(dir, d); err != nil {
		return nil, v1.Hash{}, fmt.Errorf("manifest %s: %w", d.Digest, err)
	}
	switch {
	case d.MediaType.IsImage():
		img, err := ii.Image(d.Digest)
		if err != nil {
			return nil, v1.Hash{}, err
		}
		raw, err := img.RawManifest()
		if err == nil {
			err = verifyBytes(raw, d)
		}
		if err != nil {
			return nil, v1.Hash{}, fmt.Errorf("manifest %s: %w", d.Digest, err)
		}
		return img, d.Digest, nil
	case d.MediaType.IsIndex():
		child, err := ii.ImageIndex(d.Digest)
		if err != nil {
			return nil, v1.Hash{}, err
		}
		raw, err := child.RawManifest()
		if err == nil {
			err = verifyBytes(raw, d)
		}
		if err != nil {
			return nil, v1.Hash{}, fmt.Errorf("index %s: %w", d.Digest, err)
		}
		im, err := child.IndexManifest()
		if err != nil {
			return nil, v1.Hash{}, fmt.Errorf("index %s: %w", d.Digest, err)
		}
		cd, err := selectPlatform(im.Manifests)
		if err != nil {
			return nil, v1.Hash{}, err
		}
		return resolve(dir, child, cd, level+1)
	}
	return nil, v1.Hash{}, fmt.Errorf("%w: media type %q of %s", fstree.ErrUnsupported, d.MediaType, d.Digest)
}

// checkBlob checks, before it is read into memory, that the blob of a
// manifest or config is a regular file of at most maxJSONSize bytes.
func checkBlob(dir string, d v1.Descriptor) error {
	fi, err := os.Lstat(filepath.Join(dir, "blobs", d.Digest.Algorithm, d.Digest.Hex))
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxJSONSize {
		return fmt.Errorf("%w: blob %s is not a regular file of at most %d bytes", fstree.ErrHostile, d.Digest, maxJSONSize)
	}
	return nil
}

// verifyBytes checks a blob read into memory against its descriptor.
func verifyBytes(b []byte, d v1.Descriptor) error {
	if d.Digest.Algorithm != "sha256" {
		return fmt.Errorf("%w: digest algorithm %q", fstree.ErrUnsupported, d.Digest.Algorithm)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != d.Digest.Hex {
		return fmt.Errorf("%w: content is sha256:%s, descriptor says %s", ErrDigest, got, d.Digest)
	}
	if d.Size != 0 && d.Size != int64(len(b)) {
		return fmt.Errorf("%w: %d bytes, descriptor says %d", ErrDigest, len(b), d.Size)
	}
	return nil
}

// sectionFile serves a docker archive to the tarball package: a fresh
// reader each time, seekable so that tar skips what it does not read.
type sectionFile struct{ *io.SectionReader }

func (sectionFile) Close() error { return nil }

// fromDocker selects the image in the docker-save archive f.
func (imp *importer) fromDocker(f *os.File, entries map[string]*tar.Header) (*sourceImage, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	opener := func() (io.ReadCloser, error) { return sectionFile{io.NewSectionReader(f, 0, fi.Size())}, nil }
	if h := entries["manifest.json"]; h.Typeflag != tar.TypeReg || h.Size > maxJSONSize {
		return nil, fmt.Errorf("%w: manifest.json is not a regular file of at most %d bytes", fstree.ErrHostile, maxJSONSize)
	}
	m, err := tarball.LoadManifest(opener)
	if err != nil {
		return nil, fmt.Errorf("manifest.json: %w", err)
	}
	d, tag, err := selectRepoTag(m, imp.ref)
	if err != nil {
		return nil, err
	}
	cfgName, err := followTarLinks(entries, d.Config)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", d.Config, err)
	}
	if h := entries[cfgName]; h.Size > maxJSONSize {
		return nil, fmt.Errorf("%w: config %s is larger than %d bytes", fstree.ErrHostile, d.Config, maxJSONSize)
	}
	img, err := tarball.Image(opener, tag)
	if err != nil {
		return nil, err
	}
	raw, err := img.RawConfigFile()
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	sum := sha256.Sum256(raw)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	if want := configHexFromName(d.Config); want != "" && want != digest[len("sha256:"):] {
		return nil, fmt.Errorf("config %s: %w: content is %s", d.Config, ErrDigest, digest)
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, fmt.Errorf("layers: %w", err)
	}
	return newSourceImage(digest, raw, layers)
}

// configHexFromName is the digest a docker archive's config file name
// states ("<hex>.json" or "blobs/sha256/<hex>"), or "".
func configHexFromName(p string) string {
	base := strings.TrimSuffix(path.Base(p), ".json")
	if _, err := hex.DecodeString(base); err != nil || len(base) != 2*sha256.Size {
		return ""
	}
	if strings.HasSuffix(p, ".json") && !strings.Contains(p, "/") || path.Dir(p) == "blobs/sha256" {
		return base
	}
	return ""
}

// followTarLinks resolves the archive entry p through symlinks and
// hardlinks, as the tarball package does, to a regular entry.
func followTarLinks(entries map[string]*tar.Header, p string) (string, error) {
	for range 16 {
		c, err := fstree.CleanName(p)
		if err != nil {
			return "", err
		}
		h := entries[c]
		switch {
		case h == nil:
			return "", errors.New("not in the archive")
		case h.Typeflag == tar.TypeReg:
			return c, nil
		case h.Typeflag == tar.TypeSymlink || h.Typeflag == tar.TypeLink:
			p = path.Join(path.Dir(c), path.Clean(h.Linkname))
		default:
			return "", fmt.Errorf("entry of type %q", h.Typeflag)
		}
	}
	return "", errors.New("too many links")
}

// selectRepoTag picks the image of a docker archive that ref names, and the
// tag that makes the tarball package pick it (nil for the only image).
func selectRepoTag(m tarball.Manifest, ref string) (*tarball.Descriptor, *name.Tag, error) {
	var choices []string
	for i, d := range m {
		if len(d.RepoTags) == 0 {
			choices = append(choices, fmt.Sprintf("untagged image %d", i+1))
		}
		choices = append(choices, d.RepoTags...)
	}
	list := strings.Join(choices, ", ")
	if len(m) == 0 {
		return nil, nil, fmt.Errorf("%w: manifest.json lists no image", ErrNoImage)
	}
	if ref == "" {
		if len(m) != 1 {
			return nil, nil, fmt.Errorf("%w: several images, choose one of: %s", ErrNoImage, list)
		}
		return &m[0], nil, nil
	}
	want, err := name.NewTag(ref)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %q: %v; choose one of: %s", ErrNoImage, ref, err, list)
	}
	for i := range m {
		for _, t := range m[i].RepoTags {
			tag, err := name.NewTag(t)
			if err != nil {
				continue
			}
			if t == ref || tag.Name() == want.Name() {
				return &m[i], &tag, nil
			}
		}
	}
	return nil, nil, fmt.Errorf("%w: no image %q, choose one of: %s", ErrNoImage, ref, list)
}

// blobReader reads a layer blob, hashing and counting what it reads.
type blobReader struct {
	r    io.Reader
	h    hash.Hash
	n    int64
	size int64 // from the descriptor; reading past it is an error
}

func (b *blobReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.h.Write(p[:n])
	b.n += int64(n)
	if b.size > 0 && b.n > b.size {
		return n, fmt.Errorf("%w: blob is larger than its descriptor's %d bytes", ErrDigest, b.size)
	}
	return n, err
}

// verify reads the rest of the blob and checks it against the descriptor.
func (b *blobReader) verify(d *v1.Descriptor) error {
	if _, err := io.Copy(io.Discard, b); err != nil {
		return fmt.Errorf("blob %s: %w", d.Digest, err)
	}
	if d.Digest.Algorithm != "sha256" {
		return fmt.Errorf("blob %s: %w: digest algorithm %q", d.Digest, fstree.ErrUnsupported, d.Digest.Algorithm)
	}
	if got := hex.EncodeToString(b.h.Sum(nil)); got != d.Digest.Hex {
		return fmt.Errorf("blob %s: %w: content is sha256:%s", d.Digest, ErrDigest, got)
	}
	if d.Size > 0 && b.n != d.Size {
		return fmt.Errorf("blob %s: %w: %d bytes, descriptor says %d", d.Digest, ErrDigest, b.n, d.Size)
	}
	return nil
}

// verifiedBlob is a layer blob read through a blobReader; the partial
// package decompresses it (gzip, zstd or none, detected by content).
type verifiedBlob struct {
	desc *v1.Descriptor
	rc   io.ReadCloser
}

func (v *verifiedBlob) Digest() (v1.Hash, error)            { return v.desc.Digest, nil }
func (v *verifiedBlob) Compressed() (io.ReadCloser, error)  { return v.rc, nil }
func (v *verifiedBlob) Size() (int64, error)                { return v.desc.Size, nil }
func (v *verifiedBlob) MediaType() (types.MediaType, error) { return v.desc.MediaType, nil }

// readCloser joins a reader and the closer of what it reads.
type readCloser struct {
	io.Reader
	io.Closer
}

// apply extracts one layer and verifies it: the blob against the
// manifest's descriptor (layouts), the uncompressed tar against the
// config's diff_id.
func (imp *importer) apply(layers *fstree.Layers, l *sourceLayer) error {
	var (
		rc   io.ReadCloser
		blob *blobReader
		err  error
	)
	if l.desc != nil {
		comp, err := l.layer.Compressed()
		if err != nil {
			return err
		}
		blob = &blobReader{r: comp, h: sha256.New(), size: l.desc.Size}
		cl, err := partial.CompressedToLayer(&verifiedBlob{desc: l.desc, rc: readCloser{blob, comp}})
		if err == nil {
			rc, err = cl.Uncompressed()
		}
		if err != nil {
			comp.Close()
			return imp.blobError(blob, l.desc, err)
		}
	} else if rc, err = l.layer.Uncompressed(); err != nil {
		return err
	}
	defer rc.Close()
	diff := sha256.New()
	if err := layers.Apply(io.TeeReader(rc, diff)); err != nil {
		return imp.blobError(blob, l.desc, err)
	}
	if blob != nil {
		if err := blob.verify(l.desc); err != nil {
			return err
		}
	}
	if l.diffID.Algorithm != "sha256" || hex.EncodeToString(diff.Sum(nil)) != l.diffID.Hex {
		return fmt.Errorf("%w: uncompressed layer is not diff_id %s", ErrDigest, l.diffID)
	}
	return nil
}

// blobError reports err, the failure of reading a layer, as a digest
// mismatch when the blob turns out not to match its descriptor (a corrupt
// blob often fails to decompress before its end is reached).
func (imp *importer) blobError(blob *blobReader, d *v1.Descriptor, err error) error {
	if blob == nil || errors.Is(err, ErrDigest) || errors.Is(err, fstree.ErrLimit) || errors.Is(err, fstree.ErrHostile) || imp.ctx.Err() != nil {
		return err // not a symptom of corruption, or already known
	}
	if verr := blob.verify(d); verr != nil && errors.Is(verr, ErrDigest) {
		return fmt.Errorf("%w (%v)", verr, err)
	}
	return err
}
