package linux

import (
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/sandbox"
)

// etcLayerVersion changes whenever the layer's content rules change. It
// is part of the layer's name (etc<version>-<hash>): from version 2 on,
// layers are leased (see leaseLayer) and collected when unused.
const etcLayerVersion = "2"

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
			uid, gid, sandbox.HomeDir),
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
	name := "etc" + etcLayerVersion + "-" + contentName("v"+etcLayerVersion, hostname, fmt.Sprint(uid), fmt.Sprint(gid), fmt.Sprint(hostDNS), strings.Join(present, "\x00"))
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
	tmp, err := os.MkdirTemp(parent, tmpPrefix)
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

// Layer leases. The layers under stateDir/etc, stateDir/layers and
// stateDir/locale are keyed by content, and that content includes the
// sandbox's hostname (but the locale layer's), so each distinct hostname
// adds one. A runtime holds a shared flock on each layer its sandboxes
// use (one open descriptor of the layer's directory, counted: see
// layerLocks) until the last of them ends; a layer is removed only by
// whoever takes the lock exclusively, which succeeds only when no
// sandbox, of any moat on the host, uses it.
// flock locks die with their holder, so a crashed moat's layers become
// collectable at once. A collector renames the layer out of the way
// before it deletes it, and a user checks, once it holds its shared lock,
// that the name still refers to the directory it locked; so a layer is
// never removed under a sandbox and never used half-removed.

// layerDirs are the directories of stateDir that hold collectable layers.
var layerDirs = []string{"etc", "layers", localeLayerDir}

// leasedSince maps the name prefix of each kind of layer (etc<version>-…,
// host<version>-…, tmpl<version>-…, locale<version>-…) to the first of its
// versions that every user leases.
var leasedSince = map[string]int{"etc": 2, "host": 2, "tmpl": 2, "locale": 1}

// leased says whether a layer named name is one that every user leases:
// of a version leasedSince lists or later. An older moat uses its layers
// (named differently) without a lease, so those are never collected here:
// they stay until the operator removes them (or a reboot, where /run is a
// tmpfs).
func leased(name string) bool {
	for k, since := range leasedSince {
		rest, ok := strings.CutPrefix(name, k)
		if !ok {
			continue
		}
		v, _, ok := strings.Cut(rest, "-")
		n, err := strconv.Atoi(v)
		return ok && err == nil && n >= since && strconv.Itoa(n) == v
	}
	return false
}

// deadPrefix names a layer being removed; tmpPrefix one being built.
const (
	deadPrefix = ".dead-"
	tmpPrefix  = ".tmp-"
	// tmpMaxAge is the age after which a half-built layer counts as
	// abandoned (its builder died): building one takes milliseconds.
	tmpMaxAge = time.Minute
)

// collectLayer removes parent/name if no sandbox holds it; false if it is
// in use (or gone).
func collectLayer(parent, name string) bool {
	dfd, err := unix.Open(parent, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
		return false // in use
	}
	var a, b unix.Stat_t
	if unix.Fstat(fd, &a) != nil || unix.Fstatat(dfd, name, &b, unix.AT_SYMLINK_NOFOLLOW) != nil || a.Dev != b.Dev || a.Ino != b.Ino {
		return false // replaced since we opened it
	}
	// Out of the way first: from here on nobody can find it by its name,
	// and a user that opened it before checks the name and retries.
	dead := deadPrefix + name + "-" + strconv.FormatUint(rand.Uint64(), 36)
	if unix.Renameat(dfd, name, dfd, dead) != nil {
		return false
	}
	removeBeneath(dfd, dead)
	return true
}

// removeBeneath removes name in the directory parentFD and everything in
// it, through directory descriptors, never following a symlink (a layer
// holds none, but nothing here trusts that). Depth is bounded.
func removeBeneath(parentFD int, name string) {
	removeAt(parentFD, name, 0)
}

func removeAt(dirfd int, name string, level int) {
	if unix.Unlinkat(dirfd, name, 0) == nil || level > 32 {
		return
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), name)
	names, _ := f.Readdirnames(-1)
	for _, n := range names {
		removeAt(fd, n, level+1)
	}
	f.Close()
	_ = unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
}

// collectLayers removes every layer of stateDir no sandbox uses, and the
// remains of removals and builds cut short. It returns how many layers it
// removed.
func collectLayers(stateDir string) int {
	n := 0
	for _, d := range layerDirs {
		parent := filepath.Join(stateDir, d)
		ents, err := os.ReadDir(parent)
		if err != nil {
			continue
		}
		for _, e := range ents {
			name := e.Name()
			switch {
			case !e.IsDir():
			case strings.HasPrefix(name, deadPrefix):
				if dfd, err := unix.Open(parent, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
					removeBeneath(dfd, name)
					unix.Close(dfd)
				}
			case strings.HasPrefix(name, tmpPrefix):
				if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > tmpMaxAge {
					if dfd, err := unix.Open(parent, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
						removeBeneath(dfd, name)
						unix.Close(dfd)
					}
				}
			case !leased(name):
			case collectLayer(parent, name):
				n++
			}
		}
	}
	return n
}
