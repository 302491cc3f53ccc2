package compile

import "testing"

func TestMountinfo(t *testing.T) {
	if got := unescape(`/mnt/a\040b\134c`); got != `/mnt/a b\c` {
		t.Errorf("unescape = %q", got)
	}
	mi := mountinfo{{"/", "ext4"}, {"/proc", "proc"}, {"/srv/nfs", "nfs4"}, {"/var/cache", "tmpfs"}}
	for p, want := range map[string]bool{"/home": true, "/var": true, "/srv": false, "/srv/nfs/x": false, "/proc": false, "/srv/other": true} {
		if mi.idmappable(p) != want {
			t.Errorf("idmappable(%s) != %v", p, want)
		}
	}
}
