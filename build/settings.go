package build

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/api"
)

// Limits are the caps of builds: the operator's (server config, section
// [build]) are the defaults and the ceilings of every build; Narrow makes
// one build's from a request, which may only lower them.
type Limits struct {
	// Caps of the source package: entries (files, directories,
	// symlinks, hardlinks), the size of one regular file and the sizes of
	// all added up.
	MaxFiles      int
	MaxFileBytes  int64
	MaxTotalBytes int64
	// MaxOutputBytes caps the collected outputs added up; MaxLogBytes
	// what is kept of the command's output.
	MaxOutputBytes int64
	MaxLogBytes    int64
	// Timeout is a build's default timeout, MaxTimeout the largest one a
	// request may ask for.
	Timeout    time.Duration
	MaxTimeout time.Duration
}

// Defaults are the documented defaults of Limits.
var Defaults = Limits{
	MaxFiles:       50_000,
	MaxFileBytes:   64 << 20,
	MaxTotalBytes:  512 << 20,
	MaxOutputBytes: 1 << 30,
	MaxLogBytes:    64 << 20,
	Timeout:        10 * time.Minute,
	MaxTimeout:     time.Hour,
}

// Or returns l with its zero fields taken from def.
func (l Limits) Or(def Limits) Limits {
	if l.MaxFiles == 0 {
		l.MaxFiles = def.MaxFiles
	}
	if l.MaxFileBytes == 0 {
		l.MaxFileBytes = def.MaxFileBytes
	}
	if l.MaxTotalBytes == 0 {
		l.MaxTotalBytes = def.MaxTotalBytes
	}
	if l.MaxOutputBytes == 0 {
		l.MaxOutputBytes = def.MaxOutputBytes
	}
	if l.MaxLogBytes == 0 {
		l.MaxLogBytes = def.MaxLogBytes
	}
	if l.Timeout == 0 {
		l.Timeout = def.Timeout
	}
	if l.MaxTimeout == 0 {
		l.MaxTimeout = def.MaxTimeout
	}
	return l
}

// Validate checks an operator's limits (after Or): no negative field, and
// Timeout at most MaxTimeout.
func (l Limits) Validate() error {
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"max_files", int64(l.MaxFiles)},
		{"max_file_bytes", l.MaxFileBytes},
		{"max_total_bytes", l.MaxTotalBytes},
		{"max_output_bytes", l.MaxOutputBytes},
		{"max_log_bytes", l.MaxLogBytes},
		{"timeout", int64(l.Timeout)},
		{"max_timeout", int64(l.MaxTimeout)},
	} {
		if f.v < 0 {
			return fmt.Errorf("build limits: %s is negative", f.name)
		}
	}
	if l.Timeout > l.MaxTimeout {
		return fmt.Errorf("build limits: timeout %v is above max_timeout %v", l.Timeout, l.MaxTimeout)
	}
	return nil
}

// Narrow returns the limits of one build: op (the operator's, zero
// fields taken from Defaults) lowered by the request's max_files,
// max_file_bytes, max_total_bytes and timeout_ms where they are set. A
// negative value, or one above the operator's cap (max_timeout for
// timeout_ms), is an *api.Error invalid_argument naming the field and the
// cap.
func (op Limits) Narrow(req *api.CreateBuild) (Limits, error) {
	op = op.Or(Defaults)
	l := op
	narrow := func(field string, v, cap int64) (int64, error) {
		switch {
		case v < 0:
			return 0, api.Errorf(api.CodeInvalidArgument, "%s: %d is negative", field, v)
		case v > cap:
			return 0, api.Errorf(api.CodeInvalidArgument, "%s: %d is above the operator's cap of %d", field, v, cap)
		case v == 0:
			return cap, nil
		}
		return v, nil
	}
	n, err := narrow("max_files", int64(req.MaxFiles), int64(op.MaxFiles))
	if err != nil {
		return Limits{}, err
	}
	l.MaxFiles = int(n)
	if l.MaxFileBytes, err = narrow("max_file_bytes", req.MaxFileBytes, op.MaxFileBytes); err != nil {
		return Limits{}, err
	}
	if l.MaxTotalBytes, err = narrow("max_total_bytes", req.MaxTotalBytes, op.MaxTotalBytes); err != nil {
		return Limits{}, err
	}
	switch ms := req.TimeoutMs; {
	case ms < 0:
		return Limits{}, api.Errorf(api.CodeInvalidArgument, "timeout_ms: %d is negative", ms)
	case ms > op.MaxTimeout.Milliseconds():
		return Limits{}, api.Errorf(api.CodeInvalidArgument, "timeout_ms: %d is above the operator's cap of %d (%v)", ms, op.MaxTimeout.Milliseconds(), op.MaxTimeout)
	case ms > 0:
		l.Timeout = time.Duration(ms) * time.Millisecond
	}
	if l.Timeout > l.MaxTimeout {
		l.Timeout = l.MaxTimeout // an operator's default above its own cap
	}
	return l, nil
}

