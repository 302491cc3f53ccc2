package seccomp

// archInfo describes one architecture: its audit number and syscall table.
// Both supported architectures (x86-64, arm64) are little-endian, which the
// argument offsets rely on.
type archInfo struct {
	// name is the kernel's name for the architecture.
	name string
	// auditArch is the AUDIT_ARCH_* value of the native ABI.
	auditArch uint32
	// x32Bit is __X32_SYSCALL_BIT on x86-64, 0 elsewhere.
	x32Bit uint32
	// maxSyscall is the highest syscall number in syscalls.
	maxSyscall uint32
	// syscalls maps names to numbers (built on first use).
	syscalls func() map[string]uint32
	// foreign lists names other supported architectures have and this one
	// lacks.
	foreign []string
}

// sysEntry is one row of a syscall table.
type sysEntry struct {
	name string
	nr   uint32
}

// tableMap indexes syscall tables by name.
func tableMap(lists ...[]sysEntry) map[string]uint32 {
	m := make(map[string]uint32, 512)
	for _, list := range lists {
		for _, e := range list {
			m[e.name] = e.nr
		}
	}
	return m
}
