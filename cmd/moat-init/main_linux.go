//go:build linux

package main

import (
	"fmt"
	"os"

	"github.com/moat-sandbox/moat/runtime/linux/sandboxinit"
)

func main() {
	if len(os.Args) != 2 || os.Args[1] != sandboxinit.Arg {
		fmt.Fprintln(os.Stderr, "moat-init: started by moat as a sandbox's init only")
		os.Exit(2)
	}
	sandboxinit.Main()
}
