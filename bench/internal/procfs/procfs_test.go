package procfs

import (
	"os"
	"os/exec"
	"slices"
	"testing"
)

func TestDescendantsAndMemory(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if got := Descendants(os.Getpid()); !slices.Contains(got, cmd.Process.Pid) {
		t.Errorf("Descendants(self) = %v, lacks %d", got, cmd.Process.Pid)
	}
	if st, ok := ReadStatus(os.Getpid()); !ok || st.RSSKB <= 0 || st.Threads < 1 {
		t.Errorf("ReadStatus(self) = %+v, %v", st, ok)
	}
	if r, ok := ReadRollup(os.Getpid()); !ok || r.PSS <= 0 || r.PSSAnon <= 0 || r.RSS < r.PSS {
		t.Errorf("ReadRollup(self) = %+v, %v", r, ok)
	}
	if m, ok := ReadMeminfo(); !ok || m.Total <= 0 || m.Available <= 0 || m.Kernel <= 0 {
		t.Errorf("ReadMeminfo = %+v, %v", m, ok)
	}
	if _, ok := ReadRollup(-1); ok {
		t.Error("ReadRollup of no process succeeded")
	}
}
