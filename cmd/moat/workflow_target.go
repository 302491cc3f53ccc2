package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/client"
)

// target says where the daemon of a workflow run or a build is.
type target struct {
	// local: a private daemon started for this command ('moat serve
	// --stdio'), which ends, with its runs and builds, when the command
	// does.
	local bool
}

// probeTimeout bounds the look for a daemon at the default address.
const probeTimeout = 500 * time.Millisecond

// withDaemonTarget calls fn with a client of the daemon `moat workflow
// run` and `moat build` use (chooseLocal) and closes it after; needDaemon
// refuses a private daemon (--detach: its run would end with this
// command).
func withDaemonTarget(ctx context.Context, forceLocal, needDaemon bool, sio sandboxIO, fn func(*client.Client, target) error) error {
	local, err := chooseLocal(ctx, forceLocal)
	if err != nil {
		return err
	}
	if !local {
		return withClient(func(c *client.Client) error { return fn(c, target{}) })
	}
	if needDaemon {
		return usageError("--detach needs a daemon that keeps the run: none answers at %s (set MOAT_URL)", daemonURL())
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding moat's own executable for a private daemon: %w", err)
	}
	args := []string{"serve", "--stdio"}
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

// chooseLocal decides where `moat workflow run` and `moat build` run: in
// a private daemon with --local or MOAT_MODE=stdio; in the daemon of
// MOAT_URL when it is set or MOAT_MODE=http; otherwise in the daemon at
// the default address when one answers there and its token can be read,
// else in a private daemon.
func chooseLocal(ctx context.Context, force bool) (bool, error) {
	if force {
		return true, nil
	}
	switch m := strings.TrimSpace(os.Getenv("MOAT_MODE")); m {
	case client.ModeStdio:
		return true, nil
	case client.ModeHTTP:
		return false, nil
	case "":
	default:
		return false, usageError("MOAT_MODE=%s: want %s or %s", m, client.ModeHTTP, client.ModeStdio)
	}
	if os.Getenv("MOAT_URL") != "" {
		return false, nil
	}
	if _, err := apiToken(); err != nil {
		return true, nil
	}
	return !daemonAnswers(ctx, client.DefaultURL), nil
}

// daemonAnswers reports whether something accepts connections at the
// daemon address base (http://HOST:PORT or unix:/PATH) within
// probeTimeout.
func daemonAnswers(ctx context.Context, base string) bool {
	network, addr := "tcp", ""
	if p, ok := strings.CutPrefix(base, "unix:"); ok {
		network, addr = "unix", p
	} else {
		u, err := url.Parse(base)
		if err != nil || u.Host == "" {
			return false
		}
		addr = u.Host
		if u.Port() == "" {
			port := "80"
			if u.Scheme == "https" {
				port = "443"
			}
			addr = net.JoinHostPort(u.Hostname(), port)
		}
	}
	d := net.Dialer{Timeout: probeTimeout}
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}
