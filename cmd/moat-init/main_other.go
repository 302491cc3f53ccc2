//go:build !linux

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "moat-init: a sandbox's init runs on Linux only")
	os.Exit(2)
}
