package seccomp

import "golang.org/x/sys/unix"

// xsysArchOnly lists x86-64-only syscalls of the default profile.
var xsysArchOnly = map[string]uintptr{
	"iopl": unix.SYS_IOPL, "ioperm": unix.SYS_IOPERM, "modify_ldt": unix.SYS_MODIFY_LDT,
	"uselib": unix.SYS_USELIB, "create_module": unix.SYS_CREATE_MODULE,
	"get_kernel_syms": unix.SYS_GET_KERNEL_SYMS, "query_module": unix.SYS_QUERY_MODULE,
	"_sysctl": unix.SYS__SYSCTL,
}
