package linux

import (
	"syscall"
	"testing"

	"github.com/moat-sandbox/moat/sandbox"
)

// TestSwapIDMap: the template layer's map swaps the template's user and
// the sandbox user and maps every other id of 0–65535 to itself, on the
// sandbox's host range; without a swap it is the sandbox's own map.
func TestSwapIDMap(t *testing.T) {
	const base = 1 << 30
	apply := func(m []syscall.SysProcIDMap, id uint32) (uint32, bool) {
		for _, r := range m {
			if id >= uint32(r.ContainerID) && id < uint32(r.ContainerID+r.Size) {
				return uint32(r.HostID) + id - uint32(r.ContainerID), true
			}
		}
		return 0, false
	}
	for _, u := range []uint32{0, 1, 999, 1000, 1001, 65534, 65535} {
		m := swapIDMap(base, u, sandbox.UID)
		if len(m) > 5 {
			t.Fatalf("user %d: %d ranges", u, len(m))
		}
		seen := map[uint32]bool{}
		for id := uint32(0); id < uidsPer; id++ {
			h, ok := apply(m, id)
			if !ok || seen[h] || h < base || h >= base+uidsPer {
				t.Fatalf("user %d: id %d maps to %d (%v), twice or outside the range", u, id, h, ok)
			}
			seen[h] = true
			want := base + id
			switch id {
			case u:
				want = base + sandbox.UID
			case sandbox.UID:
				want = base + u
			}
			if h != want {
				t.Fatalf("user %d: id %d maps to %d, want %d", u, id, h, want)
			}
		}
	}
	tu := &templateUser{uid: 0, gid: 0}
	if u, g := tu.seen(0, 0); u != sandbox.UID || g != sandbox.GID || !tu.swaps() {
		t.Errorf("root's files appear as %d:%d", u, g)
	}
	if u, g := tu.seen(500, 1000); u != 500 || g != 0 {
		t.Errorf("500:1000 appears as %d:%d", u, g)
	}
	if (&templateUser{uid: sandbox.UID, gid: sandbox.GID}).swaps() {
		t.Error("a template whose user is 1000:1000 needs an idmap of its own")
	}
}
