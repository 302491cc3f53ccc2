// Package seccomp builds and installs moat's seccomp-BPF filter, the
// kernel-surface layer of the sandbox (the "privilege", "kernel surface",
// "terminal injection" and "sockets" rows of docs/THREAT-MODEL.md).
//
// The filter is classic BPF assembled in pure Go with golang.org/x/net/bpf;
// libseccomp is not used. A Profile says what is denied, Default returns
// moat's profile, Assemble compiles a profile for the architecture the binary
// was built for, and Install loads the program for every thread of the
// calling process.
//
// The assembled program has this shape:
//
//	    ld   [arch]
//	    jeq  #AUDIT_ARCH_<native>, next, kill  ; i386 (int 0x80), arm32: KILL_PROCESS
//	    ld   [nr]
//	    jeq  #<rule 1: ioctl>, rule1, next     ; the syscalls with argument
//	    jeq  #<rule 2: clone>, rule2, next     ; rules, in the profile's order
//	    ...                                    ; (at most 8)
//	    jgt  #<highest known nr>, high, search
//	rule1:
//	    <argument block: ld [args[i] low], and, jeq/jset, ret ...>
//	rule2: ...
//	search:
//	    <balanced binary search (jge) over runs of syscall numbers that
//	     share a verdict; each leaf is "ret ALLOW", "ret ERRNO|e", or the
//	     argument block of a rule past the eighth>
//	high:
//	    jeq  #0xffffffff, unknown, next        ; x86-64 only: nr -1 is not x32
//	    jset #0x40000000, kill, next           ; x86-64 only: x32 ABI
//	unknown:
//	    ret  #ERRNO|ENOSYS                     ; syscalls newer than the table
//	kill:
//	    ret  #KILL_PROCESS
//
// Every path that ends in ALLOW without passing an argument block reads only
// seccomp_data.nr and .arch and uses only the instructions the kernel's
// seccomp action cache can emulate (ld w abs, ja, jeq/jge/jgt/jset k,
// and k, ret k). On Linux 5.11 and later the kernel therefore learns, per
// syscall number, that ordinary syscalls are always allowed and stops running
// the filter for them: what remains for them is the kernel's fixed cost of
// having a filter at all. Arguments are loaded only inside the argument
// blocks, so the syscalls with a rule are the only allowed ones that run the
// filter on every call; they are tested first, most frequent first, which
// puts ioctl(TCGETS) at 8 instructions.
//
// Argument conditions look at the low 32 bits of an argument only. Every
// argument the default profile inspects (clone flags, ioctl cmd, personality,
// socket domain, type and protocol) is an int or unsigned int that the kernel
// truncates to those same 32 bits, so values with junk in the high half (for
// example ioctl cmd 0xffffffff00005412) are judged as the kernel will see them.
//
// Errno values in a Profile are Linux errno numbers, whatever the build OS.
package seccomp
