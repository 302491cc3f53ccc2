// Package config loads moat's operator configuration file: the defaults
// every sandbox gets for what its request leaves unset (limits, timeout,
// output cap, kill grace). The file is TOML; unknown keys and bad values
// are errors that name the line.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	units "github.com/docker/go-units"
	"github.com/pelletier/go-toml/v2"

	"github.com/moat-sandbox/moat/build"
	"github.com/moat-sandbox/moat/output"
	"github.com/moat-sandbox/moat/sandbox"
)

// DefaultPath is read when no path is given and MOAT_CONFIG is unset; a
// missing file there means the built-in defaults.
const DefaultPath = "/etc/moat/config.toml"

// Defaults are the values a sandbox or call gets for what it leaves unset.
type Defaults struct {
	// Limits: zero MemoryBytes, CPUs or Pids mean no limit.
	Limits sandbox.Limits
	// Timeout of a call; zero means none.
	Timeout time.Duration
	// KillGrace is the time between SIGTERM and SIGKILL on timeout.
	KillGrace time.Duration
	// OutputLimit caps each captured stream, in bytes.
	OutputLimit int
	// DNSServer is the "host:port" of the DNS server the egress proxy
	// asks; "" means the host's resolver (/etc/hosts, /etc/resolv.conf).
	DNSServer string
	// StoreDir is the template and snapshot store ("" means
	// /var/lib/moat/store).
	StoreDir string
	// SnapshotQuota caps what one tenant's snapshots cost in the store
	// together (allocated bytes: a sparse file's holes cost nothing); 0
	// means the daemon's default (10 GiB).
	SnapshotQuota int64
	// Output bounds the output the daemon holds (see OutputDefaults).
	Output Output
	// API bounds what HTTP clients may cost the daemon (the [api]
	// section).
	API API
	// Pools are the daemon's warm pools.
	Pools []Pool
	// Build are the caps and defaults of the daemon's builds (the [build]
	// section; build.Defaults unless set), and BuildRetention how long a
	// finished build is kept with its log and artifacts.
	Build          build.Limits
	BuildRetention time.Duration
	// Agent configures the daemon's agent runs (the [agent] section).
	Agent Agent
	// Runtime names the sandbox runtime (the top-level runtime key; the
	// --runtime flag wins); "" means moat's default, linux.
	Runtime string
	// Source is the file the values came from ("" for built-ins).
	Source string
}

// Pool is one warm pool of the daemon: Size sandboxes of Template made
// under Profile ("" or "trusted": the policy files' profile; "untrusted").
type Pool struct {
	Template string
	Profile  string
	Size     int
}

// Output bounds what `moat serve` spends on the output of calls: memory
// for captures in progress and the kept output of background processes,
// disk for the captures it keeps after the call, and how long it keeps
// them (the [output] section).
type Output struct {
	// MaxLimit is the largest output_limit a call may ask (per stream);
	// above it the call is refused (400).
	MaxLimit int
	// MemoryBudget caps the bytes of output held in memory by the whole
	// daemon, TenantMemoryBudget by one tenant. Past either, a capture
	// spills the rest of its stream to disk and a background process's
	// kept output drops its oldest chunks (a lost event).
	MemoryBudget, TenantMemoryBudget int64
	// TenantDiskQuota caps the bytes of one tenant's output files (kept
	// captures and spills) under <data>/output.
	TenantDiskQuota int64
	// Retention is how long output files are kept; 0 keeps none (the
	// store's row still has the counts and a preview).
	Retention time.Duration
}

// Defaults of the [output] section, sized for a daemon host of 16 to 32
// GiB: the daemon's output memory stays near 1 GiB (its heap, with Go's
// collector, then below about 2 GiB) whatever callers do; one tenant's
// share is a quarter of it, so four tenants flooding at once leave room
// for nobody else only then; one call's limit is an eighth of the tenant's
// share per stream.
const (
	DefaultMaxOutputLimit     = 8 << 20
	DefaultMemoryBudget       = 1 << 30
	DefaultTenantMemoryBudget = 256 << 20
	DefaultTenantDiskQuota    = 1 << 30
	DefaultOutputRetention    = 24 * time.Hour
)

