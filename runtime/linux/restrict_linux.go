package linux

import (
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/guest"
	"github.com/moat-sandbox/moat/sandbox"
)

// Restrictions (sandbox.Spec.Restrict) narrow paths of the built root with
// mounts, so the kernel enforces them inside writable mounts where
// Landlock, which can only grant, cannot:
//
//   - hide: an empty directory or file of the init's private "hide" tmpfs
//     (mode 000, owned by the sandbox's root, read-only, nosuid, nodev,
//     noexec) is bound over the path; the sandbox user gets EACCES.
//   - read-only: the path's own mount subtree is cloned, made read-only
//     (recursively; its idmap and nosuid/nodev kept) and mounted onto the
//     same path.
//   - pin: the same clone, left writable.
//
// In every mode the path becomes a mount point, which the kernel refuses to
// rename, remove or replace (EBUSY). Its parent directory is not a mount
// point unless pinned too: moving the parent away moves the restricted
// entry with it, still restricted.

// maxRestrictions bounds Spec.Restrict: each entry is one mount in the
// sandbox's namespace.
const maxRestrictions = 4096

// reservedRestrict may not be restricted: the sandbox's masked /proc and
// its device nodes, and the root itself.
var reservedRestrict = []string{"/proc", "/dev"}

// validateRestrictions checks spec.Restrict on the host, before anything
// is created: absolute clean paths, known modes, each path once.
func validateRestrictions(rs []sandbox.Restriction) error {
	if len(rs) > maxRestrictions {
		return fmt.Errorf("%w: %d restrictions (at most %d)", sandbox.ErrInvalidSpec, len(rs), maxRestrictions)
	}
	seen := make(map[string]bool, len(rs))
	for _, r := range rs {
		p := r.Path
		switch {
		case !filepath.IsAbs(p):
			return fmt.Errorf("%w: restricted path %q is not absolute", sandbox.ErrInvalidSpec, p)
		case filepath.Clean(p) != p || strings.ContainsRune(p, 0) || len(p) >= unix.PathMax:
			return fmt.Errorf("%w: restricted path %q is not a clean path", sandbox.ErrInvalidSpec, p)
		case p == "/":
			return fmt.Errorf("%w: the root cannot be restricted", sandbox.ErrInvalidSpec)
		}
		for _, res := range reservedRestrict {
			if p == res || strings.HasPrefix(p, res+"/") {
				return fmt.Errorf("%w: restricted path %q is under the reserved %s", sandbox.ErrInvalidSpec, p, res)
			}
		}
		switch r.Mode {
		case sandbox.Hide, sandbox.ReadOnly, sandbox.Pin:
		default:
			return fmt.Errorf("%w: restriction of %q: unknown mode %q (want %q, %q or %q)",
				sandbox.ErrInvalidSpec, p, r.Mode, sandbox.Hide, sandbox.ReadOnly, sandbox.Pin)
		}
		if seen[p] {
			return fmt.Errorf("%w: %q is restricted twice", sandbox.ErrInvalidSpec, p)
		}
		seen[p] = true
	}
	return nil
}

// guestRestrictions turns validated restrictions into their wire form.
func guestRestrictions(rs []sandbox.Restriction) []guest.Restriction {
	if len(rs) == 0 {
		return nil
	}
	out := make([]guest.Restriction, len(rs))
	for i, r := range rs {
		out[i] = guest.Restriction{Path: r.Path, Mode: string(r.Mode)}
	}
	return out
}
