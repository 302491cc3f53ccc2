package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/config"
	"github.com/moat-sandbox/moat/sandbox"
	"github.com/moat-sandbox/moat/server"
)

// runLocal hands moat run to a daemon running on this host, when
// --local-daemon allows it and one listens on the run socket
// (--daemon-socket, $MOAT_RUN_SOCKET, else defaultRunSocket): the request
// (the arguments as given, the working directory, $HOME and $MOAT_CONFIG)
// goes with this process's stdin, stdout, stderr and terminal
// (SCM_RIGHTS), the signals moat gets follow it, and the daemon's answer
// is moat run's exit code. served is false when the daemon did not run
// it (none listens, or it refused the request's shape): nothing ran and
// the caller runs the command itself, unless --local-daemon is require
// (an error wrapping errNoLocalDaemon).
func runLocal(ctx context.Context, f *runFlags, args []string) (code int, served bool, err error) {
	switch f.localDaemon {
	case localNever:
		return 0, false, nil
	case localAuto, localRequire:
	default:
		return 0, false, usageError("--local-daemon %q: want auto, never or require", f.localDaemon)
	}
	notServed := func(why string) (int, bool, error) {
		if f.localDaemon == localRequire {
			return 0, false, fmt.Errorf("%w: %s", errNoLocalDaemon, why)
		}
		return 0, false, nil
	}
	if f.tty {
		return notServed("-t needs this terminal in raw mode")
	}
	path := f.daemonSocket
	if path == "" {
		path = os.Getenv("MOAT_RUN_SOCKET")
	}
	if path == "" {
		path = defaultRunSocket
	}
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return notServed(err.Error())
	}
	defer c.Close()
	cwd, err := os.Getwd()
	if err != nil {
		return notServed(err.Error())
	}
	home, _ := os.UserHomeDir()
	req := server.LocalRunRequest{Args: f.raw, Cwd: cwd, Home: home, Config: os.Getenv("MOAT_CONFIG")}
	fds := []int{0, 1, 2}
	if tty, err := os.OpenFile("/dev/tty", os.O_RDWR|unix.O_NOCTTY, 0); err == nil {
		defer tty.Close()
		req.TTY = true
		fds = append(fds, int(tty.Fd()))
	}
	frame, err := server.EncodeLocalRunFrame(req)
	if err != nil {
		return notServed(err.Error())
	}
	// Signals are caught from before the request leaves: one that
	// arrives before the daemon takes it is re-raised if this process
	// runs the command itself.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, endSignals...)
	defer signal.Stop(sigs)
	giveBack := func(why string) (int, bool, error) {
		signal.Stop(sigs)
		select {
		case s := <-sigs:
			signal.Reset(s)
			_ = syscall.Kill(os.Getpid(), s.(syscall.Signal))
		default:
		}
		return notServed(why)
	}
	// A daemon that refuses the caller (another uid) answers before it
	// reads the request, so the write can fail while its answer waits.
	_, _, werr := c.WriteMsgUnix(frame, unix.UnixRights(fds...), nil)
	var rep server.LocalRunReply
	if err := server.ReadLocalRunFrame(c, &rep, 64<<10); err != nil {
		if werr != nil {
			return giveBack(werr.Error())
		}
		return giveBack("the daemon hung up: " + err.Error())
	}
	if !rep.Accepted {
		return giveBack("the daemon refused the run: " + rep.Refused)
	}
	// From here on the daemon runs the command: it is never run twice.
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case s := <-sigs:
				_ = server.WriteLocalRunFrame(c, server.LocalRunSignal{Signal: int(s.(syscall.Signal))})
			}
		}
	}()
	if err := server.ReadLocalRunFrame(c, &rep, 64<<10); err != nil {
		return 0, false, fmt.Errorf("the local daemon (%s) ended before the command's result: %w", path, err)
	}
	return rep.Exit, true, nil
}

// startLocalRun opens the daemon's local run door at path: moat run
// requests of callers running as the daemon's user, run with rt (named
// rtName) when they need no other config than the daemon's (d, read from
// cfgPath: --config or $MOAT_CONFIG, absolute, or "") and at most max at
// once. stop closes the door and waits for the runs it serves, which end
// with ctx.
func startLocalRun(ctx context.Context, path string, rt sandbox.Runtime, rtName string, d config.Defaults, cfgPath string, max int, log *slog.Logger) (stop func(), err error) {
	ln, err := server.ListenLocalRun(path)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	h := &localRunner{rt: rt, rtName: rtName, defaults: d, cfgPath: cfgPath}
	go func() {
		defer close(done)
		if err := server.ServeLocalRun(ctx, ln, max, h.serve, log); err != nil {
			log.Error("local run socket", "err", err)
		}
	}()
	log.Info("serving moat run on this host", "socket", path)
	return func() { cancel(); <-done }, nil
}

