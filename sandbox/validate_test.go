package sandbox

import (
	"errors"
	"path"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestSpecValidate: every path input is checked by name before anything
// is built, with an error matching ErrInvalidSpec that names the field.
func TestSpecValidate(t *testing.T) {
	deep := "/" + strings.Repeat("a/", MaxPathDepth) + "b"
	long := "/" + strings.Repeat("x", MaxPathBytes)
	for _, c := range []struct {
		spec Spec
		want string // "" for valid
	}{
		{Spec{}, ""},
		{Spec{Workspace: "/srv/ws", Binds: []Bind{{Source: "/data", Target: "/mnt/data"}, {Source: "/opt/x"}}, Workdir: "/app/"}, ""},
		{Spec{Workspace: "rel"}, "workspace \"rel\": not absolute"},
		{Spec{Workspace: "/srv/ws/"}, "workspace \"/srv/ws/\": not a clean path (want \"/srv/ws\")"},
		{Spec{Workspace: "/srv/../ws"}, "not a clean path"},
		{Spec{Workspace: "/dev"}, "workspace \"/dev\": the host's /dev is a system tree"},
		{Spec{Workspace: "/proc/1/root"}, "the host's /proc is a system tree"},
		{Spec{Workspace: "/a\x00b"}, `workspace "/a\x00b": contains a NUL byte`},
		{Spec{Workspace: long}, "longer than 4095 bytes"},
		{Spec{Workspace: deep}, "more than 256 components"},
		{Spec{Binds: []Bind{{Source: "/sys"}}}, "--ro bind source \"/sys\": the host's /sys is a system tree"},
		{Spec{Binds: []Bind{{Source: "/sys/fs/cgroup", Target: "/cg"}}}, "system tree"},
		{Spec{Binds: []Bind{{Source: "/devices"}}}, ""}, // not /dev
		{Spec{Binds: []Bind{{Source: "/", Target: "/host"}}}, "the host's root holds its system trees"},
		{Spec{Workspace: "/"}, "the host's root holds its system trees"},
		{Spec{Binds: []Bind{{Source: "/data", Target: "rel", Writable: true}}}, "--rw bind target \"rel\": not absolute"},
		{Spec{Binds: []Bind{{Source: "/data", Target: "."}}}, "not absolute"},
		{Spec{Binds: []Bind{{Source: "/data", Target: "/x/"}}}, "not a clean path"},
		{Spec{Binds: []Bind{{Source: "/data", Target: "/"}}}, "reserved (the sandbox's root)"},
		{Spec{Binds: []Bind{{Source: "/data", Target: "/proc/x"}}}, "reserved (the sandbox's own /proc"},
		{Spec{Binds: []Bind{{Source: "", Target: "/x"}}}, "--ro bind source \"\": empty"},
		{Spec{Workdir: "work"}, "workdir \"work\": not absolute"},
		{Spec{Restrict: []Restriction{{Path: "a/b", Mode: Hide}}}, "restricted path \"a/b\": not absolute"},
		{Spec{Budget: "wf-0123456789ab-tests_2"}, ""},
		{Spec{Budget: "../x"}, "budget id \"../x\": only letters"},
		{Spec{Budget: strings.Repeat("b", MaxBudgetID+1)}, "want 1 to 64 characters"},
	} {
		err := c.spec.Validate()
		if c.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", c.spec, err)
			}
			continue
		}
		if err == nil || !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.80q: %v, want ErrInvalidSpec with %q", c.spec.Workspace+c.spec.Workdir, err, c.want)
		}
		if err != nil && len(err.Error()) > 400 {
			t.Errorf("error of %d bytes", len(err.Error()))
		}
	}
}

// TestLimitsCPUWeight: a CPU weight is 0 (the default) or 1-10000.
func TestLimitsCPUWeight(t *testing.T) {
	for _, w := range []int{0, 1, 100, MaxCPUWeight} {
		if err := (Limits{CPUWeight: w}).Validate(); err != nil {
			t.Errorf("weight %d: %v", w, err)
		}
	}
	for _, w := range []int{-1, MaxCPUWeight + 1} {
		if err := (Limits{CPUWeight: w}).Validate(); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("weight %d: %v", w, err)
		}
	}
}

