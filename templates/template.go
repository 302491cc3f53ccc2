package templates

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/moat-sandbox/moat/fstree"
	"github.com/moat-sandbox/moat/fstree/oci"
	"github.com/moat-sandbox/moat/sandbox"
)

// HostTemplate is the built-in template: the host's system directories,
// read-only. It is always there and cannot be removed.
const HostTemplate = "host"

// Template is a named root filesystem and the defaults sandboxes made from
// it get.
type Template struct {
	Name string `json:"name"`
	// Layer is the digest of the root's layer ("" for the host template).
	Layer string `json:"layer,omitempty"`
	// Source says where it was imported from: "host", "dir:PATH" or
	// "oci:PATH[@REF]".
	Source  string    `json:"source"`
	Created time.Time `json:"created"`
	// Defaults of sandboxes made from the template.
	Env     []string `json:"env,omitempty"`
	Workdir string   `json:"workdir,omitempty"`
	// ImageUser is the template's user: an OCI image config's User, or
	// the import's --user ("" is root, as a container runtime runs an
	// image that names none). Processes run as the sandbox user (uid
	// 1000), and the template's layer is idmapped so that what this user
	// owns in it appears owned by the sandbox user (see sandbox.RootFS.User):
	// the command can write where the image's user could, into the
	// sandbox's private upper layer.
	ImageUser string         `json:"image_user,omitempty"`
	Limits    sandbox.Limits `json:"limits"`
	// What the import wrote.
	Bytes         int64    `json:"bytes"`
	Entries       int      `json:"entries"`
	Skipped       []string `json:"skipped,omitempty"`
	SkippedCount  int      `json:"skipped_count,omitempty"`
	StrippedSetid int      `json:"stripped_setid,omitempty"`
	// ImageDigest is the OCI manifest digest of an imported image.
	ImageDigest string `json:"image_digest,omitempty"`
}

// Source kinds of Import.
const (
	SourceDir = "dir"
	SourceOCI = "oci"
)

// ImportRequest says what to import.
type ImportRequest struct {
	Name string
	// Kind is SourceDir or SourceOCI.
	Kind string
	// Path is the directory, or the OCI layout / archive.
	Path string
	// Ref selects an image of an OCI source holding several.
	Ref string
	// Limits bound what the import may write (zero: fstree's defaults).
	Limits fstree.Limits
	// Defaults override the image's (Env entries are appended).
	Env     []string
	Workdir string
	// User overrides the image's user ("" keeps it; see
	// sandbox.ResolveImageUser for the form). It must resolve against the
	// imported tree's /etc/passwd and /etc/group.
	User    string
	Sandbox sandbox.Limits
}

// Import reads a template into the store. The tree is written into a work
// directory and becomes visible only once complete (rename under the store
// lock), so an interrupted or refused import leaves nothing usable.
func (s *Store) Import(ctx context.Context, req ImportRequest) (*Template, error) {
	if !validName(req.Name) || req.Name == HostTemplate {
		return nil, fmt.Errorf("%w: template name %q (want [a-z0-9][a-z0-9._-]*, at most 63 bytes, not %q)", ErrInvalid, req.Name, HostTemplate)
	}
	if _, err := s.Template(req.Name); err == nil {
		return nil, fmt.Errorf("template %q: %w", req.Name, ErrExists)
	}
	src, err := filepath.Abs(req.Path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if _, err := os.Stat(src); err != nil {
		return nil, fmt.Errorf("%w: source: %v", ErrInvalid, err)
	}
	w, err := s.newWork("import")
	if err != nil {
		return nil, err
	}
	defer w.done()
	tree := filepath.Join(w.dir, "root")
	if err := os.Mkdir(tree, 0o755); err != nil {
		return nil, err
	}
	t := &Template{Name: req.Name, Created: time.Now().UTC(), Limits: req.Sandbox}
	opt := fstree.Options{Limits: req.Limits}
	var st *fstree.Stats
	switch req.Kind {
	case SourceDir:
		t.Source = "dir:" + src
		st, err = fstree.CopyDir(ctx, src, tree, opt)
	case SourceOCI:
		t.Source = "oci:" + src
		if req.Ref != "" {
			t.Source += "@" + req.Ref
		}
		var img *oci.Image
		img, st, err = oci.Import(ctx, src, req.Ref, tree, opt)
		if err == nil {
			t.Env, t.Workdir, t.ImageUser, t.ImageDigest = img.Env, img.WorkingDir, img.User, img.Digest
		}
	default:
		return nil, fmt.Errorf("%w: source kind %q (want %s or %s)", ErrInvalid, req.Kind, SourceDir, SourceOCI)
	}
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", src, err)
	}
	t.Env = append(t.Env, req.Env...)
	if req.Workdir != "" {
		t.Workdir = req.Workdir
	}
	if req.User != "" {
		t.ImageUser = req.User
	}
	// The user must resolve in the tree, as every sandbox made from it
	// resolves it again.
	if err := checkUser(tree, t.ImageUser); err != nil {
		return nil, fmt.Errorf("%w: %v (give --user)", ErrInvalid, err)
	}
	if t.Workdir != "" && !filepath.IsAbs(t.Workdir) {
		return nil, fmt.Errorf("%w: workdir %q is not absolute", ErrInvalid, t.Workdir)
	}
	t.Layer, t.Bytes, t.Entries = st.Digest, st.Bytes, st.Entries
	t.Skipped, t.SkippedCount, t.StrippedSetid = st.Skipped, st.SkippedCount, st.StrippedSetid
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if _, err := s.Template(req.Name); err == nil {
		return nil, fmt.Errorf("template %q: %w", req.Name, ErrExists)
	}
	if err := s.commitLayer(tree, t.Layer); err != nil {
		return nil, err
	}
	if err := writeJSON(s.templatePath(req.Name), t); err != nil {
		return nil, fmt.Errorf("store template: %w", err)
	}
	return t, nil
}

