package main

import (
	"context"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/moat-sandbox/moat/sandbox"
)

// endSignals are the signals that would end moat run: they go to the
// command instead, and end it within the kill grace.
var endSignals = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT}

// signalWatch forwards the first of endSignals moat run gets to the
// command's process group inside the sandbox, then gives the command the
// kill grace (the config's kill_grace, as on --timeout) to end. When the
// grace runs out, or another of endSignals arrives meanwhile, it kills the
// whole sandbox: SIGKILL to the command, and the run's context cancelled,
// which makes the runtime kill the sandbox's init, and every process of
// its pid namespace with it.
//
// Under -t the terminal is raw: ^C is a byte that the sandbox's own
// terminal turns into SIGINT for its foreground job, and moat itself gets
// no SIGINT, so nothing is delivered twice. A SIGINT sent to moat (kill)
// is forwarded as without -t.
type signalWatch struct {
	sigs, fwd chan os.Signal
	unnotify  func(c chan<- os.Signal)
	cancel    context.CancelFunc
	done      chan struct{}
	stopOnce  sync.Once
	wg        sync.WaitGroup

	mu     sync.Mutex
	first  syscall.Signal
	killed bool
}

// watchSignals starts forwarding endSignals to proc's command; the
// returned context is cancelled when the grace runs out. Call stop once
// the run has ended.
func watchSignals(ctx context.Context, proc *sandbox.Process, grace time.Duration, rio *runIO) (context.Context, *signalWatch) {
	ctx, cancel := context.WithCancel(ctx)
	w := &signalWatch{sigs: make(chan os.Signal, 8), fwd: make(chan os.Signal, 8), unnotify: rio.stop, cancel: cancel, done: make(chan struct{})}
	rio.notify(w.sigs)
	proc.Signals = w.fwd
	w.wg.Add(1)
	go w.loop(grace)
	return ctx, w
}

func (w *signalWatch) loop(grace time.Duration) {
	defer w.wg.Done()
	var expire <-chan time.Time
	for {
		select {
		case <-w.done:
			return
		case s := <-w.sigs:
			sig, ok := s.(syscall.Signal)
			if !ok {
				continue
			}
			w.mu.Lock()
			first := w.first == 0
			if first {
				w.first = sig
			}
			w.mu.Unlock()
			if !first {
				// A second signal ends the grace at once.
				w.kill()
				return
			}
			w.forward(sig)
			t := time.NewTimer(grace)
			defer t.Stop()
			expire = t.C
		case <-expire:
			w.kill()
			return
		}
	}
}

// forward hands sig to the runtime, which sends it to the command's
// process group.
func (w *signalWatch) forward(sig syscall.Signal) {
	select {
	case w.fwd <- sig:
	default:
	}
}

func (w *signalWatch) kill() {
	w.mu.Lock()
	w.killed = true
	w.mu.Unlock()
	w.forward(syscall.SIGKILL)
	w.cancel()
}

// stop ends the watch: later signals have their default effect again.
func (w *signalWatch) stop() {
	w.stopOnce.Do(func() {
		w.unnotify(w.sigs)
		close(w.done)
		w.wg.Wait()
		w.cancel()
	})
}

// outcome returns the first signal moat got and whether the command had
// to be killed for it (res, the run's result, may be nil). A command that
// ended by itself after the forwarded signal (its own exit code, or killed
// by that signal) keeps its result, even if the grace ran out while its
// output drained.
func (w *signalWatch) outcome(res *sandbox.Result) (syscall.Signal, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.killed {
		return w.first, false
	}
	if res != nil {
		switch {
		case res.ExitReason == sandbox.ReasonExited,
			res.ExitReason == sandbox.ReasonSignaled && res.Signal != int(syscall.SIGKILL),
			res.ExitReason == sandbox.ReasonTimeout, res.ExitReason == sandbox.ReasonOOM:
			return w.first, false
		}
	}
	return w.first, true
}

// signalName is "SIGTERM" for syscall.SIGTERM.
func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	}
	return s.String()
}
