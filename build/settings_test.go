package build

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
)

// wantInvalid fails unless err is an api.Error invalid_argument whose
// message holds each of words.
func wantInvalid(t *testing.T, err error, words ...string) {
	t.Helper()
	var e *api.Error
	if !errors.As(err, &e) || e.Code != api.CodeInvalidArgument {
		t.Fatalf("error %v, want invalid_argument", err)
	}
	for _, w := range words {
		if !strings.Contains(e.Message, w) {
			t.Errorf("message %q does not say %q", e.Message, w)
		}
	}
}

func TestLimitsOr(t *testing.T) {
	got := Limits{MaxFiles: 7, Timeout: time.Second}.Or(Defaults)
	want := Defaults
	want.MaxFiles, want.Timeout = 7, time.Second
	if got != want {
		t.Errorf("Or = %+v, want %+v", got, want)
	}
	if (Limits{}).Or(Defaults) != Defaults {
		t.Error("the zero Limits do not become Defaults")
	}
	if err := Defaults.Validate(); err != nil {
		t.Errorf("Defaults: %v", err)
	}
	if err := (Limits{Timeout: 2 * time.Hour}).Or(Defaults).Validate(); err == nil {
		t.Error("a timeout above max_timeout is valid")
	}
	if err := (Limits{MaxFiles: -1}).Or(Defaults).Validate(); err == nil {
		t.Error("a negative max_files is valid")
	}
}

func TestNarrow(t *testing.T) {
	op := Limits{MaxFiles: 100, MaxFileBytes: 1000, MaxTotalBytes: 10000, Timeout: time.Minute, MaxTimeout: time.Hour}

	l, err := op.Narrow(&api.CreateBuild{})
	if err != nil {
		t.Fatal(err)
	}
	want := op.Or(Defaults)
	if l != want {
		t.Errorf("no request values: %+v, want the operator's %+v", l, want)
	}

	l, err = op.Narrow(&api.CreateBuild{MaxFiles: 100, MaxFileBytes: 10, MaxTotalBytes: 20, TimeoutMs: 3_600_000})
	if err != nil {
		t.Fatal(err)
	}
	if l.MaxFiles != 100 || l.MaxFileBytes != 10 || l.MaxTotalBytes != 20 || l.Timeout != time.Hour {
		t.Errorf("narrowed: %+v", l)
	}
	if l.MaxOutputBytes != Defaults.MaxOutputBytes || l.MaxLogBytes != Defaults.MaxLogBytes || l.MaxTimeout != time.Hour {
		t.Errorf("the operator-only caps changed: %+v", l)
	}

	for _, c := range []struct {
		name  string
		req   api.CreateBuild
		words []string
	}{
		{"max_files above", api.CreateBuild{MaxFiles: 101}, []string{"max_files", "101", "100"}},
		{"max_file_bytes above", api.CreateBuild{MaxFileBytes: 1001}, []string{"max_file_bytes", "1000"}},
		{"max_total_bytes above", api.CreateBuild{MaxTotalBytes: 10001}, []string{"max_total_bytes", "10000"}},
		{"timeout above max_timeout", api.CreateBuild{TimeoutMs: 3_600_001}, []string{"timeout_ms", "3600000"}},
		{"max_files negative", api.CreateBuild{MaxFiles: -1}, []string{"max_files", "negative"}},
		{"max_file_bytes negative", api.CreateBuild{MaxFileBytes: -1}, []string{"max_file_bytes", "negative"}},
		{"max_total_bytes negative", api.CreateBuild{MaxTotalBytes: -1}, []string{"max_total_bytes", "negative"}},
		{"timeout negative", api.CreateBuild{TimeoutMs: -1}, []string{"timeout_ms", "negative"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := op.Narrow(&c.req)
			wantInvalid(t, err, c.words...)
		})
	}
}