// localRunner serves moat run requests with the daemon's runtime.
type localRunner struct {
	rt       sandbox.Runtime
	rtName   string
	defaults config.Defaults
	cfgPath  string
}

// refuse is a request the daemon leaves to its caller.
func refuse(format string, a ...any) (int, error) {
	return 0, fmt.Errorf("%w: %s", server.ErrLocalRunRefused, fmt.Sprintf(format, a...))
}

// serve runs one request as the caller's own moat run would: the same
// flags parsed from the same arguments, the same config and policy
// layers (package admit), the same output, --json result and exit code.
func (l *localRunner) serve(ctx context.Context, r *server.LocalRun) (int, error) {
	f := &runFlags{}
	args, ok, err := parseFlags("run", newRunCommand(f), r.Args, io.Discard)
	switch {
	case err != nil || !ok:
		return refuse("the arguments do not parse here")
	case f.tty:
		return refuse("-t needs the caller's terminal")
	case !filepath.IsAbs(r.Cwd):
		return refuse("the working directory is not absolute")
	}
	f.absolutize(r.Cwd)
	if f.config == "" && r.Config != "" {
		f.config = absIn(r.Cwd, r.Config)
	}
	if f.config != l.cfgPath {
		return refuse("the run's config %q is not the daemon's %q", f.config, l.cfgPath)
	}
	d, err := config.Load(f.config)
	if err != nil {
		return refuse("config: %v", err)
	}
	if d.Limits != l.defaults.Limits || d.KillGrace != l.defaults.KillGrace {
		return refuse("the config changed since the daemon started")
	}
	if name, err := runtimeName(f.runtime, d); err != nil || name != l.rtName {
		return refuse("the run's runtime is not the daemon's")
	}
	if err := r.Accept(); err != nil {
		return 0, fmt.Errorf("accepting: %w", err)
	}
	rio := &runIO{
		stdin: r.Stdin, stdout: r.Stdout, stderr: r.Stderr, home: r.Home,
		openTTY: func() (*os.File, error) {
			if r.Terminal == nil {
				return nil, errors.New("no terminal")
			}
			fd, err := unix.FcntlInt(r.Terminal.Fd(), unix.F_DUPFD_CLOEXEC, 0)
			if err != nil {
				return nil, err
			}
			return os.NewFile(uintptr(fd), "/dev/tty"), nil
		},
		runtime: l.rt, rtName: l.rtName,
	}
	relay := &signalRelay{}
	go relay.run(r.Signals)
	rio.notify, rio.stop = relay.notify, relay.stop
	err = runOutcome(f, runRun(ctx, f, args, rio), r.Stdout)
	return exitCode("run", err, r.Stderr), nil
}

// signalRelay hands the signals a caller forwards to moat run's signal
// watch, as signal.Notify does for the process's own.
type signalRelay struct {
	mu sync.Mutex
	to chan<- os.Signal
}

func (s *signalRelay) run(in <-chan syscall.Signal) {
	for sig := range in {
		s.mu.Lock()
		if s.to != nil {
			select {
			case s.to <- sig:
			default:
			}
		}
		s.mu.Unlock()
	}
}

func (s *signalRelay) notify(c chan<- os.Signal) { s.mu.Lock(); s.to = c; s.mu.Unlock() }
func (s *signalRelay) stop(chan<- os.Signal)     { s.mu.Lock(); s.to = nil; s.mu.Unlock() }

// absIn makes p absolute in directory dir, as filepath.Abs would in a
// process working there.
func absIn(dir, p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

// absolutize makes the host paths of the flags absolute in dir, the
// caller's working directory.
func (f *runFlags) absolutize(dir string) {
	f.workspace, f.spill, f.config, f.store = absIn(dir, f.workspace), absIn(dir, f.spill), absIn(dir, f.config), absIn(dir, f.store)
	for _, binds := range [][]string{f.ro, f.rw} {
		for i, v := range binds {
			src, dst, ok := strings.Cut(v, ":")
			if src == "" {
				continue
			}
			binds[i] = absIn(dir, src)
			if ok {
				binds[i] += ":" + dst
			}
		}
	}
	for i, s := range f.secrets {
		name, ref, ok := strings.Cut(s, "=")
		if p, isFile := strings.CutPrefix(ref, "@"); ok && isFile && p != "" {
			f.secrets[i] = name + "=@" + absIn(dir, p)
		}
	}
}
