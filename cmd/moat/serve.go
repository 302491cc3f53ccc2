package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/config"
	"github.com/moat-sandbox/moat/display"
	moatruntime "github.com/moat-sandbox/moat/runtime"
	"github.com/moat-sandbox/moat/server"
	"github.com/moat-sandbox/moat/store"
	"github.com/moat-sandbox/moat/templates"
)

// Defaults of moat serve.
const (
	defaultListen  = "127.0.0.1:7070"
	defaultDataDir = "/var/lib/moat"
	shutdownGrace  = 10 * time.Second
)

type serveFlags struct {
	listen         string
	data           string
	stdio          bool
	config         string
	allowHostPaths bool
	timeout        time.Duration
	idleTimeout    time.Duration
	maxSandboxes   int
	maxPerTenant   int
	logLevel       string
	logStderr      bool
	store          string
	runtime        string
	models         string

	home            string
	policyManaged   string
	policyUser      string
	approvalTimeout time.Duration

	// fs tells the flags given from the defaults (the config's [api]
	// section fills what is not given).
	fs                *pflag.FlagSet
	maxConnsPerClient int
	bodyTimeout       time.Duration
}

const serveLong = `Run the control-plane daemon: long-lived sandboxes, their processes and
files, over the HTTP API (/v1, bearer token) or, with --stdio, as JSON-RPC 2.0
over stdin/stdout (one daemon per agent; no port, no token).

State lives in the data directory (default ` + defaultDataDir + `, created 0700):
moat.db (SQLite: sandboxes, calls, results), audit/ (the JSONL audit tape),
tokens (one "TENANT TOKEN [ROLE]" per line, mode 0600; reloaded on SIGHUP),
token (the "default" tenant's token, created on first start, for local
clients: MOAT_TOKEN_FILE) and approver-token (an approver token of tenant
"default", created with it: the role approver may answer approvals, so
give it to the person who approves, never to an agent). The log goes to
stderr.

A --stdio daemon without --data uses a fresh data directory of its own
under ` + defaultDataDir + `/stdio/ (named PID-STARTTIME) and removes it
when it exits; one killed outright (SIGKILL) leaves it to the next --stdio
daemon to start, which removes the directories of daemons no longer
running. Its log goes to ` + stdioLogFile + ` in its data directory (so it
is gone with it, unless --data is given), never to stderr, which belongs
to the program that started it: --log-stderr or MOAT_LOG_STDERR=1 send it
there. Its input ending (the program that started it exited or was
killed) stops it like SIGTERM. Its peer (that program) may answer
approvals.

Templates and snapshots live in the store (--store, default the config's
[store] dir, else ` + templates.DefaultDir + `), shared with 'moat template'
and 'moat run --template': sandboxes are created from a template (the
built-in "host", or one imported with 'moat template import') or from a
snapshot, and can be snapshotted, restored and forked ('moat sandbox
snapshot|restore', 'moat snapshot'). Warm pools ([[pool]] in the config:
template, profile, size) keep sandboxes created ahead of need.

Policy: every sandbox gets the policy layers at its create: the managed
file (--policy-managed, default /etc/moat/policy.toml), the user file
(--policy-user, default <home>/.config/moat/policy.toml, where --home is
what ~ means, default $HOME) and, for a host workspace, its
.moat/policy.toml. What the kernel enforces (hidden credentials,
read-only hooks and policy files) is compiled at the create and stays for
the sandbox's life; the decisions on each exec, start and file operation
follow the files as they change (an invalid edit keeps the last good
policy and is logged). An ask rule holds the call in an approval (moat
approvals) until an approver answers it or --approval-timeout passes
(denied).

On start the daemon reconciles what a killed predecessor left: sandboxes
and calls it recorded as running are marked lost, and leftover cgroups are
removed (the sandboxes' processes, mounts and namespaces died with it).
SIGINT or SIGTERM stop it cleanly: running sandboxes are deleted (reason
"shutdown") and every record is kept. The sandboxes' inits are started by
a spawner, the moat binary re-executed once at start ("moat
__moat_spawner" in ps), so that creating a sandbox costs the same however
many the daemon holds; it dies with the daemon, and its sandboxes with it.

Agent runs (moat agent, POST /v1/agents/runs) call models through one
model client, made of the providers section of an agents file: --models
FILE, else the config's [agent] models_file (without either, agent runs
are refused). The API keys those providers name are read by the daemon
alone. A document sent to the daemon names no providers of its own,
unless its section is the daemon's (moat agent run's private daemon,
started with --models on the same file).

Endpoints: /v1/... (see docs/API.md and docs/openapi.json), /healthz,
/readyz, /metrics (Prometheus text format).

Exit codes: 0 after a clean stop; 125 if the daemon could not start (bad
flag, data directory, store, tokens file, address in use, host lacking a
protection).`

