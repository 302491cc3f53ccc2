package compile

import (
	"errors"
	"os"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/sandbox"
)

// fuzzDeadline is how long one input may take: the compiler must end for
// any path (the walk up, the view, the restrictions).
const fuzzDeadline = 5 * time.Second

// FuzzCompilePaths compiles specs with fuzzed workspace and bind paths
// (a dry run with a small walk budget: nothing is created on the host).
// It must return within the deadline; a spec that Validate refuses must
// be refused with ErrInvalidSpec; a compiled spec's restrictions are
// clean absolute paths other than "/".
func FuzzCompilePaths(f *testing.F) {
	base, err := os.MkdirTemp("", "moat-fuzz-compile-")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { os.RemoveAll(base) })
	for _, p := range []string{"ws/.git/hooks/", "ws/.git/config", "ws/.bashrc", "ws/sub/.git/config", "src/.git/config", "src/.env", "src/id_rsa"} {
		full := path.Join(base, p)
		if strings.HasSuffix(p, "/") {
			_ = os.MkdirAll(full, 0o755)
			continue
		}
		_ = os.MkdirAll(path.Dir(full), 0o755)
		_ = os.WriteFile(full, []byte("x"), 0o644)
	}
	// Seeds: the inputs of issue 16 item 7 and their neighbours. "@"
	// stands for the fuzz tree's base directory.
	for _, s := range [][3]string{
		{"@/ws", "@/src", "rel"}, {"@/ws", "@/src", "."}, {"@/ws", "@/src", ""}, {"@/ws", "@/src", "./x"},
		{"@/ws", "@/src", "../x"}, {"@/ws", "@/src", "x/"}, {"@/ws", "@/src", "/data"}, {"@/ws", "@/src", "/workspace/sub"},
		{"", "@/src", "/"}, {"@/ws", "/var/lib", "rel"}, {"ws", "@/src", "/data"}, {"@/ws/", "@/src/", "/data/"},
		{"@/ws", "@/src", "/proc/x"}, {"/dev", "@/src", "/x"}, {"@/ws", "/sys", "/x"}, {"@/ws", "@/src", "/a\x00b"},
		{"@/ws", "@/src", "/" + strings.Repeat("d/", 300)}, {"@/ws", "@/src", "//x"}, {"@/ws", "@/ws", "/workspace"},
	} {
		f.Add(s[0], s[1], s[2], true)
	}
	f.Fuzz(func(t *testing.T, ws, src, target string, writable bool) {
		ws = strings.ReplaceAll(ws, "@", base)
		src = strings.ReplaceAll(src, "@", base)
		target = strings.ReplaceAll(target, "@", base)
		spec := &sandbox.Spec{Workspace: ws, Binds: []sandbox.Bind{{Source: src, Target: target, Writable: writable}}}
		verr := spec.Validate()
		type out struct {
			spec *sandbox.Spec
			err  error
		}
		ch := make(chan out, 1)
		go func() {
			eff, err := policy.Compile(Context(spec, base+"/home"))
			if err != nil {
				// The policy refuses the context itself (a relative
				// workspace): the compiler must refuse the spec on
				// its own, under any policy.
				if eff, err = policy.Compile(Context(&sandbox.Spec{}, base+"/home")); err != nil {
					ch <- out{err: err}
					return
				}
			}
			s, _, err := Policy(eff, spec, Options{DryRun: true, MaxWalk: 200})
			ch <- out{s, err}
		}()
		var o out
		select {
		case o = <-ch:
		case <-time.After(fuzzDeadline):
			t.Fatalf("Compile(ws %.100q, bind %.100q:%.100q) did not return within %v", ws, src, target, fuzzDeadline)
		}
		if verr != nil {
			if !errors.Is(o.err, sandbox.ErrInvalidSpec) {
				t.Fatalf("invalid spec (%v) compiled: %v", verr, o.err)
			}
			return
		}
		if o.err != nil {
			var de *DeniedError
			if !errors.As(o.err, &de) && !errors.Is(o.err, policy.ErrInvalid) {
				t.Fatalf("valid spec: %v", o.err)
			}
			return
		}
		for _, r := range o.spec.Restrict {
			if !path.IsAbs(r.Path) || path.Clean(r.Path) != r.Path || r.Path == "/" {
				t.Fatalf("restriction of %q", r.Path)
			}
		}
	})
}

// FuzzViewPaths maps fuzzed sandbox and host paths through a view of a
// valid spec: Host and Sandbox must end quickly, never panic, and give
// clean absolute paths.
func FuzzViewPaths(f *testing.F) {
	for _, s := range []string{"", ".", "rel", "/", "/workspace", "/workspace/../etc", "/data/x", "//data", "/data/", "/a\x00", "/usr/bin/ls"} {
		f.Add(s)
	}
	v := NewView(&sandbox.Spec{Workspace: "/h/ws", Binds: []sandbox.Bind{{Source: "/h/data", Target: "/data"}, {Source: "/opt/x"}}})
	f.Fuzz(func(t *testing.T, p string) {
		if h, ok := v.Host(p); ok && (!path.IsAbs(h) || path.Clean(h) != h) {
			t.Fatalf("Host(%q) = %q", p, h)
		}
		if path.IsAbs(p) && path.Clean(p) == p {
			if sp, _, ok := v.Sandbox(p); ok && (!path.IsAbs(sp) || path.Clean(sp) != sp) {
				t.Fatalf("Sandbox(%q) = %q", p, sp)
			}
		}
	})
}
