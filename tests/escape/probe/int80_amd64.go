//go:build linux

package main

// haveInt80 reports whether int80 and the x32 bit exist on this architecture.
const haveInt80 = true

// int80 makes an i386 system call (int $0x80); see int80_amd64.s.
func int80(nr, a1, a2, a3 uintptr) uintptr