func serveCommand() *command {
	f := &serveFlags{}
	return &command{
		name:  "serve",
		usage: "[flags]",
		short: "Run the control-plane daemon (HTTP API, or JSON-RPC with --stdio)",
		long:  serveLong,
		setup: func(fl *pflag.FlagSet) {
			fl.StringVar(&f.listen, "listen", defaultListen, "HTTP `ADDR` to listen on (host:port, or unix:/path/to.sock)")
			fl.StringVar(&f.data, "data", "", "data `DIR` (default "+defaultDataDir+")")
			fl.BoolVar(&f.stdio, "stdio", false, "serve JSON-RPC 2.0 on stdin/stdout instead of HTTP")
			fl.StringVar(&f.config, "config", "", "operator config `FILE` with default limits (default $MOAT_CONFIG or "+config.DefaultPath+")")
			fl.StringVar(&f.store, "store", "", "template and snapshot store `DIR` (default the config's [store] dir, else "+templates.DefaultDir+")")
			fl.StringVar(&f.runtime, "runtime", "", runtimeFlagUsage())
			fl.StringVar(&f.models, "models", "", "agents `FILE` whose providers section is the model client of agent runs (default: the config's [agent] models_file)")
			fl.BoolVar(&f.allowHostPaths, "allow-host-paths", false, "let HTTP callers bind host directories (always on with --stdio)")
			fl.DurationVar(&f.timeout, "default-timeout", server.DefaultTimeout, "maximum age of a sandbox created without timeout_ms")
			fl.DurationVar(&f.idleTimeout, "idle-timeout", server.DefaultIdleTimeout, "idle timeout of a sandbox created without idle_timeout_ms")
			fl.IntVar(&f.maxSandboxes, "max-sandboxes", server.DefaultMaxSandboxes, "running sandboxes allowed on this daemon")
			fl.IntVar(&f.maxPerTenant, "max-per-tenant", server.DefaultMaxPerTenant, "running sandboxes allowed per tenant")
			fl.StringVar(&f.logLevel, "log-level", "info", "log `LEVEL`: debug, info, warn, error")
			fl.BoolVar(&f.logStderr, "log-stderr", false, "with --stdio, log on stderr (also MOAT_LOG_STDERR=1) instead of to "+stdioLogFile+" in the data directory")
			fl.StringVar(&f.home, "home", "", "what ~ means in policies, `DIR` (default $HOME)")
			fl.StringVar(&f.policyManaged, "policy-managed", "", "the managed policy `FILE` (default /etc/moat/policy.toml)")
			fl.StringVar(&f.policyUser, "policy-user", "", "the user policy `FILE` (default <home>/.config/moat/policy.toml)")
			fl.DurationVar(&f.approvalTimeout, "approval-timeout", server.DefaultApprovalTimeout, "how long a call held by an ask rule waits for an approver before it is denied")
			fl.IntVar(&f.maxConnsPerClient, "max-conns-per-client", config.DefaultMaxConnsPerClient, "open HTTP connections one client address (IPv4, IPv6 /64) may hold; 0: no cap (default: the config's [api] max_conns_per_client)")
			fl.DurationVar(&f.bodyTimeout, "body-timeout", config.DefaultBodyTimeout, "a request body must arrive at [api] body_chunk (1 MiB) per this long at least (default: the config's [api] body_timeout)")
			f.fs = fl
		},
		run: func(ctx context.Context, args []string) error { return runServe(ctx, f, args) },
	}
}

