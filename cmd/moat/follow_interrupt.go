package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/moat-sandbox/moat/display"
)

// cancelTimeout bounds the cancel request ^C sends to a private daemon.
const cancelTimeout = 30 * time.Second

// watchInterrupt handles ^C (SIGINT, SIGTERM) while run id is followed
// (follow, followAgent): for a private daemon (t.local) the first signal
// cancels the run with cancelRun and following goes on to its end, a
// second stops at once; for a daemon the first stops following. what
// names the run in the messages on stderr ("run", "agent run"). It
// returns the context to follow with, whether a signal came, and the
// function that stops watching, which returns once the cancel request,
// if any, has.
func watchInterrupt(ctx context.Context, t target, what, id string, cancelRun func(context.Context) error, stderr *lockedWriter) (context.Context, func() bool, func()) {
	ctx, cancel := context.WithCancel(ctx)
	sigc := make(chan os.Signal, 2)
	signal.Notify(sigc, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	var hit atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-sigc:
		case <-done:
			return
		}
		hit.Store(true)
		if !t.local {
			cancel()
			return
		}
		fmt.Fprintf(stderr, "moat: cancelling %s %s (^C again to stop at once)\n", what, display.String(id))
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
			defer ccancel()
			if err := cancelRun(cctx); err != nil && !errors.Is(err, context.Canceled) {
				fmt.Fprintf(stderr, "moat: cancelling %s %s: %s\n", what, display.String(id), display.String(err.Error()))
				cancel()
			}
		}()
		select {
		case <-sigc:
			cancel()
		case <-done:
		}
	}()
	return ctx, hit.Load, func() {
		signal.Stop(sigc)
		close(done)
		cancel()
		wg.Wait()
	}
}