// OutputDefaults returns the built-in [output] values.
func OutputDefaults() Output {
	return Output{MaxLimit: DefaultMaxOutputLimit, MemoryBudget: DefaultMemoryBudget,
		TenantMemoryBudget: DefaultTenantMemoryBudget, TenantDiskQuota: DefaultTenantDiskQuota,
		Retention: DefaultOutputRetention}
}

// API bounds what clients of `moat serve`'s HTTP API may cost it: open
// connections, slow requests, failed authentications (the [api] section).
type API struct {
	// MaxConnsPerClient caps the open connections of one client address
	// (an IPv4 address, an IPv6 /64); 0 means no cap.
	MaxConnsPerClient int
	// HeaderTimeout bounds the arrival of a request's headers.
	HeaderTimeout time.Duration
	// BodyTimeout and BodyChunk set the slowest a request body may
	// arrive: each BodyChunk bytes (or the rest) within BodyTimeout.
	BodyTimeout time.Duration
	BodyChunk   int64
	// AuthFailRate (per second) and AuthFailBurst are the token bucket
	// of failed authentications per client address; over it a bad token
	// is answered 429. AuthAuditInterval is how often each address's
	// failures are written to the audit, as one counted event.
	AuthFailRate      float64
	AuthFailBurst     int
	AuthAuditInterval time.Duration
}

// Defaults of the [api] section.
const (
	DefaultMaxConnsPerClient = 1024
	DefaultHeaderTimeout     = 10 * time.Second
	DefaultBodyTimeout       = 10 * time.Second
	DefaultBodyChunk         = 1 << 20
	DefaultAuthFailRate      = 1.0
	DefaultAuthFailBurst     = 20
	DefaultAuthAuditInterval = 10 * time.Second
)

// APIDefaults returns the built-in [api] values.
func APIDefaults() API {
	return API{MaxConnsPerClient: DefaultMaxConnsPerClient, HeaderTimeout: DefaultHeaderTimeout,
		BodyTimeout: DefaultBodyTimeout, BodyChunk: DefaultBodyChunk, AuthFailRate: DefaultAuthFailRate,
		AuthFailBurst: DefaultAuthFailBurst, AuthAuditInterval: DefaultAuthAuditInterval}
}

// Agent configures `moat serve`'s agent runs (the [agent] section).
type Agent struct {
	// ModelsFile is an agents file (absolute path) whose providers
	// section configures the daemon's one model client; "" configures
	// none (agent runs are then refused) unless `moat serve --models`
	// names one.
	ModelsFile string
	// MaxRuns caps the unfinished agent runs of one tenant.
	MaxRuns int
	// MaxTurns caps the max_turns of a run's document (its model calls).
	MaxTurns int
}

// Defaults of the [agent] section.
const (
	DefaultAgentMaxRuns  = 16
	DefaultAgentMaxTurns = 200
)

// MaxPoolSize caps one pool.
const MaxPoolSize = 256

// DefaultBuildRetention is how long the daemon keeps a finished build
// (build.retention).
const DefaultBuildRetention = 7 * 24 * time.Hour

// BuiltIn returns moat's defaults without a config file.
func BuiltIn() Defaults {
	return Defaults{
		Limits: sandbox.Limits{
			MemoryBytes: 2 << 30,
			CPUs:        2,
			Pids:        1024,
			DiskBytes:   1 << 30,
		},
		KillGrace:   2 * time.Second,
		OutputLimit: output.DefaultLimit,
		API:         APIDefaults(),
		Output:      OutputDefaults(),
		Build:       build.Defaults, BuildRetention: DefaultBuildRetention,
		Agent: Agent{MaxRuns: DefaultAgentMaxRuns, MaxTurns: DefaultAgentMaxTurns},
	}
}

