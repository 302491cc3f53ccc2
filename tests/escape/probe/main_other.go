//go:build !linux

package main

import (
	"fmt"
	"os"
	"runtime"
)

// The probe's attempts are Linux system calls made inside a Linux sandbox;
// elsewhere it only says so (exit 2, a usage error).
func main() {
	fmt.Fprintf(os.Stderr, "probe: the escape attempts are Linux system calls; this is %s\n", runtime.GOOS)
	os.Exit(2)
}
