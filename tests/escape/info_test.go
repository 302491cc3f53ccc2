//go:build linux

package escape

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testutil"
)

// TestInformation: docs/THREAT-MODEL.md "information" row. The sandbox sees its
// own hostname, only its own processes, none of the host's environment,
// none of the host's mounts, and no kernel log.
func TestInformation(t *testing.T) {
	testutil.RequireRoot(t)
	t.Run("hostname", func(t *testing.T) {
		in := inside(t, nil, A("hostname"), A("read", "/etc/hostname"))
		if in[0].str("nodename") != "sandbox" {
			t.Errorf("ESCAPE: hostname inside is %q, want sandbox", in[0].str("nodename"))
		}
		host, err := os.Hostname()
		if err != nil {
			t.Fatal(err)
		}
		out := outside(t, asNobody, A("hostname"))[0]
		if out.str("nodename") != host {
			t.Errorf("control: probe reports %q outside, hostname is %q", out.str("nodename"), host)
		}
		if host == "sandbox" {
			t.Logf("the host is called sandbox too: the comparison proves nothing here")
		} else if strings.Contains(in[0].str("domainname"), host) {
			t.Errorf("ESCAPE: the host's name appears inside: %v", in[0].Values)
		}
	})

	t.Run("host processes", func(t *testing.T) {
		canary := "moat-escape-canary-" + randomToken(t)
		startBlocker(t, asNobody, canary)
		in := inside(t, nil, A("pids"))[0]
		works(t, in)
		cmds := in.strMap("cmdlines")
		for pid, cmd := range cmds {
			if strings.Contains(cmd, canary) || strings.Contains(cmd, filepath.Base(os.Args[0])) {
				t.Errorf("ESCAPE: host process visible inside as pid %s: %q", pid, cmd)
			}
			if cmd != "moat __moat_init" && !strings.HasPrefix(cmd, probeTarget) {
				t.Errorf("ESCAPE?: unexpected process inside, pid %s: %q", pid, cmd)
			}
		}
		if pids := in.ints("pids"); len(pids) > 8 || !slices.Contains(pids, 1) {
			t.Errorf("ESCAPE?: processes inside: %v", pids)
		}
		// Control: the same listing outside finds the canary.
		out := outside(t, asNobody, A("pids"))[0]
		found := false
		for _, cmd := range out.strMap("cmdlines") {
			found = found || strings.Contains(cmd, canary)
		}
		if !found {
			t.Errorf("control: the canary process is not visible outside")
		}
	})

	t.Run("host environment", func(t *testing.T) {
		canary := "MOAT_ESCAPE_CANARY=" + randomToken(t)
		in := insideWith(t, moatOpts{env: []string{canary, "AWS_SECRET_ACCESS_KEY=" + randomToken(t)}}, A("env"))[0]
		works(t, in)
		// The keys docs/DESIGN.md says a sandbox gets, plus the identity
		// variables of its user.
		injected := []string{"PATH", "HOME", "TMPDIR", "NO_COLOR", "TERM", "LANG", "PAGER", "GIT_PAGER",
			"USER", "LOGNAME", "SHELL"}
		for _, kv := range in.strs("env") {
			k, _, _ := strings.Cut(kv, "=")
			if !slices.Contains(injected, k) {
				t.Errorf("ESCAPE: variable %q inside, not one moat injects", kv)
			}
			if kv == canary {
				t.Errorf("ESCAPE: host variable %s inside", kv)
			}
		}
		out := outsideWith(t, outOpts{who: asNobody, env: []string{canary}}, A("env"))[0]
		if !slices.Contains(out.strs("env"), canary) {
			t.Errorf("control: the canary variable is not seen outside: %v", out.strs("env"))
		}
	})

	t.Run("host mounts", func(t *testing.T) {
		ws := filepath.Join(openDir(t), "ws")
		mkdirs(t, ws)
		in := inside(t, []string{"-w", ws}, A("mounts"))[0]
		works(t, in)
		hostOnly := []string{"/home", "/root", "/run", "/var", "/srv", "/mnt", "/media", "/boot", "/sys",
			"/work", "/opt", "/snap", "/nix"}
		for _, p := range in.strs("points") {
			if slices.Contains(hostOnly, p) {
				t.Errorf("ESCAPE: host mount point %s inside", p)
			}
		}
		mounts := in.str("mounts")
		for _, s := range []string{ws, filepath.Dir(ws), " /root ", " /home ", " /run ", " /sys "} {
			if strings.Contains(mounts, s) {
				t.Errorf("ESCAPE: /proc/self/mounts inside mentions %q:\n%s", s, mounts)
			}
		}
		for _, s := range in.strs("sources") {
			if strings.HasPrefix(s, "/tmp/") || strings.HasPrefix(s, "/home/") || strings.HasPrefix(s, "/root") {
				t.Errorf("ESCAPE: mount source %q inside", s)
			}
		}
		// The root field of a bind mount is the bound directory's path
		// within its filesystem, so mountinfo names the host paths of
		// the workspace and the binds: logged, see the report.
		for i, r := range in.strs("roots") {
			if strings.HasPrefix(r, "/tmp/") || strings.HasPrefix(r, "/home/") || strings.HasPrefix(r, "/root") {
				t.Logf("note: /proc/self/mountinfo inside gives the host path %s as the root of %s", r, in.strs("points")[i])
			}
		}
		// Control: the host's own table has mount points the sandbox
		// does not.
		out := outside(t, asNobody, A("mounts"))[0]
		extra := 0
		for _, p := range out.strs("points") {
			if !slices.Contains(in.strs("points"), p) {
				extra++
			}
		}
		if extra == 0 {
			t.Errorf("control: the host's mount table looks like the sandbox's")
		}
	})

	t.Run("kernel log", func(t *testing.T) {
		in := inside(t, nil,
			A("syslog", "3"),  // SYSLOG_ACTION_READ_ALL
			A("syslog", "10"), // SYSLOG_ACTION_SIZE_BUFFER
			A("stat", "/dev/kmsg"),
			A("read", "/proc/kmsg"),
			A("read", "/proc/kallsyms"),
			A("read", "/proc/keys"),
			A("read", "/proc/timer_list"),
		)
		denied(t, in[0], "EPERM")
		denied(t, in[1], "EPERM")
		denied(t, in[2], "ENOENT")
		for _, o := range in[3:] {
			if o.OK && o.str("size") != "0" {
				t.Errorf("ESCAPE: %s inside read %s bytes, want an empty mask", o, o.str("size"))
			}
		}
		// Control: root may ask the kernel log's size (a read that
		// consumes nothing; /proc/kmsg, which would, is never read
		// outside), /dev/kmsg exists, and the masked files have
		// content outside.
		out := outside(t, asRoot, A("syslog", "10"), A("stat", "/dev/kmsg"))
		works(t, out[0])
		works(t, out[1])
		for _, o := range outside(t, asNobody, A("read", "/proc/kallsyms"), A("read", "/proc/timer_list")) {
			if o.OK && o.str("size") == "0" {
				t.Errorf("control: %s is empty outside too", o)
			}
		}
	})
}