// file is the TOML layout:
//
//	runtime = "linux"     # the sandbox runtime (moat run/serve/doctor --runtime)
//
//	[limits]
//	memory = "2GiB"       # "0" = no limit
//	cpus = 1.0            # 0 = no limit
//	pids = 1024           # 0 = no limit
//	disk = "1GiB"         # must be > 0
//	timeout = "0s"        # Go duration; "0s" = none
//	kill_grace = "2s"
//	output_limit = "2000000"
//
//	[api]                        # what HTTP clients of moat serve may cost it
//	max_conns_per_client = 1024  # open connections per client address (IPv4, IPv6 /64); 0 = no cap
//	header_timeout = "10s"       # a request's headers must arrive within
//	body_timeout = "10s"         # each body_chunk of a request body must arrive within
//	body_chunk = "1MiB"
//	auth_fail_rate = 1.0         # failed authentications per second an address regains
//	auth_fail_burst = 20         # failed authentications an address may make at once (then 429)
//	auth_audit_interval = "10s"  # each address's failures: one counted auth.denied event per interval
//
//	[network]
//	dns_server = "127.0.0.1:53"  # the egress proxy's resolver; default: the host's
//
//	[store]
//	dir = "/var/lib/moat/store"  # templates and snapshots
//	snapshot_quota = "10GiB"     # per tenant: what its snapshots may cost in the store
//
//	[output]                     # what `moat serve` spends on calls' output
//	max_limit = "8MiB"           # the largest output_limit a call may ask, per stream
//	memory_budget = "1GiB"       # output held in memory by the whole daemon
//	tenant_memory_budget = "256MiB"
//	tenant_disk_quota = "1GiB"   # a tenant's output files under <data>/output
//	retention = "24h"            # how long output files are kept; "0s" keeps none
//
//	[build]                      # the caps of `moat serve`'s builds; a call may only narrow them
//	max_files = 50000            # entries of a source package (files, directories, symlinks)
//	max_file_bytes = "64MiB"     # one file of a source package
//	max_total_bytes = "512MiB"   # a source package's files added up
//	max_output_bytes = "1GiB"    # a build's collected outputs added up
//	max_log_bytes = "64MiB"      # a build's log kept (the rest is counted, not kept)
//	timeout = "10m"              # a build's command, unless the call asks for less or more
//	max_timeout = "1h"           # the longest timeout a call may ask
//	retention = "168h"           # how long a finished build is kept with its log and artifacts
//
//	[agent]                      # `moat serve`'s agent runs
//	models_file = "/etc/moat/models.yaml"  # an agents file whose providers are the daemon's model client
//	max_runs = 16                # unfinished agent runs per tenant
//	max_turns = 200              # the most max_turns a run's document may ask
//
//	[[pool]]                     # one per warm pool of `moat serve`
//	template = "host"
//	profile = "trusted"          # or "untrusted"
//	size = 4
type file struct {
	Runtime *string `toml:"runtime"`
	API     struct {
		MaxConnsPerClient *int     `toml:"max_conns_per_client"`
		HeaderTimeout     *string  `toml:"header_timeout"`
		BodyTimeout       *string  `toml:"body_timeout"`
		BodyChunk         *string  `toml:"body_chunk"`
		AuthFailRate      *float64 `toml:"auth_fail_rate"`
		AuthFailBurst     *int     `toml:"auth_fail_burst"`
		AuthAuditInterval *string  `toml:"auth_audit_interval"`
	} `toml:"api"`
	Store struct {
		Dir           *string `toml:"dir"`
		SnapshotQuota *string `toml:"snapshot_quota"`
	} `toml:"store"`
	Pool []struct {
		Template string `toml:"template"`
		Profile  string `toml:"profile"`
		Size     int    `toml:"size"`
	} `toml:"pool"`
	Network struct {
		DNSServer *string `toml:"dns_server"`
	} `toml:"network"`
	Build struct {
		MaxFiles       *int    `toml:"max_files"`
		MaxFileBytes   *string `toml:"max_file_bytes"`
		MaxTotalBytes  *string `toml:"max_total_bytes"`
		MaxOutputBytes *string `toml:"max_output_bytes"`
		MaxLogBytes    *string `toml:"max_log_bytes"`
		Timeout        *string `toml:"timeout"`
		MaxTimeout     *string `toml:"max_timeout"`
		Retention      *string `toml:"retention"`
	} `toml:"build"`
	Agent struct {
		ModelsFile *string `toml:"models_file"`
		MaxRuns    *int    `toml:"max_runs"`
		MaxTurns   *int    `toml:"max_turns"`
	} `toml:"agent"`
	Output struct {
		MaxLimit           *string `toml:"max_limit"`
		MemoryBudget       *string `toml:"memory_budget"`
		TenantMemoryBudget *string `toml:"tenant_memory_budget"`
		TenantDiskQuota    *string `toml:"tenant_disk_quota"`
		Retention          *string `toml:"retention"`
	} `toml:"output"`
	Limits struct {
		Memory      *string  `toml:"memory"`
		CPUs        *float64 `toml:"cpus"`
		Pids        *int64   `toml:"pids"`
		Disk        *string  `toml:"disk"`
		Timeout     *string  `toml:"timeout"`
		KillGrace   *string  `toml:"kill_grace"`
		OutputLimit *string  `toml:"output_limit"`
	} `toml:"limits"`
}

