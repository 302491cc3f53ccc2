package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	d, err := Parse("c.toml", []byte(`
[limits]
memory = "512m"
cpus = 0.5
pids = 64
disk = "2GiB"
timeout = "90s"
kill_grace = "500ms"
output_limit = "1m"
`))
	if err != nil {
		t.Fatal(err)
	}
	if d.Limits.MemoryBytes != 512<<20 || d.Limits.CPUs != 0.5 || d.Limits.Pids != 64 || d.Limits.DiskBytes != 2<<30 ||
		d.Timeout != 90*time.Second || d.KillGrace != 500*time.Millisecond || d.OutputLimit != 1<<20 {
		t.Fatalf("%+v", d)
	}
	// Unset keys keep the built-in defaults.
	d, err = Parse("c.toml", []byte("[limits]\npids = 10\n"))
	if err != nil || d.Limits.Pids != 10 || d.Limits.MemoryBytes != BuiltIn().Limits.MemoryBytes {
		t.Fatalf("%+v %v", d, err)
	}
}

func TestParseErrors(t *testing.T) {
	cases := map[string]string{
		"[limits]\nmemroy = \"1g\"\n":     "unknown key",
		"[limits]\nmemory = \"lots\"\n":   "limits.memory",
		"[limits]\ncpus = -1\n":           "limits.cpus",
		"[limits]\ndisk = \"0\"\n":        "limits.disk",
		"[limits]\ntimeout = \"soon\"\n":  "limits.timeout",
		"[limits]\nkill_grace = \"0s\"\n": "limits.kill_grace",
		"[limits]\npids = \"many\"\n":     "c.toml:2",
		"[limits\n":                       "c.toml:1",
	}
	for text, want := range cases {
		_, err := Parse("c.toml", []byte(text))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want one mentioning %q", text, err, want)
		}
	}
}

func TestLoad(t *testing.T) {
	t.Setenv("MOAT_CONFIG", "")
	p := filepath.Join(t.TempDir(), "config.toml")
	if _, err := Load(p); err == nil {
		t.Fatal("a named missing file must be an error")
	}
	if err := os.WriteFile(p, []byte("[limits]\npids = 7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := Load(p)
	if err != nil || d.Limits.Pids != 7 || d.Source != p {
		t.Fatalf("%+v %v", d, err)
	}
	t.Setenv("MOAT_CONFIG", p)
	if d, err := Load(""); err != nil || d.Limits.Pids != 7 {
		t.Fatalf("MOAT_CONFIG: %+v %v", d, err)
	}
}

func TestStoreAndPools(t *testing.T) {
	d, err := Parse("c.toml", []byte("[store]\ndir = \"/srv/moat\"\n[[pool]]\ntemplate = \"host\"\nsize = 2\n[[pool]]\ntemplate = \"py\"\nprofile = \"untrusted\"\nsize = 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d.StoreDir != "/srv/moat" || len(d.Pools) != 2 || d.Pools[1] != (Pool{Template: "py", Profile: "untrusted", Size: 1}) {
		t.Fatalf("got %+v", d)
	}
	for _, bad := range []string{
		"[store]\ndir = \"rel\"\n",
		"[[pool]]\nsize = 1\n",
		"[[pool]]\ntemplate = \"host\"\nsize = 0\n",
		"[[pool]]\ntemplate = \"host\"\nsize = 1\nprofile = \"root\"\n",
		"[[pool]]\ntemplate = \"host\"\nsize = 1\ncount = 2\n",
	} {
		if _, err := Parse("c.toml", []byte(bad)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: got %v, want ErrInvalid", bad, err)
		}
	}
}

func TestSnapshotQuota(t *testing.T) {
	if d, err := Parse("c.toml", nil); err != nil || d.SnapshotQuota != 0 {
		t.Fatalf("default: %d %v (want 0: the daemon's default)", d.SnapshotQuota, err)
	}
	d, err := Parse("c.toml", []byte("[store]\nsnapshot_quota = \"2GiB\"\n"))
	if err != nil || d.SnapshotQuota != 2<<30 {
		t.Fatalf("2GiB: %d %v", d.SnapshotQuota, err)
	}
	for _, bad := range []string{"0", "-1", "lots", ""} {
		_, err := Parse("c.toml", []byte("[store]\nsnapshot_quota = \""+bad+"\"\n"))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "store.snapshot_quota") {
			t.Errorf("%q: got %v, want ErrInvalid naming store.snapshot_quota", bad, err)
		}
	}
}

func TestParseOutput(t *testing.T) {
	d, err := Parse("c.toml", nil)
	if err != nil || d.Output != OutputDefaults() || d.Output.MaxLimit != 8<<20 || d.Output.MemoryBudget != 1<<30 ||
		d.Output.TenantMemoryBudget != 256<<20 || d.Output.TenantDiskQuota != 1<<30 || d.Output.Retention != 24*time.Hour {
		t.Fatalf("%+v %v", d.Output, err)
	}
	d, err = Parse("c.toml", []byte(`
[output]
max_limit = "1MiB"
memory_budget = "64MiB"
tenant_memory_budget = "16MiB"
tenant_disk_quota = "0"
retention = "0s"
[limits]
output_limit = "100000"
`))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Output{MaxLimit: 1 << 20, MemoryBudget: 64 << 20, TenantMemoryBudget: 16 << 20}); d.Output != want {
		t.Fatalf("%+v", d.Output)
	}
	for text, want := range map[string]string{
		"[output]\nmax_limit = \"0\"\n":                                           "output.max_limit",
		"[output]\nmemory_budget = \"lots\"\n":                                    "output.memory_budget",
		"[output]\nmemory_budget = \"32MiB\"\ntenant_memory_budget = \"64MiB\"\n": "more than memory_budget",
		"[output]\nretention = \"-1h\"\n":                                         "output.retention",
		"[output]\nmax_limit = \"1MiB\"\n":                                        "limits.output_limit 2000000 is above output.max_limit",
		"[output]\nbudget = \"1MiB\"\n":                                           "unknown key",
	} {
		if _, err := Parse("c.toml", []byte(text)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", text, err, want)
		}
	}
}

func TestRuntimeKey(t *testing.T) {
	if d, err := Parse("c.toml", nil); err != nil || d.Runtime != "" {
		t.Fatalf("built-in runtime %q, err %v; want \"\" (moat's default)", d.Runtime, err)
	}
	d, err := Parse("c.toml", []byte("runtime = \"linux\"\n[limits]\npids = 64\n"))
	if err != nil || d.Runtime != "linux" || d.Limits.Pids != 64 {
		t.Fatalf("runtime %q pids %d err %v", d.Runtime, d.Limits.Pids, err)
	}
	for _, bad := range []string{`runtime = ""`, `runtime = "Linux"`, `runtime = "a b"`, `runtime = 1`} {
		if _, err := Parse("c.toml", []byte(bad+"\n")); !errors.Is(err, ErrInvalid) || !strings.Contains(strings.ToLower(err.Error()), "runtime") {
			t.Errorf("%s: got %v, want ErrInvalid naming runtime", bad, err)
		}
	}
}
