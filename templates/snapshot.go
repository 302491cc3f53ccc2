package templates

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/sandbox"
)

// Snapshot is an immutable capture of a sandbox's filesystem changes: one
// layer holding what changed since its parent (a snapshot, or the
// template when Parent is empty).
type Snapshot struct {
	// ID is "snap-" and the first 20 hex digits of Digest.
	ID     string `json:"id"`
	Digest string `json:"digest"`
	// Parent is the snapshot this one is layered on ("" for none).
	Parent string `json:"parent,omitempty"`
	// Template is the template's name; TemplateLayer its layer's digest
	// ("" for the host template).
	Template      string `json:"template"`
	TemplateLayer string `json:"template_layer,omitempty"`
	// Layer is the digest of this snapshot's own layer.
	Layer string `json:"layer"`
	// Sandbox is the sandbox it was taken from; Tenant owns it (a
	// control plane shows a snapshot to its tenant only).
	Sandbox string    `json:"sandbox,omitempty"`
	Tenant  string    `json:"tenant,omitempty"`
	Created time.Time `json:"created"`
	// Bytes, Entries and Whiteouts describe this snapshot's own layer
	// (Bytes: the apparent size of its files, holes of sparse files
	// included); DiskBytes is what the layer costs in the store (its
	// allocated blocks, see fstree.Stats), which counts against its
	// tenant's quota. Depth counts the snapshot layers of the chain, this
	// one included.
	Bytes     int64 `json:"bytes"`
	DiskBytes int64 `json:"disk_bytes"`
	Entries   int   `json:"entries"`
	Whiteouts int   `json:"whiteouts"`
	Depth     int   `json:"depth"`
	// Processes says whether process state was captured (see
	// ProcessState): filesystem snapshots never claim it.
	Processes string `json:"processes"`
}

// Lineage is what a live sandbox's next capture is relative to: the
// snapshot its changes are layered on, and the runtime's mark of the
// export that snapshot was taken by (0 when there was none since the
// sandbox was made: a sandbox fresh from a template or a snapshot; see
// sandbox.DiffOptions.Since). The runtime keeps what it needs to export
// only the changes since that mark. A control plane keeps one per sandbox
// instance (a restored sandbox is a new instance, with a new lineage); it
// is not safe for concurrent use.
type Lineage struct {
	Template      string
	TemplateLayer string
	Parent        string
	depth         int
	since         uint64
}

// NewLineage is the lineage of a sandbox made from template t, or from
// snapshot sn when sn is not nil.
func NewLineage(t *Template, sn *Snapshot) *Lineage {
	if sn != nil {
		return &Lineage{Template: sn.Template, TemplateLayer: sn.TemplateLayer, Parent: sn.ID, depth: sn.Depth}
	}
	return &Lineage{Template: t.Name, TemplateLayer: t.Layer}
}

// Cost is what the snapshot costs in the store, as its tenant's quota
// counts it: DiskBytes, or Bytes for a snapshot stored before DiskBytes
// was recorded.
func (sn *Snapshot) Cost() int64 {
	if sn.DiskBytes == 0 {
		return sn.Bytes
	}
	return sn.DiskBytes
}

// CaptureInfo describes a capture for its metadata.
type CaptureInfo struct {
	Sandbox, Tenant string
	// Processes is the snapshot's Processes (see ProcessState).
	Processes string
	// Limits bound what the capture may write (zero: the runtime's
	// defaults).
	Limits sandbox.DiffLimits
	// Quota caps what the tenant's snapshots together cost in the store
	// (Snapshot.Cost); 0 means no quota. A capture that would pass it
	// fails with ErrQuota and stores nothing.
	Quota int64
}

// TenantUsage is what the snapshots of tenant cost in the store together
// (the sum of their Cost), as a capture's Quota counts it.
func (s *Store) TenantUsage(tenant string) (int64, error) {
	all, err := s.Snapshots()
	if err != nil {
		return 0, err
	}
	var n int64
	for _, sn := range all {
		if sn.Tenant == tenant {
			n += sn.Cost()
		}
	}
	return n, nil
}

// quotaError is the ErrQuota of a capture by tenant, whose snapshots use
// used of quota, that needs need more (0: unknown, the quota is used up;
// partial: it was stopped before its end, need is what was left).
func quotaError(tenant string, used, quota, need int64, partial bool) error {
	what := "its quota is used up"
	if need > 0 {
		what = fmt.Sprintf("this snapshot needs %s more", sizeString(need))
		if partial {
			what = fmt.Sprintf("this snapshot needs more than the %s left", sizeString(need))
		}
	}
	return fmt.Errorf("tenant %q: snapshot store quota: its snapshots use %s of %s and %s; delete snapshots to free space: %w",
		tenant, sizeString(used), sizeString(quota), what, ErrQuota)
}