// ErrInvalid wraps every problem found in a config file.
var ErrInvalid = errors.New("invalid config")

// Load reads the config file at path (or MOAT_CONFIG, or DefaultPath) on
// top of the built-in defaults. An explicitly named file must exist.
func Load(path string) (Defaults, error) {
	d := BuiltIn()
	explicit := path != ""
	if !explicit {
		path = os.Getenv("MOAT_CONFIG")
		explicit = path != ""
	}
	if path == "" {
		path = DefaultPath
	}
	b, err := os.ReadFile(path)
	if err != nil {
		if !explicit && errors.Is(err, os.ErrNotExist) {
			return d, nil
		}
		return d, fmt.Errorf("config %s: %w", path, err)
	}
	return Parse(path, b)
}

// Parse reads config text (name is used in errors) on top of the built-in
// defaults.
func Parse(name string, b []byte) (Defaults, error) {
	d := BuiltIn()
	d.Source = name
	var f file
	dec := toml.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		var se *toml.StrictMissingError
		if errors.As(err, &se) && len(se.Errors) > 0 {
			row, col := se.Errors[0].Position()
			return d, fmt.Errorf("%w: %s:%d:%d: unknown key %q", ErrInvalid, name, row, col, strings.Join(se.Errors[0].Key(), "."))
		}
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			return d, fmt.Errorf("%w: %s:%d:%d: %s", ErrInvalid, name, row, col, de.Error())
		}
		return d, fmt.Errorf("%w: %s: %v", ErrInvalid, name, err)
	}
	if err := parseAPI(name, &d.API, f.API.MaxConnsPerClient, f.API.HeaderTimeout, f.API.BodyTimeout, f.API.BodyChunk,
		f.API.AuthFailRate, f.API.AuthFailBurst, f.API.AuthAuditInterval); err != nil {
		return d, err
	}
	if s := f.Network.DNSServer; s != nil {
		if _, err := netip.ParseAddrPort(*s); err != nil && *s != "" {
			return d, fmt.Errorf("%w: %s: network.dns_server: want IP:PORT (e.g. 127.0.0.1:53), got %q", ErrInvalid, name, *s)
		}
		d.DNSServer = *s
	}
	if f.Runtime != nil {
		if !validRuntimeName(*f.Runtime) {
			return d, fmt.Errorf("%w: %s: runtime: want a runtime name such as linux, got %q", ErrInvalid, name, *f.Runtime)
		}
		d.Runtime = *f.Runtime
	}
	if f.Store.Dir != nil {
		if *f.Store.Dir == "" || !strings.HasPrefix(*f.Store.Dir, "/") {
			return d, fmt.Errorf("%w: %s: store.dir: want an absolute path, got %q", ErrInvalid, name, *f.Store.Dir)
		}
		d.StoreDir = *f.Store.Dir
	}
	if q := f.Store.SnapshotQuota; q != nil {
		v, err := ParseSize(*q)
		if err != nil || v <= 0 {
			return d, fmt.Errorf("%w: %s: store.snapshot_quota: %v", ErrInvalid, name, errors.Join(err, errors.New("must be a size above 0")))
		}
		d.SnapshotQuota = v
	}
	for i, p := range f.Pool {
		switch {
		case p.Template == "":
			return d, fmt.Errorf("%w: %s: pool %d: template is required", ErrInvalid, name, i+1)
		case p.Profile != "" && p.Profile != "trusted" && p.Profile != "untrusted":
			return d, fmt.Errorf("%w: %s: pool %d: profile %q (want trusted or untrusted)", ErrInvalid, name, i+1, p.Profile)
		case p.Size < 1 || p.Size > MaxPoolSize:
			return d, fmt.Errorf("%w: %s: pool %d: size %d (want 1 to %d)", ErrInvalid, name, i+1, p.Size, MaxPoolSize)
		}
		d.Pools = append(d.Pools, Pool{Template: p.Template, Profile: p.Profile, Size: p.Size})
	}
	if err := parseOutput(name, &f, &d); err != nil {
		return d, err
	}
	if err := parseBuild(name, &f, &d); err != nil {
		return d, err
	}
	if err := parseAgent(name, &f, &d); err != nil {
		return d, err
	}
	l := f.Limits
	bad := func(key string, err error) error {
		return fmt.Errorf("%w: %s: limits.%s: %v", ErrInvalid, name, key, err)
	}
	if l.Memory != nil {
		v, err := ParseSize(*l.Memory)
		if err != nil {
			return d, bad("memory", err)
		}
		d.Limits.MemoryBytes = v
	}
	if l.CPUs != nil {
		if *l.CPUs < 0 {
			return d, bad("cpus", errors.New("must not be negative"))
		}
		d.Limits.CPUs = *l.CPUs
	}
	if l.Pids != nil {
		if *l.Pids < 0 {
			return d, bad("pids", errors.New("must not be negative"))
		}
		d.Limits.Pids = *l.Pids
	}
	if l.Disk != nil {
		v, err := ParseSize(*l.Disk)
		if err != nil || v == 0 {
			return d, bad("disk", errors.Join(err, errors.New("must be a size above 0")))
		}
		d.Limits.DiskBytes = v
	}
	if l.Timeout != nil {
		v, err := time.ParseDuration(*l.Timeout)
		if err != nil || v < 0 {
			return d, bad("timeout", errors.Join(err, errors.New("must be a duration of 0 or more")))
		}
		d.Timeout = v
	}
	if l.KillGrace != nil {
		v, err := time.ParseDuration(*l.KillGrace)
		if err != nil || v <= 0 {
			return d, bad("kill_grace", errors.Join(err, errors.New("must be a duration above 0")))
		}
		d.KillGrace = v
	}
	if l.OutputLimit != nil {
		v, err := ParseSize(*l.OutputLimit)
		if err != nil || v <= 0 || v > 1<<31 {
			return d, bad("output_limit", errors.Join(err, errors.New("must be a size above 0 and at most 2 GiB")))
		}
		d.OutputLimit = int(v)
	}
	if d.OutputLimit > d.Output.MaxLimit {
		return d, fmt.Errorf("%w: %s: limits.output_limit %d is above output.max_limit %d", ErrInvalid, name, d.OutputLimit, d.Output.MaxLimit)
	}
	return d, nil
}