// Caps of a request's lists, and of SOURCE_DATE_EPOCH (9999-12-31T23:59:59Z:
// beyond it, file systems and tar formats disagree on the time).
const (
	maxArgs          = 4096
	maxOutputs       = 256
	maxTemplateBytes = 255
	maxEpoch         = 253402300799
)

// Variables the build fixes (api.BuildDir): a request may not set them.
var fixedEnv = []string{"HOME", "TMPDIR", "XDG_CACHE_HOME"}

// EnvSourceDateEpoch is the variable that carries the build's epoch.
const EnvSourceDateEpoch = "SOURCE_DATE_EPOCH"

// CheckSettings checks what a request asks of a build, before anything
// runs: the command (non-empty, at most 4096 arguments, no NUL byte), the
// outputs (at most 256, each as OutputPath accepts it, no two the same,
// none inside another),
// the environment (KEY=VALUE with a name of letters, digits and "_" not
// starting with a digit, no NUL, no name twice, not HOME, TMPDIR or
// XDG_CACHE_HOME, SOURCE_DATE_EPOCH an integer from 0), the network
// ("", "none" or "proxy"; allow_domains only with "proxy"), the
// template's name and the sandbox's limits (not negative). Its errors are
// *api.Error invalid_argument naming the field and why. The caps are
// Narrow's.
func CheckSettings(req *api.CreateBuild) error {
	if err := checkCommand(req.Command); err != nil {
		return err
	}
	if len(req.Outputs) > maxOutputs {
		return invalid("outputs: %d paths, at most %d", len(req.Outputs), maxOutputs)
	}
	outs := make(map[string]bool, len(req.Outputs))
	for i, o := range req.Outputs {
		p, err := OutputPath(o)
		if err != nil {
			return invalid("outputs[%d]: %v", i, err)
		}
		if outs[p] {
			return invalid("outputs[%d]: %s is given twice", i, strconv.Quote(p))
		}
		outs[p] = true
	}
	// One output inside another would be collected twice (and the second
	// copy refused): say so before anything runs.
	for p := range outs {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if outs[d] {
				return invalid("outputs: %s is inside %s, which is collected whole", strconv.Quote(p), strconv.Quote(d))
			}
		}
	}
	if err := checkEnv(req.Env); err != nil {
		return err
	}
	switch req.Net {
	case "", "none":
		if len(req.AllowDomains) > 0 {
			return invalid("allow_domains: only with net=proxy")
		}
	case "proxy":
		for i, d := range req.AllowDomains {
			if d == "" || strings.ContainsFunc(d, isControl) {
				return invalid("allow_domains[%d]: %s is not a domain", i, strconv.Quote(d))
			}
		}
	default:
		return invalid("net: %s is not none or proxy", strconv.Quote(req.Net))
	}
	if t := req.Template; len(t) > maxTemplateBytes || strings.ContainsFunc(t, func(r rune) bool {
		return isControl(r) || r == '/' || r == ' '
	}) {
		return invalid("template: %s is not a template name", quote(t))
	}
	for _, f := range []struct {
		name string
		bad  bool
	}{
		{"memory_bytes", req.MemoryBytes < 0},
		{"cpus", req.CPUs < 0 || req.CPUs != req.CPUs},
		{"pids", req.Pids < 0},
		{"disk_bytes", req.DiskBytes < 0},
	} {
		if f.bad {
			return invalid("%s: negative", f.name)
		}
	}
	return nil
}

