package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/build"
)

func TestParseBuild(t *testing.T) {
	d, err := Parse("c.toml", []byte(`
[build]
max_files = 100
max_file_bytes = "1MiB"
max_total_bytes = "8MiB"
max_output_bytes = "16MiB"
max_log_bytes = "2MiB"
timeout = "30s"
max_timeout = "5m"
retention = "1h"
`))
	if err != nil {
		t.Fatal(err)
	}
	want := build.Limits{MaxFiles: 100, MaxFileBytes: 1 << 20, MaxTotalBytes: 8 << 20, MaxOutputBytes: 16 << 20,
		MaxLogBytes: 2 << 20, Timeout: 30 * time.Second, MaxTimeout: 5 * time.Minute}
	if d.Build != want || d.BuildRetention != time.Hour {
		t.Fatalf("got %+v, retention %v", d.Build, d.BuildRetention)
	}
	// Unset keys keep the documented defaults.
	d, err = Parse("c.toml", []byte("[build]\nmax_files = 10\n"))
	if err != nil || d.Build.MaxFiles != 10 || d.Build.Timeout != build.Defaults.Timeout || d.BuildRetention != DefaultBuildRetention {
		t.Fatalf("%+v %v", d.Build, err)
	}
	if d := BuiltIn(); d.Build != build.Defaults || d.BuildRetention != 7*24*time.Hour {
		t.Fatalf("built-in: %+v %v", d.Build, d.BuildRetention)
	}
}

func TestParseBuildErrors(t *testing.T) {
	for text, want := range map[string]string{
		"[build]\nmax_filez = 1\n":             "c.toml:2:1: unknown key \"build.max_filez\"",
		"[build]\nmax_files = 0\n":             "build.max_files",
		"[build]\nmax_files = 20000000\n":      "build.max_files",
		"[build]\nmax_file_bytes = \"lots\"\n": "build.max_file_bytes",
		"[build]\nmax_total_bytes = \"0\"\n":   "build.max_total_bytes",
		"[build]\nmax_output_bytes = \"-1\"\n": "build.max_output_bytes",
		"[build]\nmax_log_bytes = \"x\"\n":     "build.max_log_bytes",
		"[build]\ntimeout = \"0s\"\n":          "build.timeout",
		"[build]\ntimeout = \"2h\"\n":          "build.timeout: 2h0m0s is above max_timeout",
		"[build]\nmax_timeout = \"1m\"\n":      "build.timeout: 10m0s is above max_timeout",
		"[build]\nretention = \"-1h\"\n":       "build.retention",
		"[build]\nmax_file_bytes = \"1GiB\"\n": "build.max_file_bytes: 1073741824 is above max_total_bytes",
		"[build]\nmax_files = \"many\"\n":      "c.toml:2",
	} {
		_, err := Parse("c.toml", []byte(text))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", text, err, want)
		}
	}
}