func parseOutput(name string, f *file, d *Defaults) error {
	o := f.Output
	bad := func(key string, err error) error {
		return fmt.Errorf("%w: %s: output.%s: %v", ErrInvalid, name, key, err)
	}
	size := func(key string, v *string, dst *int64, lo, hi int64) error {
		if v == nil {
			return nil
		}
		n, err := ParseSize(*v)
		if err != nil || n < lo || n > hi {
			return bad(key, errors.Join(err, fmt.Errorf("must be a size from %d to %d bytes", lo, hi)))
		}
		*dst = n
		return nil
	}
	maxLimit := int64(d.Output.MaxLimit)
	for _, e := range []error{
		size("max_limit", o.MaxLimit, &maxLimit, 1, 1<<30),
		size("memory_budget", o.MemoryBudget, &d.Output.MemoryBudget, 1<<20, 1<<40),
		size("tenant_memory_budget", o.TenantMemoryBudget, &d.Output.TenantMemoryBudget, 1<<20, 1<<40),
		size("tenant_disk_quota", o.TenantDiskQuota, &d.Output.TenantDiskQuota, 0, 1<<50),
	} {
		if e != nil {
			return e
		}
	}
	d.Output.MaxLimit = int(maxLimit)
	if d.Output.TenantMemoryBudget > d.Output.MemoryBudget {
		return bad("tenant_memory_budget", fmt.Errorf("%d is more than memory_budget (%d)", d.Output.TenantMemoryBudget, d.Output.MemoryBudget))
	}
	if o.Retention != nil {
		v, err := time.ParseDuration(*o.Retention)
		if err != nil || v < 0 {
			return bad("retention", errors.Join(err, errors.New("must be a duration of 0 or more")))
		}
		d.Output.Retention = v
	}
	return nil
}

