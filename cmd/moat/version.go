package main

import (
	"context"
	"fmt"
	"os"
	"runtime"

	"github.com/spf13/pflag"
)

func versionCommand() *command {
	return &command{
		name:  "version",
		short: "Print moat's version",
		long: `Print moat's version (set at build time: the Makefile passes
-ldflags "-X main.version=$(VERSION)", from git describe) and the Go
toolchain it was built with. 'moat --version' prints the same line.`,
		setup: func(*pflag.FlagSet) {},
		run: func(_ context.Context, args []string) error {
			if len(args) > 0 {
				return usageError("version takes no arguments")
			}
			_, err := fmt.Fprintln(os.Stdout, versionLine())
			return err
		},
	}
}

// versionLine is what moat version and moat --version print.
func versionLine() string {
	return fmt.Sprintf("moat %s (%s, %s/%s)", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
