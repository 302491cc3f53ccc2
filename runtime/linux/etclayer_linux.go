package linux

import (
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// etcLayerVersion changes whenever the layer's content rules change.
const etcLayerVersion = "1"

// etcHidden are host /etc entries that never appear inside a sandbox, even
// though the uid mapping already makes non-world-readable ones unreadable.
var etcHidden = []string{
	"shadow", "shadow-", "gshadow", "gshadow-", "passwd-", "group-",
	"sudoers", "sudoers.d", "ssh", "ssl/private", "subuid", "subuid-",
	"subgid", "subgid-", "machine-id", "security/opasswd", ".pwd.lock",
	"krb5.keytab", "ppp", "wireguard", "NetworkManager/system-connections",
	"docker", "containerd", "moat", "mtab", "fstab", "crypttab",
}

// etcFiles returns the identity files every sandbox sees instead of the
// host's.
func etcFiles(hostname string, uid, gid int) map[string]string {
	return map[string]string{
		"passwd": fmt.Sprintf("root:x:0:0:root:/root:/bin/sh\nsandbox:x:%d:%d:sandbox:%s:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
			uid, gid, homeDir),
		"group":       fmt.Sprintf("root:x:0:\ntty:x:5:\nsandbox:x:%d:\nnogroup:x:65534:\n", gid),
		"hostname":    hostname + "\n",
		"hosts":       "127.0.0.1\tlocalhost " + hostname + "\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"resolv.conf": "# moat: no DNS resolver is reachable from this sandbox\n",
	}
}

// etcLayer returns a directory that, stacked over the host's /etc as an
// overlayfs lower layer, replaces the identity files and whites out every
// hidden entry that exists on the host. Layers are built once per distinct
// content under stateDir/etc and shared by all sandboxes: the sandbox's
// init only mounts the overlay.
//
// hostDNS (network mode open) keeps the host's resolv.conf: such a sandbox
// shares the host's network and resolves as the host does. Otherwise the
// layer's resolv.conf names no resolver; there is none to reach.
func etcLayer(stateDir, hostname string, uid, gid int, hostDNS bool) (string, error) {
	var present []string
	for _, name := range etcHidden {
		if _, err := os.Lstat("/etc/" + name); err == nil {
			present = append(present, name)
		}
	}
	files := etcFiles(hostname, uid, gid)
	if hostDNS {
		delete(files, "resolv.conf")
	}
	name := contentName("v"+etcLayerVersion, hostname, fmt.Sprint(uid), fmt.Sprint(gid), fmt.Sprint(hostDNS), strings.Join(present, "\x00"))
	return buildOnce(filepath.Join(stateDir, "etc"), name, func(tmp string) error {
		for name, content := range files {
			if err := os.WriteFile(filepath.Join(tmp, name), []byte(content), 0o644); err != nil {
				return err
			}
		}
		for _, name := range present {
			p := filepath.Join(tmp, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			// A 0/0 character device is an overlayfs whiteout.
			if err := unix.Mknod(p, unix.S_IFCHR, 0); err != nil {
				return fmt.Errorf("whiteout %s: %w", name, err)
			}
		}
		return nil
	})
}

// contentName names content by a hash of its parts. A name, not a security
// boundary: FNV keeps crypto out of the start-up path of every moat process.
func contentName(parts ...string) string {
	h := fnv.New128a()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s\x00", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// buildOnce returns parent/name, first building it if it does not exist:
// build fills a temporary directory (mode 0755) that is then renamed into
// place, so a half-built directory is never used and concurrent builders
// agree. The init resolves parent/name as an unprivileged host uid: every
// directory on the way is searchable, nothing in them is writable.
func buildOnce(parent, name string, build func(dir string) error) (string, error) {
	dir := filepath.Join(parent, name)
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(parent, 0o711); err != nil {
		return "", err
	}
	if err := os.Chmod(filepath.Dir(parent), 0o711); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(parent, ".tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	if err := build(tmp); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		// Another moat built the same directory first.
		if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) {
			return dir, nil
		}
		return "", err
	}
	return dir, nil
}