// maxBuildFiles bounds build.max_files.
const maxBuildFiles = 10_000_000

// parseBuild sets the [build] values given.
func parseBuild(name string, f *file, d *Defaults) error {
	b := f.Build
	bad := func(key string, err error) error {
		return fmt.Errorf("%w: %s: build.%s: %v", ErrInvalid, name, key, err)
	}
	size := func(key string, v *string, dst *int64) error {
		if v == nil {
			return nil
		}
		n, err := ParseSize(*v)
		if err != nil || n <= 0 {
			return bad(key, errors.Join(err, errors.New("must be a size above 0")))
		}
		*dst = n
		return nil
	}
	duration := func(key string, v *string, dst *time.Duration) error {
		if v == nil {
			return nil
		}
		n, err := time.ParseDuration(*v)
		if err != nil || n <= 0 {
			return bad(key, errors.Join(err, errors.New("must be a duration above 0")))
		}
		*dst = n
		return nil
	}
	if b.MaxFiles != nil {
		if *b.MaxFiles < 1 || *b.MaxFiles > maxBuildFiles {
			return bad("max_files", fmt.Errorf("%d: must be from 1 to %d", *b.MaxFiles, maxBuildFiles))
		}
		d.Build.MaxFiles = *b.MaxFiles
	}
	for _, e := range []error{
		size("max_file_bytes", b.MaxFileBytes, &d.Build.MaxFileBytes),
		size("max_total_bytes", b.MaxTotalBytes, &d.Build.MaxTotalBytes),
		size("max_output_bytes", b.MaxOutputBytes, &d.Build.MaxOutputBytes),
		size("max_log_bytes", b.MaxLogBytes, &d.Build.MaxLogBytes),
		duration("timeout", b.Timeout, &d.Build.Timeout),
		duration("max_timeout", b.MaxTimeout, &d.Build.MaxTimeout),
		duration("retention", b.Retention, &d.BuildRetention),
	} {
		if e != nil {
			return e
		}
	}
	if d.Build.Timeout > d.Build.MaxTimeout {
		return bad("timeout", fmt.Errorf("%s is above max_timeout (%s)", d.Build.Timeout, d.Build.MaxTimeout))
	}
	if d.Build.MaxFileBytes > d.Build.MaxTotalBytes {
		return bad("max_file_bytes", fmt.Errorf("%d is above max_total_bytes (%d)", d.Build.MaxFileBytes, d.Build.MaxTotalBytes))
	}
	return nil
}

