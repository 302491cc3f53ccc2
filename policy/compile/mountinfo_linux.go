package compile

import (
	"bufio"
	"os"
	"strings"
)

// idmapFS are filesystems that support idmapped mounts on the kernels
// moat supports (5.12+ for these, tmpfs since 6.3).
var idmapFS = map[string]bool{"ext4": true, "xfs": true, "btrfs": true, "f2fs": true, "tmpfs": true, "vfat": true}

type mountinfo []struct{ point, fstype string }

// readMountinfo reads the mount table of this process's mount namespace.
func readMountinfo() mountinfo {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var mi mountinfo
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root point options [optional...] - fstype source super
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+1 >= len(fields) {
			continue
		}
		mi = append(mi, struct{ point, fstype string }{unescape(fields[4]), fields[sep+1]})
	}
	return mi
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			n := 0
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				n = n*8 + int(c-'0')
			}
			if ok {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// idmappable says whether p's filesystem and every one mounted below it
// support idmapped mounts (a bind of p is a recursive idmapped clone).
func (mi mountinfo) idmappable(p string) bool {
	best, fstype := "", ""
	for _, m := range mi {
		if within(p, m.point) && len(m.point) >= len(best) {
			best, fstype = m.point, m.fstype
		}
		if m.point != p && within(m.point, p) && !idmapFS[m.fstype] {
			return false
		}
	}
	return idmapFS[fstype]
}