// checkCommand checks the command's argv.
func checkCommand(argv []string) error {
	switch {
	case len(argv) == 0:
		return invalid("command: empty")
	case len(argv) > maxArgs:
		return invalid("command: %d arguments, at most %d", len(argv), maxArgs)
	case argv[0] == "":
		return invalid("command[0]: empty")
	}
	for i, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return invalid("command[%d]: NUL byte", i)
		}
	}
	return nil
}

// checkEnv checks the request's KEY=VALUE pairs.
func checkEnv(env []string) error {
	seen := make(map[string]bool, len(env))
	for i, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		switch {
		case !ok:
			return invalid("env[%d]: %s is not KEY=VALUE", i, quote(kv))
		case !validEnvName(k):
			return invalid("env[%d]: %s is not a variable name (letters, digits and _, not starting with a digit)", i, quote(k))
		case strings.IndexByte(v, 0) >= 0:
			return invalid("env[%d]: %s: NUL byte in the value", i, k)
		case seen[k]:
			return invalid("env[%d]: %s is given twice", i, k)
		}
		for _, f := range fixedEnv {
			if k == f {
				return invalid("env[%d]: %s is fixed by the build (under %s)", i, k, api.BuildDir)
			}
		}
		if k == EnvSourceDateEpoch {
			if _, err := parseEpoch(v); err != nil {
				return invalid("env[%d]: %s: %v", i, k, err)
			}
		}
		seen[k] = true
	}
	return nil
}

// parseEpoch parses a SOURCE_DATE_EPOCH: decimal seconds from 0 to
// 9999-12-31.
func parseEpoch(v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > maxEpoch || v[0] == '+' {
		return 0, fmt.Errorf("%s is not an integer from 0 to %d", quote(v), int64(maxEpoch))
	}
	return n, nil
}

// validEnvName accepts [A-Za-z_][A-Za-z0-9_]*.
func validEnvName(k string) bool {
	if k == "" {
		return false
	}
	for i := range len(k) {
		c := k[i]
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// OutputPath checks a declared output and returns it clean: relative to
// /src, not /src itself, without ".." or a NUL byte. A trailing "/" is
// accepted and dropped; any other unclean form ("a//b", "a/./b") is
// refused, so that the path collected is the path given.
func OutputPath(p string) (string, error) {
	switch {
	case p == "":
		return "", fmt.Errorf("empty path")
	case strings.IndexByte(p, 0) >= 0:
		return "", fmt.Errorf("%s: NUL byte", quote(p))
	case strings.HasPrefix(p, "/"):
		return "", fmt.Errorf("%s is absolute (outputs are relative to %s)", quote(p), api.BuildSrc)
	}
	c := strings.TrimSuffix(p, "/")
	switch {
	case c == "." || c == "":
		return "", fmt.Errorf("%s is %s itself", quote(p), api.BuildSrc)
	case c == ".." || strings.HasPrefix(c, "../") || strings.HasSuffix(c, "/..") || strings.Contains(c, "/../"):
		return "", fmt.Errorf("%s has a \"..\"", quote(p))
	case path.Clean(c) != c:
		return "", fmt.Errorf("%s is not clean (it would be %s)", quote(p), quote(path.Clean(c)))
	}
	return c, nil
}

// invalid is an api.Error invalid_argument.
func invalid(format string, args ...any) error {
	return api.Errorf(api.CodeInvalidArgument, format, args...)
}

// isControl reports a control character (C0, DEL, C1).
func isControl(r rune) bool {
	return r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0
}

// maxShown is how much of a name an error message shows.
const maxShown = 200

// quote shows a name safely in a message: Go-quoted (no raw control
// character) and shortened if long.
func quote(s string) string {
	if len(s) > maxShown {
		return strconv.Quote(s[:maxShown]) + "…"
	}
	return strconv.Quote(s)
}