// TestCheckBudget: a budget's id and limits are checked as a spec's, and
// a disk limit is refused; control: a well-formed budget passes.
func TestCheckBudget(t *testing.T) {
	if err := CheckBudget("wf-1_a", Limits{CPUs: 1, MemoryBytes: 64 << 20, Pids: 64, CPUWeight: 10}); err != nil {
		t.Errorf("control: %v", err)
	}
	for _, c := range []struct {
		id string
		l  Limits
	}{{"", Limits{}}, {"a/b", Limits{}}, {"ok", Limits{DiskBytes: 1 << 30}}, {"ok", Limits{CPUWeight: MaxCPUWeight + 1}}} {
		if err := CheckBudget(c.id, c.l); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("budget %q %+v: %v", c.id, c.l, err)
		}
	}
}

// TestProcessValidate: argv and environment over MaxArgvEnv are too big
// (ErrInvalidSpec and ErrTooBig); NUL bytes and a relative cwd invalid.
func TestProcessValidate(t *testing.T) {
	big := strings.Repeat("x", MaxArgvEnv)
	for _, c := range []struct {
		p      Process
		want   string
		tooBig bool
	}{
		{Process{Args: []string{"true"}}, "", false},
		{Process{Args: []string{"true", big[:MaxArgvEnv-10]}}, "", false},
		{Process{}, "no command", false},
		{Process{Args: []string{"true", big}}, "argv and environment too large: 524294 bytes, at most 524288", true},
		{Process{Args: []string{"true"}, Env: []string{"A=" + big}}, "at most 524288", true},
		{Process{Args: []string{"a\x00b"}}, "NUL", false},
		{Process{Args: []string{"true"}, Cwd: "rel"}, "cwd \"rel\": not absolute", false},
		{Process{Args: []string{"true"}, Cwd: "/workspace/"}, "", false},
	} {
		err := c.p.Validate()
		if c.want == "" {
			if err != nil {
				t.Errorf("%.40v: %v", c.p.Args, err)
			}
			continue
		}
		if err == nil || !errors.Is(err, ErrInvalidSpec) || errors.Is(err, ErrTooBig) != c.tooBig || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.40v: %v, want %q (too big %v)", c.p.Args, err, c.want, c.tooBig)
		}
	}
}

// FuzzCheckPath: CheckPath never panics, accepts only clean absolute
// bounded paths, and walking up from an accepted path with path.Dir
// reaches "/" within its depth; its error is short and printable.
func FuzzCheckPath(f *testing.F) {
	for _, s := range []string{"", "/", ".", "..", "rel", "/a/b", "/a/../b", "/a//b", "/a/", "/a\x00b", "/proc", "/proc/self",
		"/sys/x", "/dev", "/devx", "//", "/\xff\xfe", "/" + strings.Repeat("a/", 300), "/é/\u202e/x", "./x", "x/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		err := CheckPath("p", p)
		herr := checkHostPath("p", p)
		if err != nil {
			if !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("%q: %v does not match ErrInvalidSpec", p, err)
			}
			if herr == nil {
				t.Fatalf("%q: host check passed a refused path", p)
			}
			msg := err.Error()
			if len(msg) > 400 || !utf8.ValidString(msg) || strings.ContainsAny(msg, "\x00\n\r\x1b") {
				t.Fatalf("%q: error %q", p, msg)
			}
			return
		}
		if !path.IsAbs(p) || path.Clean(p) != p || strings.IndexByte(p, 0) >= 0 || len(p) > MaxPathBytes {
			t.Fatalf("%q accepted", p)
		}
		steps := 0
		for q := p; q != "/"; q = path.Dir(q) {
			if steps++; steps > MaxPathDepth+1 {
				t.Fatalf("%q: path.Dir does not reach / in %d steps", p, steps)
			}
		}
		if herr == nil && (systemTree(p) != "" || p == "/") {
			t.Fatalf("%q: a system tree passed the host check", p)
		}
		if (&Spec{Binds: []Bind{{Source: "/data", Target: p}}}).Validate() == nil && (p == "/" || systemTree(p) != "") {
			t.Fatalf("%q accepted as a bind target", p)
		}
	})
}
