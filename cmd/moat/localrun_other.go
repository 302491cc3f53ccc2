//go:build !linux

package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/moat-sandbox/moat/config"
	"github.com/moat-sandbox/moat/sandbox"
)

// runLocal runs nothing off Linux: no local daemon serves there.
func runLocal(_ context.Context, f *runFlags, _ []string) (int, bool, error) {
	if f.localDaemon == localRequire {
		return 0, false, fmt.Errorf("%w: not on this system", errNoLocalDaemon)
	}
	return 0, false, nil
}

// startLocalRun opens no local run door off Linux.
func startLocalRun(context.Context, string, sandbox.Runtime, string, config.Defaults, string, int, *slog.Logger) (func(), error) {
	return func() {}, nil
}
