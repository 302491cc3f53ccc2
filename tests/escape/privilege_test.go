//go:build linux

package escape

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testutil"
)

// TestPrivilege: docs/THREAT-MODEL.md "privilege" row. Inside: no_new_privs, no
// capabilities, a setuid-root binary gives no root, and new user
// namespaces, mount, unshare, setns, pivot_root and chroot are denied.
func TestPrivilege(t *testing.T) {
	testutil.RequireRoot(t)
	t.Run("no_new_privs and no capabilities", func(t *testing.T) {
		in := inside(t, nil, A("ids"))[0]
		works(t, in)
		st := in.strMap("status")
		if st["NoNewPrivs"] != "1" {
			t.Errorf("ESCAPE: NoNewPrivs = %q inside, want 1", st["NoNewPrivs"])
		}
		for _, c := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
			if strings.Trim(st[c], "0") != "" || st[c] == "" {
				t.Errorf("ESCAPE: %s = %q inside, want all zero", c, st[c])
			}
		}
		if st["Uid"] != "1000 1000 1000 1000" || st["Gid"] != "1000 1000 1000 1000" {
			t.Errorf("inside: Uid %q Gid %q, want the sandbox user 1000 everywhere", st["Uid"], st["Gid"])
		}
		// Control: the same report outside shows what it looks like
		// when the protections are absent.
		out := outside(t, asNobody, A("ids"))[0]
		works(t, out)
		if out.strMap("status")["NoNewPrivs"] != "0" {
			t.Errorf("control: NoNewPrivs outside = %q, want 0", out.strMap("status")["NoNewPrivs"])
		}
		if root := outside(t, asRoot, A("ids"))[0]; strings.Trim(root.strMap("status")["CapEff"], "0") == "" {
			t.Errorf("control: root outside has no effective capabilities: %v", root.Values)
		}
	})

	t.Run("setuid-root binaries", func(t *testing.T) {
		// A setuid-root copy of the probe (which, when setuid, only
		// reports its ids) in a directory owned by nobody, group-
		// executable by nogroup only: nobody outside and, through the
		// idmapped bind, the sandbox user inside may run it.
		dir := filepath.Join(openDir(t), "suid")
		mkdirs(t, dir)
		chown(t, nobody, dir)
		if err := os.Chmod(dir, 0o750); err != nil {
			t.Fatal(err)
		}
		suid := filepath.Join(dir, "probe-suid")
		copyFile(t, probeBin(t), suid)
		if err := os.Chown(suid, 0, nobody); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(suid, os.ModeSetuid|0o750); err != nil {
			t.Fatal(err)
		}
		atts := func(suidPath string) []attempt {
			return []attempt{
				A("exec-ids", suidPath, "ids"),
				A("exec-ids", "/usr/bin/passwd", "--help"),
				A("exec-ids", "/bin/su", "--help"),
			}
		}
		// The same binary inside, once through a read-only bind and once
		// in the (writable, nosuid) workspace.
		in := inside(t, []string{"--ro", dir + ":/opt/suid"}, atts("/opt/suid/probe-suid")...)
		in = append(in, inside(t, []string{"-w", dir}, A("exec-ids", "/workspace/probe-suid", "ids"))[0])
		out := outside(t, asNobody, append(atts(suid), A("exec-ids", suid, "ids"))...)
		for i := range in {
			if !in[i].OK {
				if strings.Contains(in[i].Err, "no such file") {
					t.Logf("%s: not on this host", in[i])
					continue
				}
				t.Errorf("inside: %s: could not run it at all, so the test shows nothing", in[i])
				continue
			}
			if e := in[i].str("euid"); e != "1000" {
				t.Errorf("ESCAPE: %s inside gave euid %s (%s)", in[i].Args[0], e, in[i].Detail)
			}
			if ce := in[i].strMap("status")["CapEff"]; strings.Trim(ce, "0") != "" {
				t.Errorf("ESCAPE: %s inside gave capabilities %s", in[i].Args[0], ce)
			}
			works(t, out[i])
			if e := out[i].str("euid"); e != "0" {
				t.Errorf("control: %s run by nobody outside has euid %s, want 0", out[i].Args[0], e)
			}
			t.Logf("%s: inside %s; outside as nobody %s", in[i].Args[0], in[i].Detail, out[i].Detail)
		}
	})

	t.Run("credentials", func(t *testing.T) {
		atts := []attempt{A("setuid", "0"), A("setgid", "0"), A("setgroups0"), A("capset-all")}
		in := inside(t, nil, atts...)
		// Control: root of a throwaway user namespace may do all of
		// these; the sandbox's processes may not.
		out := outside(t, inUserNS, atts...)
		for i := range atts {
			denied(t, in[i], "EPERM")
			works(t, out[i])
		}
	})

	t.Run("namespaces", func(t *testing.T) {
		atts := []attempt{
			A("clone", "newuser"), A("clone", "newns"), A("clone", "newnet"), A("clone", "newpid"),
			A("clone", "newuts"), A("clone", "newipc"), A("clone", "newcgroup"),
			A("clone3", "newuser"), A("clone3", "0"),
			A("unshare", "newuser"), A("unshare", "newns"), A("unshare", "newnet"), A("unshare", "newpid"),
			A("unshare", "newuts"), A("unshare", "newipc"), A("unshare", "newcgroup"), A("unshare", "newtime"),
			A("setns", "/proc/self/ns/uts", "newuts"), A("setns", "/proc/self/ns/mnt", "newns"),
			A("setns-pidfd", "self", "newuts"),
		}
		in := inside(t, nil, append(atts, A("setns-pidfd", "1", "newns|newuts|newnet"))...)
		out := outside(t, inUserNS, atts...)
		for i, a := range atts {
			want := []string{"EPERM"}
			if a[0] == "clone3" {
				// clone3's flags are out of the filter's reach: it
				// answers ENOSYS for all of clone3 so that callers fall
				// back to clone, whose flags it checks.
				want = []string{"ENOSYS"}
			}
			denied(t, in[i], want...)
			works(t, out[i])
			t.Logf("inside: %s; outside in a user namespace: %s", in[i], out[i])
		}
		// Joining the namespaces of the sandbox's init has no outside
		// counterpart worth running: it would be our own namespaces.
		denied(t, in[len(atts)], "EPERM", "EACCES")
	})

	t.Run("mount, pivot_root, chroot, sethostname", func(t *testing.T) {
		in := inside(t, nil,
			A("mount-tmpfs", "/tmp"),
			A("umount", "/proc/kcore"), // would unmask the kernel's memory
			A("umount", "/proc/sys"),   // would make /proc/sys writable
			A("umount", "/etc"),
			A("fsopen"),
			A("open-tree", "/usr"),
			A("mount-setattr", "/"), // clear read-only on the root
			A("mount-setattr", "/usr"),
			A("move-mount", "/tmp", "/workspace"),
			A("chroot", "/tmp"),
			A("sethostname", "moat-escaped"),
			A("pivot-root", "/tmp"),
		)
		for _, o := range in {
			denied(t, o, "EPERM")
		}
		// Control: in a throwaway user and mount namespace, on
		// directories of our own; the same calls work.
		base := openDir(t)
		d1, d2 := filepath.Join(base, "m1"), filepath.Join(base, "m2")
		mkdirs(t, d1, d2)
		chown(t, nobody, d1, d2)
		out := outside(t, inUserNS,
			A("mount-tmpfs", d1),
			A("umount", d1),
			A("mount-tmpfs", d1),
			A("fsopen"),
			A("open-tree", d1),
			A("mount-setattr", d1),
			A("move-mount", d1, d2),
			A("umount", d2),
			A("chroot", base),
			A("sethostname", "moat-escape-control"),
			A("mount-tmpfs", d1),
			A("pivot-root", d1),
		)
		for _, o := range out {
			works(t, o)
		}
		host, _ := os.Hostname()
		if host == "moat-escaped" || host == "moat-escape-control" {
			t.Errorf("the host's hostname changed to %q", host)
		}
	})
}

func copyFile(t testing.TB, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
