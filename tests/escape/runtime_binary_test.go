//go:build linux

package escape

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/moat-sandbox/moat/internal/testutil"
)

// startBlocker starts the probe as w outside any sandbox, blocked on its
// stdin, as a target for the outside controls; it is killed at cleanup.
func startBlocker(t *testing.T, w who, args ...string) int {
	t.Helper()
	return startBlockerBin(t, probeBin(t), w, args...)
}

// startBlockerBin is startBlocker running bin, a copy of the probe.
func startBlockerBin(t *testing.T, bin string, w who, args ...string) int {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"block"}, args...)...)
	cmd.SysProcAttr = sysAttr(w)
	cmd.Dir = "/"
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd.Process.Pid
}

// TestRuntimeBinary: docs/THREAT-MODEL.md "runtime binary" row (the CVE-2019-5736
// class). The sandbox's pid 1 is the moat binary; none of the ways to reach
// it through /proc (exe, mem, fd, root, environ, ptrace, process_vm) work
// from inside, the moat binary cannot be written even where it is visible,
// and a "#!/proc/self/exe" script does not get the runtime binary executed
// inside the sandbox. The moat binary is unchanged afterwards.
func TestRuntimeBinary(t *testing.T) {
	testutil.RequireRoot(t)
	moatPath := moatBin(t)
	moatDir := filepath.Dir(moatPath)
	before := snap(t, moatPath, probeBin(t))
	defer before.unchanged(t)

	// procAttempts are the /proc attacks on process pid.
	procAttempts := func(pid string) []attempt {
		p := "/proc/" + pid
		return []attempt{
			A("readlink", p+"/exe"),
			A("open", p+"/exe", "r"),
			A("open", p+"/exe", "path"),
			A("open", p+"/exe", "w"),
			A("open", p+"/mem", "r"),
			A("ls", p+"/fd"),
			A("ls", p+"/root"),
			A("ls", p+"/cwd"),
			A("read", p+"/environ"),
			A("ptrace-attach", pid),
			A("ptrace-seize", pid),
			A("pvm-read", pid),
			A("pvm-write", pid),
			A("kill", pid, "0"),
		}
	}

	t.Run("pid 1 through /proc", func(t *testing.T) {
		in := inside(t, nil, append(procAttempts("1"),
			A("open", "/proc/1/fd/3", "path"), // the init's control socket
			A("setns-pidfd", "1", "newns"),
		)...)
		for _, o := range in {
			denied(t, o, "EACCES", "EPERM")
		}
		// Control: the same attacks on an ordinary process of the same
		// uid outside work (or, for write, fail only on the kernel's
		// own rule against writing a running binary; for
		// process_vm, only on the deliberately unmapped address).
		// The target runs a copy of the probe that nobody owns, so that
		// only the kernel's rule against writing a running binary
		// (ETXTBSY) stands between nobody and "open exe for write".
		own := filepath.Join(openDir(t), "probe-own")
		copyFile(t, probeBin(t), own)
		chown(t, nobody, own)
		pid := strconv.Itoa(startBlockerBin(t, own, asNobody))
		out := outside(t, asNobody, procAttempts(pid)...)
		for i, o := range out {
			switch o.Op + " " + o.Args[len(o.Args)-1] {
			case "open w":
				if o.Errno != "ETXTBSY" {
					works(t, o)
				}
			case "pvm-read " + pid, "pvm-write " + pid:
				reached(t, o, "EPERM", "EACCES")
			default:
				works(t, o)
			}
			t.Logf("inside: %s; outside as nobody on a sibling: %s", in[i], o)
		}
	})

	t.Run("write the moat binary", func(t *testing.T) {
		// The runtime binary is not in the sandbox at all; bound
		// read-only it is visible and still not writable. No outside
		// control: writing the runtime binary outside would prove only
		// that root can destroy it.
		in := inside(t, []string{"--ro", moatDir + ":/opt/moat"},
			A("open", moatPath, "w"),
			A("write", "/opt/moat/"+filepath.Base(moatPath), "x"),
			A("reopen-write", "/opt/moat/"+filepath.Base(moatPath), "x"),
			A("truncate", "/opt/moat/"+filepath.Base(moatPath)),
			A("rename", "/opt/moat/"+filepath.Base(moatPath), "/opt/moat/x"),
			A("unlink", "/opt/moat/"+filepath.Base(moatPath)),
			A("write", "/proc/self/exe", "x"),
			A("reopen-write", "/proc/self/exe", "x"),
		)
		for _, o := range in {
			denied(t, o)
		}
	})

	t.Run("#!/proc/self/exe", func(t *testing.T) {
		ws := openDir(t)
		writeFile(t, filepath.Join(ws, "self"), "#!/proc/self/exe\n", 0o755)
		writeFile(t, filepath.Join(ws, "init"), "#!/proc/1/exe\n", 0o755)
		// The agent (a fork of the moat init until its execve) runs the
		// script: /proc/self/exe of that child is the moat binary.
		for _, s := range []string{"self", "init"} {
			res := moat(t, moatOpts{flags: []string{"-w", ws}, noProbe: true}, "/workspace/"+s)
			if res.ExitCode != 126 {
				t.Errorf("ESCAPE?: #!/proc/%s/exe run by the sandbox's agent: exit %d (%s) %s stdout %q stderr %q; "+
					"want 126 (the runtime binary must not be executable inside)",
					map[string]string{"self": "self", "init": "1"}[s], res.ExitCode, res.ExitReason, res.Error, res.Stdout, res.Stderr)
			}
		}
		// Control: outside, the interpreter resolves to the binary of
		// the process that executes the script.
		out := outside(t, asNobody, A("exec-ids", filepath.Join(ws, "self")))[0]
		works(t, out)
		if out.str("exe") != probeBin(t) {
			t.Errorf("control: #!/proc/self/exe ran %q, want the caller's own binary %q", out.str("exe"), probeBin(t))
		}
	})
}