// Bounds of the [agent] section.
const (
	maxAgentRuns  = 100_000
	maxAgentTurns = 10_000
)

// parseAgent sets the [agent] values given.
func parseAgent(name string, f *file, d *Defaults) error {
	a := f.Agent
	bad := func(key string, err error) error {
		return fmt.Errorf("%w: %s: agent.%s: %v", ErrInvalid, name, key, err)
	}
	if a.ModelsFile != nil {
		if p := *a.ModelsFile; p != "" && !strings.HasPrefix(p, "/") {
			return bad("models_file", fmt.Errorf("want an absolute path, got %q", p))
		}
		d.Agent.ModelsFile = *a.ModelsFile
	}
	if a.MaxRuns != nil {
		if *a.MaxRuns < 1 || *a.MaxRuns > maxAgentRuns {
			return bad("max_runs", fmt.Errorf("%d: must be from 1 to %d", *a.MaxRuns, maxAgentRuns))
		}
		d.Agent.MaxRuns = *a.MaxRuns
	}
	if a.MaxTurns != nil {
		if *a.MaxTurns < 1 || *a.MaxTurns > maxAgentTurns {
			return bad("max_turns", fmt.Errorf("%d: must be from 1 to %d", *a.MaxTurns, maxAgentTurns))
		}
		d.Agent.MaxTurns = *a.MaxTurns
	}
	return nil
}

// ParseSize reads a byte size: a number with an optional binary unit
// (k, m, g, t; "KiB", "MB" and "m" all mean 1024-based), e.g. "512m",
// "2GiB", "100000".
func ParseSize(s string) (int64, error) {
	v, err := units.RAMInBytes(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%q is not a size (examples: 512m, 2GiB, 100000)", s)
	}
	return v, nil
}

// parseAPI sets the [api] values given.
func parseAPI(name string, a *API, maxConns *int, header, body, chunk *string, rate *float64, burst *int, interval *string) error {
	bad := func(key string, err error) error {
		return fmt.Errorf("%w: %s: api.%s: %v", ErrInvalid, name, key, err)
	}
	duration := func(key string, s *string, max time.Duration, into *time.Duration) error {
		if s == nil {
			return nil
		}
		v, err := time.ParseDuration(*s)
		if err != nil || v <= 0 || v > max {
			return bad(key, errors.Join(err, fmt.Errorf("must be a duration above 0 and at most %s", max)))
		}
		*into = v
		return nil
	}
	if maxConns != nil {
		if *maxConns < 0 {
			return bad("max_conns_per_client", errors.New("must be 0 (no cap) or more"))
		}
		a.MaxConnsPerClient = *maxConns
	}
	if err := duration("header_timeout", header, 5*time.Minute, &a.HeaderTimeout); err != nil {
		return err
	}
	if err := duration("body_timeout", body, 5*time.Minute, &a.BodyTimeout); err != nil {
		return err
	}
	if err := duration("auth_audit_interval", interval, time.Hour, &a.AuthAuditInterval); err != nil {
		return err
	}
	if chunk != nil {
		v, err := ParseSize(*chunk)
		if err != nil || v <= 0 || v > 1<<30 {
			return bad("body_chunk", errors.Join(err, errors.New("must be a size above 0 and at most 1 GiB")))
		}
		a.BodyChunk = v
	}
	if rate != nil {
		if *rate <= 0 || *rate > 1e6 {
			return bad("auth_fail_rate", errors.New("must be above 0 (failures per second)"))
		}
		a.AuthFailRate = *rate
	}
	if burst != nil {
		if *burst < 1 || *burst > 1e6 {
			return bad("auth_fail_burst", errors.New("must be at least 1"))
		}
		a.AuthFailBurst = *burst
	}
	return nil
}

// validRuntimeName accepts what a runtime may be registered as: lower-case
// letters, digits and dashes. Whether one is registered is for the runtime
// registry to say when it is opened.
func validRuntimeName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}
