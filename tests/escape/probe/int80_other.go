//go:build linux && !amd64

package main

const haveInt80 = false

func int80(nr, a1, a2, a3 uintptr) uintptr { panic("int80: not x86-64") }
