package build

import (
	"slices"
	"strconv"
	"strings"

	"github.com/moat-sandbox/moat/api"
)

// DefaultEpoch is a build's SOURCE_DATE_EPOCH when the request sets none:
// 1980-01-01T00:00:00Z, the earliest time a zip file can hold.
const DefaultEpoch int64 = 315532800

// DefaultPath is the PATH of a build whose template and request give none.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Epoch is the build's epoch: the request's SOURCE_DATE_EPOCH if it sets
// a valid one (CheckSettings refuses an invalid one), else DefaultEpoch.
// It is SOURCE_DATE_EPOCH in the command's environment and the mtime of
// every entry of the normalized source.
func Epoch(req *api.CreateBuild) int64 {
	for _, kv := range slices.Backward(req.Env) {
		if v, ok := strings.CutPrefix(kv, EnvSourceDateEpoch+"="); ok {
			if n, err := parseEpoch(v); err == nil {
				return n
			}
			break
		}
	}
	return DefaultEpoch
}

// Env is the whole environment of a build's command: moat's standard
// variables (PATH, only when neither template nor caller gives one, so
// that a toolchain template's PATH survives; HOME, TMPDIR and
// XDG_CACHE_HOME under /build; LANG=C.UTF-8; SOURCE_DATE_EPOCH=epoch),
// then the template's, then the caller's, a later key replacing an
// earlier one in place. HOME, TMPDIR, XDG_CACHE_HOME and
// SOURCE_DATE_EPOCH are the build's: a template's or caller's value of
// them is dropped (epoch is the caller's SOURCE_DATE_EPOCH, see Epoch).
// Entries that are not KEY=VALUE are dropped.
func Env(template, caller []string, epoch int64) []string {
	std := []string{
		"HOME=" + api.BuildDir + "/home",
		"TMPDIR=" + api.BuildDir + "/tmp",
		"XDG_CACHE_HOME=" + api.BuildDir + "/cache",
		"LANG=C.UTF-8",
		EnvSourceDateEpoch + "=" + strconv.FormatInt(epoch, 10),
	}
	if !hasKey(template, "PATH") && !hasKey(caller, "PATH") {
		std = append([]string{"PATH=" + DefaultPath}, std...)
	}
	out := make([]string, 0, len(std)+len(template)+len(caller))
	at := make(map[string]int, cap(out))
	add := func(kv string, fixable bool) {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || !fixable && isFixed(k) {
			return
		}
		if i, ok := at[k]; ok {
			out[i] = kv
			return
		}
		at[k] = len(out)
		out = append(out, kv)
	}
	for _, kv := range std {
		add(kv, true)
	}
	for _, kv := range template {
		add(kv, false)
	}
	for _, kv := range caller {
		add(kv, false)
	}
	return out
}

// isFixed reports a variable Env keeps at the build's value.
func isFixed(k string) bool {
	return k == EnvSourceDateEpoch || slices.Contains(fixedEnv, k)
}

// hasKey reports whether env sets k.
func hasKey(env []string, k string) bool {
	return slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, k+"=") })
}

// EnvNames returns the names env sets, sorted, each once (Build.Env: the
// values are not kept, they may be secrets).
func EnvNames(env []string) []string {
	names := make([]string, 0, len(env))
	for _, kv := range env {
		if k, _, ok := strings.Cut(kv, "="); ok && k != "" {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}
