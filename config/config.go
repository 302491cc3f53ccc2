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
	// Pools are the daemon's warm pools.
	Pools []Pool
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

// MaxPoolSize caps one pool.
const MaxPoolSize = 256

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
	}
}

// file is the TOML layout:
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
//	[network]
//	dns_server = "127.0.0.1:53"  # the egress proxy's resolver; default: the host's
//
//	[store]
//	dir = "/var/lib/moat/store"  # templates and snapshots
//	snapshot_quota = "10GiB"     # per tenant: what its snapshots may cost in the store
//
//	[[pool]]                     # one per warm pool of `moat serve`
//	template = "host"
//	profile = "trusted"          # or "untrusted"
//	size = 4
type file struct {
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
	if s := f.Network.DNSServer; s != nil {
		if _, err := netip.ParseAddrPort(*s); err != nil && *s != "" {
			return d, fmt.Errorf("%w: %s: network.dns_server: want IP:PORT (e.g. 127.0.0.1:53), got %q", ErrInvalid, name, *s)
		}
		d.DNSServer = *s
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
	return d, nil
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