func runServe(ctx context.Context, f *serveFlags, args []string) error {
	if len(args) > 0 {
		return usageError("serve takes no arguments (got %q)", args[0])
	}
	switch {
	case f.timeout <= 0 || f.timeout > server.DefaultMaxTimeout:
		return usageError("--default-timeout %s: want a duration above 0 and at most %s", f.timeout, server.DefaultMaxTimeout)
	case f.idleTimeout <= 0 || f.idleTimeout > server.DefaultMaxTimeout:
		return usageError("--idle-timeout %s: want a duration above 0 and at most %s", f.idleTimeout, server.DefaultMaxTimeout)
	case f.maxSandboxes < 1 || f.maxPerTenant < 1:
		return usageError("--max-sandboxes and --max-per-tenant must be at least 1")
	case f.approvalTimeout <= 0 || f.approvalTimeout > server.DefaultMaxTimeout:
		return usageError("--approval-timeout %s: want a duration above 0 and at most %s", f.approvalTimeout, server.DefaultMaxTimeout)
	case f.maxConnsPerClient < 0:
		return usageError("--max-conns-per-client %d: want 0 (no cap) or more", f.maxConnsPerClient)
	case f.bodyTimeout <= 0 || f.bodyTimeout > server.RequestTimeout:
		return usageError("--body-timeout %s: want a duration above 0 and at most %s", f.bodyTimeout, server.RequestTimeout)
	}
	for _, p := range []*string{&f.home, &f.policyManaged, &f.policyUser} {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return usageError("%s: %v", *p, err)
		}
		*p = abs
	}
	if f.home != "" {
		if fi, err := os.Stat(f.home); err != nil || !fi.IsDir() {
			return usageError("--home %s: not a directory", f.home)
		}
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return usageError("--log-level %q: want debug, info, warn or error", f.logLevel)
	}
	if os.Getenv("MOAT_LOG") == "debug" {
		level = slog.LevelDebug
	}
	defaults, err := config.Load(f.config)
	if err != nil {
		return err
	}
	rtName, err := runtimeName(f.runtime, defaults)
	if err != nil {
		return err
	}
	if f.fs == nil || !f.fs.Changed("max-conns-per-client") {
		f.maxConnsPerClient = defaults.API.MaxConnsPerClient
	}
	if f.fs == nil || !f.fs.Changed("body-timeout") {
		f.bodyTimeout = defaults.API.BodyTimeout
	}
	// Take the address first: a daemon that cannot listen stops before it
	// creates or touches any state.
	var ln net.Listener
	if !f.stdio {
		if ln, err = listen(f.listen); err != nil {
			return err
		}
		defer ln.Close()
	}
	dataDir := f.data
	if dataDir == "" {
		dataDir = defaultDataDir
		if f.stdio {
			if dataDir, err = stdioDataDir(filepath.Join(defaultDataDir, "stdio")); err != nil {
				return fmt.Errorf("data directory: %w", err)
			}
			// Deferred first, so it runs last: after the sandboxes
			// have ended and the store and the tape are closed.
			defer os.RemoveAll(dataDir)
		}
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	// A --stdio daemon's stderr is its peer's (an SDK program's): its log
	// goes to serve.log in its data directory unless asked for there.
	logW := io.Writer(os.Stderr)
	if f.stdio && !f.logStderr && os.Getenv("MOAT_LOG_STDERR") != "1" {
		lf, err := os.OpenFile(filepath.Join(dataDir, stdioLogFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("log file: %w", err)
		}
		defer lf.Close()
		logW = lf
	}
	// The text handler quotes and escapes every value with a control,
	// bidi or other non-printable character; capLogValue bounds what a
	// sandbox's strings (hosts, paths, errors) can add to a line.
	log := slog.New(slog.NewTextHandler(logW, &slog.HandlerOptions{Level: level, ReplaceAttr: capLogValue}))
	if f.stdio {
		slog.SetDefault(log)
	}
	fi, err := os.Stat(dataDir)
	if err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("data directory: %s is not a directory", dataDir)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		// Everything inside is created private (0600 files, 0700 dirs);
		// an open directory only shows their names.
		log.Warn("data directory is open to other users; its files are not", "dir", dataDir, "mode", fmt.Sprintf("%04o", fi.Mode().Perm()))
	}
	// LongLived: the linux runtime's sandboxes are started by a spawner
	// process made now, while the daemon is small: a fork of the daemon
	// itself would get slower with every sandbox it holds.
	rt, closeRT, err := openRuntime(rtName, moatruntime.Options{Defaults: defaults.Limits, KillGrace: defaults.KillGrace,
		Logger: log, LongLived: true})
	if err != nil {
		return err
	}
	// Deferred first, so it runs last: after svc.Close has ended every
	// sandbox.
	defer closeRT()
	// Now that the spawner runs (the sandboxes inherit its limits, not
	// these), let the daemon hold as many descriptors as it may.
	raiseNofile(log)
	layers, err := openStore(f.store, defaults)
	if err != nil {
		return err
	}
	pools := make([]server.PoolConfig, 0, len(defaults.Pools))
	for _, p := range defaults.Pools {
		pools = append(pools, server.PoolConfig{Template: p.Template, Profile: p.Profile, Size: p.Size})
	}
	tape, err := audit.Open(filepath.Join(dataDir, "audit"))
	if errors.Is(err, audit.ErrLocked) {
		return fmt.Errorf("audit tape (is another daemon using %s?): %w", dataDir, err)
	} else if err != nil {
		// A full disk reads "no space left on device", with the path.
		return fmt.Errorf("audit tape: %w", err)
	}
	defer tape.Close()
	st, err := store.Open(ctx, filepath.Join(dataDir, "moat.db"))
	if err != nil {
		return err
	}
	defer st.Close()
	if n := tape.DroppedBytes(); n > 0 {
		log.Warn("audit tape ended with a partial line (a crash); dropped it", "bytes", n)
	}
	absData, err := filepath.Abs(dataDir)
	if err != nil {
		return err
	}
	modelsFile := defaults.Agent.ModelsFile
	if f.models != "" {
		if modelsFile, err = filepath.Abs(f.models); err != nil {
			return err
		}
	}
	svc, err := server.New(server.Config{
		Runtime: rt, Store: st, Tape: tape, Logger: log,
		AllowHostPaths: f.allowHostPaths || f.stdio,
		DefaultTimeout: f.timeout, DefaultIdleTimeout: f.idleTimeout,
		MaxSandboxes: f.maxSandboxes, MaxPerTenant: f.maxPerTenant,
		Home: f.home, PolicyManaged: f.policyManaged, PolicyUser: f.policyUser, ApprovalTimeout: f.approvalTimeout,
		HidePaths: []string{absData, layers.Dir()}, DNSServer: defaults.DNSServer,
		Layers: layers, Pools: pools, SnapshotQuota: defaults.SnapshotQuota,
		BodyTimeout: f.bodyTimeout, BodyChunk: defaults.API.BodyChunk, AuthAuditInterval: defaults.API.AuthAuditInterval,
		AuthFailRate: defaults.API.AuthFailRate, AuthFailBurst: defaults.API.AuthFailBurst,
		OutputLimit: defaults.OutputLimit, MaxOutputLimit: defaults.Output.MaxLimit,
		OutputMemory: defaults.Output.MemoryBudget, TenantOutputMemory: defaults.Output.TenantMemoryBudget,
		OutputDir: filepath.Join(absData, "output"), TenantOutputDisk: defaults.Output.TenantDiskQuota,
		OutputRetention: defaults.Output.Retention,
		Build:           defaults.Build, BuildRetention: defaults.BuildRetention,
		ModelsFile: modelsFile, AgentMaxRuns: defaults.Agent.MaxRuns, AgentMaxTurns: defaults.Agent.MaxTurns,
	})
	if err != nil {
		return err
	}
	if err := svc.Start(ctx); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if !f.stdio {
		// moat run on this host, served with this daemon's runtime
		// (localrun_linux.go).
		cfgPath := f.config
		if cfgPath == "" {
			cfgPath = os.Getenv("MOAT_CONFIG")
		}
		if cfgPath, err = absOrEmpty(cfgPath); err != nil {
			return err
		}
		stopLocal, err := startLocalRun(ctx, filepath.Join(absData, runSocketName), rt, rtName, defaults, cfgPath, f.maxSandboxes, log)
		if err != nil {
			return err
		}
		defer stopLocal()
	}
	if f.stdio {
		err = svc.ServeRPC(ctx, os.Stdin, os.Stdout, server.Caller{Tenant: "local", Actor: "stdio", Approver: true})
	} else {
		err = serveHTTP(ctx, server.LimitConns(ln, f.maxConnsPerClient), dataDir, svc, log, defaults.API.HeaderTimeout)
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if cerr := svc.Close(closeCtx); err == nil {
		err = cerr
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	log.Info("stopped")
	return nil
}

// absOrEmpty is filepath.Abs of p, or "" for "".
func absOrEmpty(p string) (string, error) {
	if p == "" {
		return "", nil
	}
	return filepath.Abs(p)
}

// listen opens the API's address: host:port, or unix:/path (a stale
// socket file there is replaced).
func listen(addr string) (net.Listener, error) {
	if p, ok := strings.CutPrefix(addr, "unix:"); ok {
		if fi, err := os.Lstat(p); err == nil && fi.Mode()&os.ModeSocket != 0 {
			_ = os.Remove(p)
		}
		return net.Listen("unix", p)
	}
	return net.Listen("tcp", addr)
}

// serveHTTP serves the API on ln until ctx ends, then drains open
// requests.
func serveHTTP(ctx context.Context, ln *server.ConnLimiter, dataDir string, svc *server.Service, log *slog.Logger, headerTimeout time.Duration) error {
	tokens, created, err := server.LoadTokens(dataDir)
	if err != nil {
		return err
	}
	tokenPath := filepath.Join(dataDir, server.TokenFile)
	url := "http://" + ln.Addr().String()
	if ln.Addr().Network() == "unix" {
		url = "unix:" + ln.Addr().String()
	}
	if created {
		log.Info("created an API token and an approver token for tenant \"default\"", "file", tokenPath,
			"approver_file", filepath.Join(dataDir, server.ApproverTokenFile))
	}
	ln.OnRefuse = func(src string) { svc.ConnRefused(src) }
	// SIGHUP (reload the tokens) is caught before the daemon says it
	// listens: a signal sent on that line must not end it.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	log.Info("listening", "url", url, "token_file", tokenPath, "data", dataDir)
	go func() {
		for range hup {
			if err := tokens.Reload(); err != nil {
				log.Error("reloading tokens", "err", err)
			} else {
				log.Info("reloaded tokens")
			}
		}
	}()
	srv := &http.Server{
		Handler:           svc.Handler(tokens),
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("stopping")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	// Stop taking requests, end the sandboxes (which ends the requests
	// that follow their processes), then wait for the rest.
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(sctx) }()
	_ = svc.Close(sctx)
	if err := <-shut; err != nil {
		_ = srv.Close()
	}
	return nil
}

// nofileTarget is the RLIMIT_NOFILE a daemon running as root asks for
// (at most fs.nr_open): every sandbox, process, stream and connection
// holds descriptors.
const nofileTarget = 1 << 20

// raiseNofile raises the daemon's RLIMIT_NOFILE: the soft limit to the
// hard one, and both to nofileTarget when the daemon may (root). Go
// already lifts the soft limit at start; the hard one is what a default
// install (systemd: 524288; a login shell: often far less) keeps low.
func raiseNofile(log *slog.Logger) {
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		log.Warn("reading RLIMIT_NOFILE", "err", err)
		return
	}
	want := old
	want.Cur = old.Max
	target := uint64(nofileTarget)
	if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && n < target {
			target = n
		}
	}
	if old.Max < target {
		want.Cur, want.Max = target, target
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
			// Not root (no CAP_SYS_RESOURCE): up to the hard limit.
			want.Cur, want.Max = old.Max, old.Max
		} else {
			log.Info("raised the open files limit", "from", old.Cur, "to", want.Cur)
			return
		}
	}
	if want.Cur != old.Cur {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
			log.Warn("raising RLIMIT_NOFILE", "err", err)
			return
		}
		log.Info("raised the open files limit", "from", old.Cur, "to", want.Cur)
	}
	if want.Cur < 4096 {
		log.Warn("the open files limit is low: sandboxes and connections will run out of descriptors", "limit", want.Cur)
	}
}

