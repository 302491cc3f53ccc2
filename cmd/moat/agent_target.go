package main

import (
	"context"
	"fmt"
	"os"

	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/display"
)

// withAgentDaemon calls fn with a client of the daemon `moat agent run`
// and `moat agent resume` use and closes it after. The choice is
// chooseLocal's, as for moat workflow run: a daemon (MOAT_URL, or the
// default address answering), or with forceLocal or none a private
// daemon, `moat serve --stdio --models FILE` whose model providers are
// f's (f must have some).
func withAgentDaemon(ctx context.Context, forceLocal bool, f *agentsFile, sio sandboxIO, fn func(*client.Client, target) error) error {
	local, err := chooseLocal(ctx, forceLocal)
	if err != nil {
		return err
	}
	if !local {
		return withClient(func(c *client.Client) error { return fn(c, target{}) })
	}
	if f == nil {
		return usageError("no daemon answers at %s: a private daemon needs --config FILE for its model providers (or set MOAT_URL)", daemonURL())
	}
	if !f.providers {
		return usageError("%s has no providers section: a private daemon (none answers at %s) needs the file's model providers (or set MOAT_URL to a daemon with its own)", display.String(f.path), daemonURL())
	}
	models, done, err := f.modelsFile()
	if err != nil {
		return err
	}
	defer done()
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding moat's own executable for a private daemon: %w", err)
	}
	args := []string{"serve", "--stdio", "--models", models}
	if d := os.Getenv("MOAT_DATA"); d != "" {
		args = append(args, "--data", d)
	}
	c, err := client.New(client.WithStdio(exe, args...), client.WithStderr(sio.stderr))
	if err != nil {
		return fmt.Errorf("starting a private daemon: %w", err)
	}
	defer c.Close()
	return fn(c, target{local: true})
}