func TestCheckSettings(t *testing.T) {
	ok := func() api.CreateBuild {
		return api.CreateBuild{
			Template: "go-1.22",
			Command:  []string{"make", "all"},
			Outputs:  []string{"bin/", "out/app.tar"},
			Env:      []string{"CGO_ENABLED=0", "PATH=/opt/go/bin:/usr/bin", "SOURCE_DATE_EPOCH=0", "EMPTY="},
			Net:      "proxy", AllowDomains: []string{"proxy.golang.org"},
		}
	}
	req := ok()
	if err := CheckSettings(&req); err != nil {
		t.Fatalf("control: %v", err)
	}
	manyArgs := make([]string, maxArgs+1)
	for i := range manyArgs {
		manyArgs[i] = "x"
	}
	manyOutputs := make([]string, maxOutputs+1)
	for i := range manyOutputs {
		manyOutputs[i] = strings.Repeat("o", i+1)
	}
	for _, c := range []struct {
		name  string
		edit  func(*api.CreateBuild)
		words []string
	}{
		{"no command", func(r *api.CreateBuild) { r.Command = nil }, []string{"command", "empty"}},
		{"empty argv0", func(r *api.CreateBuild) { r.Command = []string{"", "x"} }, []string{"command[0]"}},
		{"NUL in an argument", func(r *api.CreateBuild) { r.Command = []string{"make", "a\x00b"} }, []string{"command[1]", "NUL"}},
		{"too many arguments", func(r *api.CreateBuild) { r.Command = manyArgs }, []string{"command", "4096"}},
		{"absolute output", func(r *api.CreateBuild) { r.Outputs = []string{"/etc/passwd"} }, []string{"outputs[0]", "absolute"}},
		{"output ..", func(r *api.CreateBuild) { r.Outputs = []string{"bin/../../x"} }, []string{"outputs[0]", ".."}},
		{"output .", func(r *api.CreateBuild) { r.Outputs = []string{"ok", "."} }, []string{"outputs[1]", "/src itself"}},
		{"output not clean", func(r *api.CreateBuild) { r.Outputs = []string{"a//b"} }, []string{"outputs[0]", "not clean"}},
		{"output NUL", func(r *api.CreateBuild) { r.Outputs = []string{"a\x00"} }, []string{"outputs[0]", "NUL"}},
		{"output empty", func(r *api.CreateBuild) { r.Outputs = []string{""} }, []string{"outputs[0]", "empty"}},
		{"output twice", func(r *api.CreateBuild) { r.Outputs = []string{"bin", "bin/"} }, []string{"outputs[1]", "twice"}},
		{"output inside another", func(r *api.CreateBuild) { r.Outputs = []string{"out", "out/sub/app"} }, []string{"out/sub/app", "inside"}},
		{"too many outputs", func(r *api.CreateBuild) { r.Outputs = manyOutputs }, []string{"outputs", "256"}},
		{"env not KEY=VALUE", func(r *api.CreateBuild) { r.Env = []string{"JUSTKEY"} }, []string{"env[0]", "KEY=VALUE"}},
		{"env bad name", func(r *api.CreateBuild) { r.Env = []string{"1X=y"} }, []string{"env[0]", "variable name"}},
		{"env name with a dash", func(r *api.CreateBuild) { r.Env = []string{"A-B=y"} }, []string{"env[0]", "variable name"}},
		{"env empty name", func(r *api.CreateBuild) { r.Env = []string{"=y"} }, []string{"env[0]"}},
		{"env NUL", func(r *api.CreateBuild) { r.Env = []string{"A=b\x00c"} }, []string{"env[0]", "NUL"}},
		{"env twice", func(r *api.CreateBuild) { r.Env = []string{"A=1", "A=2"} }, []string{"env[1]", "twice"}},
		{"env HOME", func(r *api.CreateBuild) { r.Env = []string{"HOME=/root"} }, []string{"HOME", "fixed"}},
		{"env TMPDIR", func(r *api.CreateBuild) { r.Env = []string{"TMPDIR=/tmp"} }, []string{"TMPDIR", "fixed"}},
		{"env XDG_CACHE_HOME", func(r *api.CreateBuild) { r.Env = []string{"XDG_CACHE_HOME=/c"} }, []string{"XDG_CACHE_HOME", "fixed"}},
		{"epoch negative", func(r *api.CreateBuild) { r.Env = []string{"SOURCE_DATE_EPOCH=-1"} }, []string{"SOURCE_DATE_EPOCH"}},
		{"epoch not a number", func(r *api.CreateBuild) { r.Env = []string{"SOURCE_DATE_EPOCH=yesterday"} }, []string{"SOURCE_DATE_EPOCH"}},
		{"epoch with a plus", func(r *api.CreateBuild) { r.Env = []string{"SOURCE_DATE_EPOCH=+5"} }, []string{"SOURCE_DATE_EPOCH"}},
		{"epoch past 9999", func(r *api.CreateBuild) { r.Env = []string{"SOURCE_DATE_EPOCH=253402300800"} }, []string{"SOURCE_DATE_EPOCH"}},
		{"net unknown", func(r *api.CreateBuild) { r.Net = "host" }, []string{"net", "host"}},
		{"allow_domains without proxy", func(r *api.CreateBuild) { r.Net = "none" }, []string{"allow_domains", "proxy"}},
		{"allow_domains empty", func(r *api.CreateBuild) { r.AllowDomains = []string{""} }, []string{"allow_domains[0]"}},
		{"template with a slash", func(r *api.CreateBuild) { r.Template = "../x" }, []string{"template"}},
		{"template with a control", func(r *api.CreateBuild) { r.Template = "a\nb" }, []string{"template", `\n`}},
		{"memory negative", func(r *api.CreateBuild) { r.MemoryBytes = -1 }, []string{"memory_bytes"}},
		{"cpus negative", func(r *api.CreateBuild) { r.CPUs = -1 }, []string{"cpus"}},
		{"pids negative", func(r *api.CreateBuild) { r.Pids = -1 }, []string{"pids"}},
		{"disk negative", func(r *api.CreateBuild) { r.DiskBytes = -1 }, []string{"disk_bytes"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := ok()
			c.edit(&req)
			wantInvalid(t, CheckSettings(&req), c.words...)
		})
	}
	// The least a request can be.
	req = api.CreateBuild{Command: []string{"true"}}
	if err := CheckSettings(&req); err != nil {
		t.Errorf("a bare command: %v", err)
	}
}

func TestOutputPath(t *testing.T) {
	for in, want := range map[string]string{"bin": "bin", "bin/": "bin", "a/b/c.o": "a/b/c.o", "..a/b": "..a/b", "a/..b": "a/..b"} {
		got, err := OutputPath(in)
		if err != nil || got != want {
			t.Errorf("OutputPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", ".", "./", "/", "/a", "..", "../a", "a/..", "a/../b", "a//b", "./a", "a/.", "a\x00"} {
		if got, err := OutputPath(in); err == nil {
			t.Errorf("OutputPath(%q) = %q, want an error", in, got)
		}
	}
}
