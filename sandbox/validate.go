package sandbox

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Bounds on the inputs of a Spec and a Process, checked by Validate
// before anything is built.
const (
	// MaxPathBytes bounds every path input (PATH_MAX less its NUL).
	MaxPathBytes = 4095
	// MaxPathDepth bounds the components of a path input.
	MaxPathDepth = 256
	// MaxArgvEnv bounds a process's argv and environment together,
	// counted as execve counts them: each string's length plus one.
	MaxArgvEnv = 512 << 10
	// MaxCPUWeight bounds Limits.CPUWeight (cgroup v2 cpu.weight's
	// maximum).
	MaxCPUWeight = 10_000
	// MaxBudgetID bounds the length of a budget's id (CheckBudgetID).
	MaxBudgetID = 64
)

// SystemTrees are the host's kernel trees: never a workspace, a bind
// source or a bind target (nor is the host's root, which holds them: a
// bind is recursive). A sandbox has its own /proc and /dev; the
// host's would show host processes, devices and kernel knobs (and their
// filesystems cannot be idmapped anyway).
var SystemTrees = []string{"/proc", "/sys", "/dev"}

// Validate checks what a Spec names before anything is created: the
// workspace, the binds, the working directory, the restrictions and the
// budget's id. Each error wraps ErrInvalidSpec and names the field and
// the check that failed. A runtime may refuse more (its reserved targets,
// a source that does not exist, a budget it does not have).
func (s *Spec) Validate() error {
	if s.Workspace != "" {
		if err := checkHostPath("workspace", s.Workspace); err != nil {
			return err
		}
	}
	for _, b := range s.Binds {
		what := "--ro"
		if b.Writable {
			what = "--rw"
		}
		if err := checkHostPath(what+" bind source", b.Source); err != nil {
			return err
		}
		if b.Target == "" {
			continue // the source's own path, checked above
		}
		if err := CheckPath(what+" bind target", b.Target); err != nil {
			return err
		}
		if b.Target == "/" {
			return invalid(what+" bind target", b.Target, "reserved (the sandbox's root)")
		}
		if t := systemTree(b.Target); t != "" {
			return invalid(what+" bind target", b.Target, "reserved (the sandbox's own "+t+", a system tree)")
		}
	}
	if s.Workdir != "" {
		if err := checkLoosePath("workdir", s.Workdir); err != nil {
			return err
		}
	}
	for _, r := range s.Restrict {
		if err := CheckPath("restricted path", r.Path); err != nil {
			return err
		}
	}
	if s.Budget != "" {
		if err := CheckBudgetID(s.Budget); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks a process request before it is sent into a sandbox:
// a command, no NUL bytes, an absolute working directory, and argv plus
// environment within MaxArgvEnv (an error matching both ErrInvalidSpec and
// ErrTooBig).
func (p *Process) Validate() error {
	if len(p.Args) == 0 {
		return fmt.Errorf("%w: no command", ErrInvalidSpec)
	}
	n := 0
	for _, list := range [][]string{p.Args, p.Env} {
		for _, a := range list {
			if strings.IndexByte(a, 0) >= 0 {
				return fmt.Errorf("%w: args and env must not contain NUL bytes", ErrInvalidSpec)
			}
			n += len(a) + 1
		}
	}
	if n > MaxArgvEnv {
		return fmt.Errorf("%w: %w: argv and environment too large: %d bytes, at most %d", ErrInvalidSpec, ErrTooBig, n, MaxArgvEnv)
	}
	if p.Cwd != "" {
		if err := checkLoosePath("cwd", p.Cwd); err != nil {
			return err
		}
	}
	return nil
}

// CheckPath checks one path input: absolute, clean (no ".", "..", "//"
// or trailing slash), no NUL byte, at most MaxPathBytes bytes and
// MaxPathDepth components. what names the input in the error, which
// wraps ErrInvalidSpec.
func CheckPath(what, p string) error {
	if err := checkLoosePath(what, p); err != nil {
		return err
	}
	if c := path.Clean(p); c != p {
		return invalid(what, p, "not a clean path (want "+Quote(c, 80)+")")
	}
	return nil
}

// checkLoosePath is CheckPath without the cleanliness check (a working
// directory from an image may end in a slash; it is cleaned where used).
func checkLoosePath(what, p string) error {
	switch {
	case p == "":
		return invalid(what, p, "empty")
	case strings.IndexByte(p, 0) >= 0:
		return invalid(what, p, "contains a NUL byte")
	case len(p) > MaxPathBytes:
		return invalid(what, p, fmt.Sprintf("longer than %d bytes", MaxPathBytes))
	case !path.IsAbs(p):
		return invalid(what, p, "not absolute")
	case strings.Count(p, "/") > MaxPathDepth:
		return invalid(what, p, fmt.Sprintf("more than %d components", MaxPathDepth))
	}
	return nil
}

// checkHostPath is CheckPath for a host path the sandbox would see: not
// one of the SystemTrees or below.
func checkHostPath(what, p string) error {
	if err := CheckPath(what, p); err != nil {
		return err
	}
	if t := systemTree(p); t != "" {
		return invalid(what, p, "the host's "+t+" is a system tree and cannot be bound")
	}
	if p == "/" {
		// A bind is recursive: the root would bring the system trees.
		return invalid(what, p, "the host's root holds its system trees (/proc, /sys, /dev) and cannot be bound")
	}
	return nil
}

// systemTree returns the system tree p is or lies under, or "".
func systemTree(p string) string {
	for _, t := range SystemTrees {
		if p == t || strings.HasPrefix(p, t+"/") {
			return t
		}
	}
	return ""
}

// PathError is a refused path input; it matches ErrInvalidSpec.
type PathError struct {
	What   string // "workspace", "--ro bind target", ...
	Path   string
	Reason string
}

func (e *PathError) Error() string {
	return fmt.Sprintf("%v: %s %s: %s", ErrInvalidSpec, e.What, Quote(e.Path, 80), e.Reason)
}

// Is makes errors.Is(err, ErrInvalidSpec) true.
func (e *PathError) Is(target error) bool { return target == ErrInvalidSpec }

func invalid(what, p, reason string) error {
	return &PathError{What: what, Path: p, Reason: reason}
}

// Quote quotes s for an error message: Go-escaped (no control
// characters, no invalid UTF-8) and, when the quoted text would pass max
// bytes, shortened with "…" and the full length in bytes.
func Quote(s string, max int) string {
	if q := strconv.Quote(s); len(q) <= max+2 {
		return q
	}
	b := []byte{'"'}
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		var e string
		if r == utf8.RuneError && w == 1 {
			e = fmt.Sprintf(`\x%02x`, s[i])
		} else {
			q := strconv.Quote(s[i : i+w])
			e = q[1 : len(q)-1]
		}
		if len(b)+len(e) > max+1 {
			break
		}
		b = append(b, e...)
		i += w
	}
	return string(b) + `"` + fmt.Sprintf("…(%d bytes)", len(s))
}

// Validate rejects limits no runtime can enforce as asked: negative ones,
// those below what a sandbox needs to start (16 MiB of memory, 8 pids,
// 1 MiB of disk) or below the kernel's minimum CPU quota (0.01), and a CPU
// weight outside 1-10000. A zero field means the runtime's default.
func (l Limits) Validate() error {
	switch {
	case l.MemoryBytes < 0 || l.Pids < 0 || l.DiskBytes < 0 || l.CPUs < 0 || l.CPUWeight < 0:
		return fmt.Errorf("%w: limits must not be negative", ErrInvalidSpec)
	case l.MemoryBytes > 0 && l.MemoryBytes < 16<<20:
		return fmt.Errorf("%w: memory limit %d is below the 16 MiB a sandbox needs to start", ErrInvalidSpec, l.MemoryBytes)
	case l.Pids > 0 && l.Pids < 8:
		return fmt.Errorf("%w: pids limit %d is below the 8 a sandbox needs to start", ErrInvalidSpec, l.Pids)
	case l.CPUs > 0 && l.CPUs*100_000 < 1000: // 1 ms per 100 ms CFS period
		return fmt.Errorf("%w: cpus %g is below the kernel's minimum quota (0.01)", ErrInvalidSpec, l.CPUs)
	case l.DiskBytes > 0 && l.DiskBytes < 1<<20:
		return fmt.Errorf("%w: disk limit %d is below 1 MiB", ErrInvalidSpec, l.DiskBytes)
	case l.CPUWeight > MaxCPUWeight:
		return fmt.Errorf("%w: cpu weight %d is above %d", ErrInvalidSpec, l.CPUWeight, MaxCPUWeight)
	}
	return nil
}

// CheckHostname accepts an RFC 1123 host name of at most 64 bytes.
func CheckHostname(h string) error {
	if len(h) > 64 {
		return fmt.Errorf("%w: hostname longer than 64 bytes", ErrInvalidSpec)
	}
	for i, c := range h {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' && i > 0 || c == '.' && i > 0
		if !ok {
			return fmt.Errorf("%w: hostname %q is not a valid host name", ErrInvalidSpec, h)
		}
	}
	return nil
}

// CheckBudgetID accepts a budget id (Budgeter, Spec.Budget): 1 to
// MaxBudgetID letters, digits, '-' and '_'.
func CheckBudgetID(id string) error {
	if id == "" || len(id) > MaxBudgetID {
		return fmt.Errorf("%w: budget id %s: want 1 to %d characters", ErrInvalidSpec, Quote(id, MaxBudgetID), MaxBudgetID)
	}
	for _, c := range []byte(id) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("%w: budget id %s: only letters, digits, '-' and '_'", ErrInvalidSpec, Quote(id, MaxBudgetID))
		}
	}
	return nil
}

// CheckBudget checks what a Budgeter's NewBudget is given: the id
// (CheckBudgetID) and the limits (Limits.Validate), whose DiskBytes must
// be zero (each sandbox has its own disk). Errors wrap ErrInvalidSpec.
func CheckBudget(id string, l Limits) error {
	if err := CheckBudgetID(id); err != nil {
		return err
	}
	if err := l.Validate(); err != nil {
		return err
	}
	if l.DiskBytes != 0 {
		return fmt.Errorf("%w: a budget has no disk limit (each sandbox has its own)", ErrInvalidSpec)
	}
	return nil
}

// CheckEnv accepts KEY=VALUE entries with a non-empty key and no NUL byte.
func CheckEnv(env []string) error {
	for _, kv := range env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.Contains(kv, "\x00") {
			return fmt.Errorf("%w: environment entry %q is not KEY=VALUE", ErrInvalidSpec, kv)
		}
	}
	return nil
}