func (s *Store) templatePath(name string) string {
	return filepath.Join(s.dir, "templates", name+".json")
}

// Host is the built-in host template.
func Host() *Template { return &Template{Name: HostTemplate, Source: "host"} }

// Template returns the template called name; the host template always
// exists.
func (s *Store) Template(name string) (*Template, error) {
	if name == "" || name == HostTemplate {
		return Host(), nil
	}
	if !validName(name) {
		return nil, fmt.Errorf("template %q: %w", name, ErrNotFound)
	}
	return readMeta[Template](s.templatePath(name), fmt.Sprintf("template %q", name))
}

// Templates lists the templates, the host template first.
func (s *Store) Templates() ([]*Template, error) {
	ts, err := listJSON[Template](filepath.Join(s.dir, "templates"))
	if err != nil {
		return nil, err
	}
	return append([]*Template{Host()}, ts...), nil
}

// RemoveTemplate removes a template and, unless something else refers to
// it, its layer. It refuses (ErrInUse) while a snapshot was taken from the
// template or a live sandbox uses its layer.
func (s *Store) RemoveTemplate(name string) error {
	if name == HostTemplate {
		return fmt.Errorf("%w: the host template cannot be removed", ErrInvalid)
	}
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	t, err := s.Template(name)
	if err != nil {
		return err
	}
	return s.remove(fmt.Sprintf("template %q", name), s.templatePath(name), t.Layer, func(sn *Snapshot) bool { return sn.Template == name })
}

// layerReferenced reports whether a template or snapshot refers to the
// layer. Called with the store lock held.
func (s *Store) layerReferenced(digest string) bool {
	ts, _ := listJSON[Template](filepath.Join(s.dir, "templates"))
	for _, t := range ts {
		if t.Layer == digest {
			return true
		}
	}
	sns, _ := s.Snapshots()
	for _, sn := range sns {
		if sn.Layer == digest {
			return true
		}
	}
	return false
}

// Root returns the root filesystem of a sandbox made from template name
// (no snapshot).
func (s *Store) Root(t *Template) *sandbox.RootFS {
	if t.Layer == "" {
		return &sandbox.RootFS{Host: true, Template: HostTemplate}
	}
	return &sandbox.RootFS{Layers: []string{s.layerPath(t.Layer)}, Template: t.Name, User: t.ImageUser}
}

// maxIDFile bounds the passwd and group files read from a tree.
const maxIDFile = 1 << 20

// checkUser resolves user against the tree's etc/passwd and etc/group,
// read beneath tree (its symlinks cannot leave it).
func checkUser(tree, user string) error {
	if user == "" {
		return nil
	}
	r, err := os.OpenRoot(tree)
	if err != nil {
		return err
	}
	defer r.Close()
	read := func(name string) []byte {
		f, err := r.Open(name)
		if err != nil {
			return nil
		}
		defer f.Close()
		if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
			return nil
		}
		b, _ := io.ReadAll(io.LimitReader(f, maxIDFile))
		return b
	}
	_, _, err = sandbox.ResolveImageUser(user, read("etc/passwd"), read("etc/group"))
	return err
}