// sizeString writes a byte count for a person: "12345 bytes (12.1 KiB)".
func sizeString(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d bytes", n)
	}
	v, suffix := float64(n), ""
	for _, s := range []string{"KiB", "MiB", "GiB", "TiB"} {
		if v < unit {
			break
		}
		v, suffix = v/unit, s
	}
	return fmt.Sprintf("%d bytes (%.1f %s)", n, v, suffix)
}

// Capture has the sandbox c export what changed in its root filesystem
// since l's last capture (c pauses its processes meanwhile; see
// sandbox.DiffExporter) into the store's staging area, stores it as a new
// snapshot layered on l.Parent and advances l. A refused or failed capture
// stores nothing and leaves l as it was, so the next capture covers its
// changes too.
func (s *Store) Capture(ctx context.Context, c sandbox.DiffExporter, l *Lineage, info CaptureInfo) (*Snapshot, error) {
	var parent *Snapshot
	if l.Parent != "" {
		p, err := s.Snapshot(l.Parent)
		if err != nil {
			return nil, fmt.Errorf("parent snapshot: %w", err)
		}
		parent = p
	}
	// The quota, before anything is paused or copied (enforced again by
	// the runtime while it writes, and under the store lock at the end).
	limits := info.Limits
	var used int64
	if info.Quota > 0 {
		u, err := s.TenantUsage(info.Tenant)
		if err != nil {
			return nil, err
		}
		used = u
		if used >= info.Quota {
			return nil, quotaError(info.Tenant, used, info.Quota, 0, false)
		}
		if left := info.Quota - used; limits.MaxDiskBytes <= 0 || left < limits.MaxDiskBytes {
			limits.MaxDiskBytes = left
		}
	}
	w, err := s.newWork("snap")
	if err != nil {
		return nil, err
	}
	defer w.done() // a refused or failed capture leaves nothing behind
	tree := filepath.Join(w.dir, "root")
	if err := os.Mkdir(tree, 0o755); err != nil {
		return nil, err
	}
	captured := time.Now().UTC()
	st, err := c.ExportDiff(ctx, tree, sandbox.DiffOptions{Since: l.since, Limits: limits})
	if err != nil {
		if info.Quota > 0 && errors.Is(err, sandbox.ErrDiffDiskLimit) && limits.MaxDiskBytes == info.Quota-used {
			return nil, quotaError(info.Tenant, used, info.Quota, limits.MaxDiskBytes, true)
		}
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	if !validDigest(st.Digest) {
		return nil, fmt.Errorf("snapshot: the runtime's export has digest %q, not sha256:<hex>", st.Digest)
	}
	parentDigest := ""
	if parent != nil {
		parentDigest = parent.Digest
	}
	sum := sha256.Sum256([]byte("moat-snapshot-2\n" + info.Tenant + "\n" + parentDigest + "\n" + l.TemplateLayer + "\n" + st.Digest))
	digest := "sha256:" + hex.EncodeToString(sum[:])
	sn := &Snapshot{
		ID: "snap-" + hex.EncodeToString(sum[:])[:20], Digest: digest, Parent: l.Parent,
		Template: l.Template, TemplateLayer: l.TemplateLayer, Layer: digest, Sandbox: info.Sandbox, Tenant: info.Tenant,
		Created: captured, Bytes: st.Bytes, DiskBytes: st.DiskBytes, Entries: st.Entries, Whiteouts: st.Whiteouts, Depth: l.depth + 1,
		Processes: info.Processes,
	}
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if old, err := s.Snapshot(sn.ID); err == nil {
		sn = old // the same content on the same parent: one snapshot
	} else {
		if info.Quota > 0 {
			// Exact, and atomic with the commit: other captures of the
			// tenant may have ended meanwhile.
			used, err := s.TenantUsage(info.Tenant)
			if err != nil {
				return nil, err
			}
			if sn.Cost() > info.Quota-used {
				return nil, quotaError(info.Tenant, used, info.Quota, sn.Cost(), false)
			}
		}
		if err := s.commitLayer(tree, sn.Layer); err != nil {
			return nil, err
		}
		if err := writeJSON(s.snapshotPath(sn.ID), sn); err != nil {
			return nil, fmt.Errorf("store snapshot: %w", err)
		}
	}
	l.Parent, l.depth, l.since = sn.ID, sn.Depth, st.Mark
	return sn, nil
}

// validDigest accepts "sha256:" and 64 lower-case hex digits.
func validDigest(d string) bool {
	hexPart, ok := strings.CutPrefix(d, "sha256:")
	return ok && len(hexPart) == 64 && isLowerHex(hexPart)
}

// isLowerHex tells whether s is made of lower-case hex digits only.
func isLowerHex(s string) bool {
	for i := range len(s) {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// validSnapshotID accepts "snap-" and 20 lower-case hex digits.
func validSnapshotID(id string) bool {
	hexPart, ok := strings.CutPrefix(id, "snap-")
	return ok && len(hexPart) == 20 && isLowerHex(hexPart)
}

func (s *Store) snapshotPath(id string) string {
	return filepath.Join(s.dir, "snapshots", id+".json")
}

// Snapshot returns the snapshot id.
func (s *Store) Snapshot(id string) (*Snapshot, error) {
	if !validSnapshotID(id) {
		return nil, fmt.Errorf("snapshot %q: %w", id, ErrNotFound)
	}
	return readMeta[Snapshot](s.snapshotPath(id), fmt.Sprintf("snapshot %q", id))
}

// Snapshots lists every snapshot, oldest first.
func (s *Store) Snapshots() ([]*Snapshot, error) {
	sns, err := listJSON[Snapshot](filepath.Join(s.dir, "snapshots"))
	if err != nil {
		return nil, err
	}
	sort.SliceStable(sns, func(i, j int) bool { return sns[i].Created.Before(sns[j].Created) })
	return sns, nil
}

// SnapshotRoot returns the root filesystem of a sandbox started from the
// snapshot: its layer and its ancestors', then the template's.
func (s *Store) SnapshotRoot(sn *Snapshot) (*sandbox.RootFS, error) {
	root := &sandbox.RootFS{Template: sn.Template, Host: sn.TemplateLayer == ""}
	for cur := sn; ; {
		root.Layers = append(root.Layers, s.layerPath(cur.Layer))
		if cur.Parent == "" {
			break
		}
		p, err := s.Snapshot(cur.Parent)
		if err != nil {
			return nil, fmt.Errorf("snapshot %s: parent: %w", cur.ID, err)
		}
		if len(root.Layers) > 128 {
			return nil, fmt.Errorf("snapshot %s: chain longer than 128 layers", sn.ID)
		}
		cur = p
	}
	if sn.TemplateLayer != "" {
		if _, err := os.Stat(s.layerPath(sn.TemplateLayer)); err != nil {
			return nil, fmt.Errorf("snapshot %s: template %s: %w", sn.ID, sn.Template, err)
		}
		root.Layers = append(root.Layers, s.layerPath(sn.TemplateLayer))
		// The template layer is seen as it was when the snapshot was
		// taken: through its template's user (a template is not removed
		// while a snapshot of it exists).
		if t, err := s.Template(sn.Template); err == nil && t.Layer == sn.TemplateLayer {
			root.User = t.ImageUser
		}
	}
	return root, nil
}

// RemoveSnapshot removes a snapshot and its layer. It refuses (ErrInUse)
// while another snapshot is layered on it or a live sandbox uses it.
func (s *Store) RemoveSnapshot(id string) error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	sn, err := s.Snapshot(id)
	if err != nil {
		return err
	}
	return s.remove("snapshot "+id, s.snapshotPath(id), sn.Layer, func(o *Snapshot) bool { return o.Parent == id })
}

// remove deletes the metadata file meta of a template or snapshot (what)
// and, unless something else refers to it, its layer. It refuses
// (ErrInUse) while a snapshot depends on it or a live sandbox holds the
// layer. Called with the store lock held.
func (s *Store) remove(what, meta, layer string, dependent func(*Snapshot) bool) error {
	all, err := s.Snapshots()
	if err != nil {
		return err
	}
	var users []string
	for _, sn := range all {
		if dependent(sn) {
			users = append(users, sn.ID)
		}
	}
	if len(users) > 0 {
		return fmt.Errorf("%s has snapshots layered on it (%s): %w", what, strings.Join(users, ", "), ErrInUse)
	}
	if s.layerInUse(layer) {
		return fmt.Errorf("%s is used by a live sandbox: %w", what, ErrInUse)
	}
	if err := os.Remove(meta); err != nil {
		return err
	}
	if s.layerReferenced(layer) {
		return nil
	}
	return s.removeLayer(layer)
}