// capLogValue cuts a log line's string and error values to
// display.DefaultMax bytes, with a marker (the text handler escapes them).
func capLogValue(_ []string, a slog.Attr) slog.Attr {
	switch v := a.Value; {
	case v.Kind() == slog.KindString && len(v.String()) > display.DefaultMax:
		a.Value = slog.StringValue(display.Truncate(v.String(), display.DefaultMax))
	case v.Kind() == slog.KindAny:
		if err, ok := v.Any().(error); ok {
			if msg := err.Error(); len(msg) > display.DefaultMax {
				a.Value = slog.StringValue(display.Truncate(msg, display.DefaultMax))
			}
		}
	}
	return a
}

// stdioLogFile is the log of a --stdio daemon, in its data directory.
const stdioLogFile = "serve.log"

// stdioDataDir makes a fresh private data directory under root for a
// --stdio daemon without --data, named PID-STARTTIME (the start time of
// /proc/PID/stat, so a reused pid is told apart), after removing those of
// --stdio daemons that are no longer running: killed outright, they could
// not remove their own.
func stdioDataDir(root string) (string, error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", err
	}
	if ents, err := os.ReadDir(root); err == nil {
		for _, e := range ents {
			if e.IsDir() && !stdioOwnerAlive(e.Name()) {
				_ = os.RemoveAll(filepath.Join(root, e.Name()))
			}
		}
	}
	start, err := procStartTime(os.Getpid())
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, fmt.Sprintf("%d-%s", os.Getpid(), start))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", err
	}
	return dir, nil
}

// stdioOwnerAlive reports whether the daemon that made the directory
// name of stdioDataDir still runs (true for a name it did not make).
// Earlier versions named it YYYYMMDDTHHMMSS-PID.
func stdioOwnerAlive(name string) bool {
	a, b, ok := strings.Cut(name, "-")
	if !ok {
		return true
	}
	if strings.Contains(a, "T") {
		pid, err := strconv.Atoi(b)
		if err != nil || pid <= 0 {
			return true
		}
		_, err = os.Stat(fmt.Sprintf("/proc/%d", pid))
		return !errors.Is(err, fs.ErrNotExist)
	}
	pid, err := strconv.Atoi(a)
	if err != nil || pid <= 0 {
		return true
	}
	start, err := procStartTime(pid)
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist)
	}
	return start == b
}

// procStartTime returns field 22 of /proc/PID/stat: when the process
// started, in clock ticks since boot.
func procStartTime(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "", fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); field 22 is f[19].
	if len(f) < 20 {
		return "", fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	return f[19], nil
}
