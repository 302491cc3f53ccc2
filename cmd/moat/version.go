package main

import (
	"context"
	"fmt"
	"runtime"

	"github.com/spf13/pflag"
)

func versionCommand() *command {
	return &command{
		name:  "version",
		short: "Print moat's version",
		long:  "Print moat's version and the Go toolchain it was built with.",
		setup: func(*pflag.FlagSet) {},
		run: func(context.Context, []string) error {
			fmt.Printf("moat %s (%s, %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}
