package linux

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestCallAccounting: a call of a long-lived sandbox reads only the OOM
// count of the sandbox's cgroup (its CPU time and peak memory come from
// the process's rusage), so it succeeds where the memory and CPU usage
// files are missing; a one-shot sandbox's call reads the whole usage.
// It also checks the plain-syscall reads of cgroup files: a file larger
// than the first read's buffer is read whole.
func TestCallAccounting(t *testing.T) {
	mem := t.TempDir()
	cpu := t.TempDir()
	// Padding before the key: the file outgrows readCgroupFile's first
	// 512-byte buffer.
	pad := make([]byte, 0, 2048)
	for len(pad) < 1500 {
		pad = append(pad, "padding_key 0\n"...)
	}
	oom := append(pad, "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"...)
	if err := os.WriteFile(filepath.Join(mem, "memory.oom_control"), oom, 0o644); err != nil {
		t.Fatal(err)
	}
	cg := &sandboxCgroup{paths: map[string]string{"memory": mem, "cpuacct": cpu}}

	long := &call{s: &linuxSandbox{cg: cg}}
	u := long.accounting()
	if u.oomError != nil || u.oomKills != 3 {
		t.Fatalf("long-lived: oom kills %d, %v; want 3, nil", u.oomKills, u.oomError)
	}
	if !errors.Is(u.statsErr, errNotRead) {
		t.Errorf("long-lived: stats error %v, want errNotRead", u.statsErr)
	}

	oneShot := &call{s: &linuxSandbox{cg: cg, oneShot: true}}
	if u := oneShot.accounting(); u.statsErr == nil || u.oomKills != 3 {
		t.Errorf("one-shot without usage files: stats error %v, oom kills %d; want an error, 3", u.statsErr, u.oomKills)
	}
	if err := os.WriteFile(filepath.Join(mem, "memory.max_usage_in_bytes"), []byte("4096\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cpu, "cpuacct.stat"), []byte("user 12\nsystem 7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	u = oneShot.accounting()
	if u.statsErr != nil || u.peakMemory != 4096 || u.userNs != 120e6 || u.sysNs != 70e6 || u.oomKills != 3 {
		t.Errorf("one-shot: %+v", u)
	}

	none := &call{s: &linuxSandbox{}}
	if u := none.accounting(); u.oomKills != 0 || u.oomError == nil {
		t.Errorf("no cgroup: %+v", u)
	}
}
