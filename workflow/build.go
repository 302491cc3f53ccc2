package workflow

import (
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/build"
	"github.com/moat-sandbox/moat/internal/yamlnode"
)

// A build step (`build:`) compiles the outputs of an earlier step in a
// sandboxed build of the daemon (build.create): the source is checked and
// normalized, the command runs in /src with exactly the environment the
// step gives, and the files its outputs name become the step's artifacts,
// which later steps take as inputs like any step's outputs (at /src/PATH
// in the input). Its fields are those of build.create (api.CreateBuild)
// and of `moat build`'s flags:
//
//	build:
//	  source: fetch          # or fetch:/out/src: one output path of it
//	  command: [make, hello] # or sh: "make hello"
//	  outputs: [hello]       # relative to /src
//	  template: host
//	  timeout: 5m
//	  env: {CFLAGS: -O2}
//	  memory: 512m           # cpus, pids, disk as a run step's limits
//	  net: none              # or proxy, with allow_domains
//	  max_files: 1000        # max_file_bytes, max_total_bytes: sizes
//
// A build step keeps no snapshot (no step starts from it), has no stdout
// stream (no step reads it), and takes from the document's defaults only
// retry and priority: its settings are all its own, so that the
// environment of a build is exactly what it says.

// KindBuild is the Kind of a build step.
const KindBuild = "build"

// Build is what a build step builds.
type Build struct {
	// Source is the step whose outputs are the build's source: the
	// whole directory its outputs were collected into (each output at
	// its path in that step's sandbox), or, when SourcePath is set, only
	// SourcePath below it (one of the step's outputs, or a directory
	// below one; absolute as the step's outputs are).
	Source     string
	SourcePath string
	// Settings are the build's settings as build.create takes them
	// (Content, Detach and Labels are left to the engine).
	Settings api.CreateBuild
}

// fixedBuildEnv are the variables a build's command gets from moat and
// that a build may not set (the build's HOME, TMPDIR and cache, under
// /build): build.CheckSettings refuses them too, but without the line.
var fixedBuildEnv = []string{"HOME", "TMPDIR", "XDG_CACHE_HOME"}

// docBuild is a step's build as written.
type docBuild struct {
	// line and col are where the build key is.
	line, col int
	source    *ref
	// sourcePath is the path after "step:" in source ("" for none).
	sourcePath string
	command    []string
	sh         *string
	outputs    []string
	template   *string
	timeout    *time.Duration
	env        map[string]string
	limits     docLimits
	net        *string
	allow      []string
	maxFiles   *int
	maxFile    *int64
	maxTotal   *int64
	// lines maps a given field ("command", "net") to its value's line.
	lines map[string]int
	// bad is set when reading it found an error: build.CheckSettings is
	// then not asked (it would only say one of them again, without its
	// line).
	bad bool
}

// build reads a step's build, the value n of key k. It returns a docBuild
// even when n is not a valid mapping, so that the step counts as a build
// step.
func (r *reader) build(k, n *yaml.Node, field string) *docBuild {
	b := &docBuild{line: k.Line, col: k.Column, lines: make(map[string]int)}
	before := len(r.errs.errs)
	defer func() { b.bad = len(r.errs.errs) > before }()
	ok := r.Mapping(n, field, func(key string, k, v *yaml.Node) {
		name := yamlnode.Join(field, key)
		switch key {
		case "source":
			b.source, b.sourcePath = r.buildSource(v, name)
		case "command":
			if args, ok := r.argv(v, name); ok {
				b.command = args
			}
		case "sh":
			if s, ok := r.Str(v, name); ok {
				if strings.TrimSpace(s) == "" {
					r.Fail(v, name, "empty command")
				} else {
					b.sh = &s
				}
			}
		case "outputs":
			b.outputs = r.buildOutputs(v, name)
		case "template":
			if s, ok := r.Str(v, name); ok {
				b.template = &s
			}
		case "timeout":
			if d, ok := r.duration(v, name); ok {
				if d > MaxTimeout {
					r.Fail(v, name, "%s is more than the most a step may take (%s)", d, MaxTimeout)
				} else {
					b.timeout = &d
				}
			}
		case "env":
			b.env = r.buildEnv(v, name)
		case "memory", "disk", "max_file_bytes", "max_total_bytes":
			x, ok := r.Size(v, name)
			if !ok {
				break
			}
			switch key {
			case "memory":
				b.limits.memory = &x
			case "disk":
				b.limits.disk = &x
			case "max_file_bytes":
				b.maxFile = &x
			default:
				b.maxTotal = &x
			}
		case "cpus":
			if x, ok := r.Number(v, name); ok {
				b.limits.cpus = &x
			}
		case "pids":
			if x, ok := r.Integer(v, name); ok {
				if x < 0 {
					r.Fail(v, name, "must not be negative")
				} else {
					b.limits.pids = &x
				}
			}
		case "max_files":
			if x, ok := r.count(v, name); ok {
				b.maxFiles = &x
			}
		case "net":
			b.net = r.enum(v, name, "a build network", "none", "proxy")
		case "allow_domains":
			b.allow, _ = r.Strs(v, name)
		default:
			r.Fail(k, name, "unknown field")
			return
		}
		b.lines[key] = v.Line
	})
	if !ok {
		return b
	}
	if b.command != nil && b.sh != nil {
		r.errs.add(b.lines["sh"], 0, yamlnode.Join(field, "sh"), "give command or sh, not both")
	}
	if _, c := b.lines["command"]; !c {
		if _, s := b.lines["sh"]; !s {
			r.Fail(k, yamlnode.Join(field, "command"), "missing: a build needs command (a list of arguments) or sh (a shell command)")
		}
	}
	if _, ok := b.lines["source"]; !ok {
		r.Fail(k, yamlnode.Join(field, "source"), "missing: a build needs the step whose outputs are its source")
	}
	if _, ok := b.lines["allow_domains"]; ok && (b.net == nil || *b.net != "proxy") {
		r.errs.add(b.lines["allow_domains"], 0, yamlnode.Join(field, "allow_domains"), "needs net: proxy")
	}
	return b
}

// buildSource reads source: "STEP" or "STEP:/PATH".
func (r *reader) buildSource(n *yaml.Node, field string) (*ref, string) {
	x := r.ref(n, field)
	if x == nil {
		return nil, ""
	}
	id, p, hasPath := strings.Cut(x.id, ":")
	x.id = id
	switch {
	case id == "":
		r.Fail(n, field, "empty id (write STEP or STEP:/PATH)")
		return nil, ""
	case !hasPath:
		return x, ""
	}
	if msg := badPath(p); msg != "" {
		r.Fail(n, field, "%s", msg)
		return nil, ""
	}
	return x, p
}

// buildOutputs reads a build's outputs: a non-empty list of paths
// relative to /src, clean, none inside another.
func (r *reader) buildOutputs(n *yaml.Node, field string) []string {
	items, ok := r.Sequence(n, field, "a list of paths relative to "+api.BuildSrc)
	if !ok {
		return nil
	}
	if len(items) == 0 {
		r.Fail(n, field, "empty: name the files or directories to collect")
		return nil
	}
	var out []string
	for _, it := range items {
		p, ok := r.Str(it, field)
		if !ok {
			continue
		}
		p, err := build.OutputPath(p)
		if err != nil {
			r.Fail(it, field, "%v", err)
			continue
		}
		if o := overlap(out, p); o != "" {
			r.Fail(it, field, "%s overlaps %s, given before", p, o)
			continue
		}
		out = append(out, p)
	}
	return out
}

// buildEnv reads a build's env: names to string values; HOME, TMPDIR and
// XDG_CACHE_HOME are moat's, SOURCE_DATE_EPOCH a whole number of seconds.
func (r *reader) buildEnv(n *yaml.Node, field string) map[string]string {
	out := make(map[string]string)
	r.Mapping(n, field, func(key string, k, v *yaml.Node) {
		name := yamlnode.Join(field, key)
		switch {
		case key == "" || strings.ContainsAny(key, "=\x00"):
			r.Fail(k, field, "%q is not a variable name", key)
			return
		case slices.Contains(fixedBuildEnv, key):
			r.Fail(k, name, "fixed by moat in every build (under %s)", api.BuildDir)
			return
		}
		s, ok := r.Text(v, name)
		if !ok {
			return
		}
		if key == "SOURCE_DATE_EPOCH" {
			if e, err := strconv.ParseInt(s, 10, 64); err != nil || e < 0 {
				r.Fail(v, name, "%q is not a whole number of seconds of 0 or more", s)
				return
			}
		}
		out[key] = s
	})
	return out
}

// buildOnly records the step-level fields a build step s does not take
// (keys are its keys), and drops its links: its settings are in build,
// it starts from its source, keeps no snapshot and has no stdin.
func (r *reader) buildOnly(s *docStep, keys []*yaml.Node) {
	s.from, s.stdinFrom, s.inputs, s.outputs = nil, nil, nil, nil
	for _, k := range keys {
		var msg string
		switch k.Value {
		case "run", "sh":
			msg = "a build step runs build.command or build.sh"
		case "template", "timeout", "env":
			msg = "a build step takes it in build: write build." + k.Value
		case "limits":
			msg = "a build step takes them in build: write build.memory, build.cpus, build.pids, build.disk"
		case "network":
			msg = "a build step takes it in build: write build.net and build.allow_domains"
		case "policy":
			msg = "a build runs under the daemon's policy for builds: a step cannot give its own"
		case "snapshot":
			msg = "a build step keeps no snapshot"
		case "from":
			msg = "a build step starts from its source (build.source), not from a snapshot"
		case "inputs":
			msg = "a build step takes its source in build.source"
		case "outputs":
			msg = "a build step collects build.outputs (relative to " + api.BuildSrc + ")"
		case "stdin_from":
			msg = "a build step has no standard input"
		default:
			continue
		}
		r.Fail(k, k.Value, "%s", msg)
	}
}

// resolveBuild fills st, a build step, from its build b: the build's
// settings, and for the plan the template, timeout, limits and env of its
// sandbox (the same values), its outputs as absolute paths in /src and no
// snapshot. Settings that read without error are checked as build.create
// checks them (build.CheckSettings), an error recorded in errs at the
// build's line.
func resolveBuild(st *Step, b *docBuild, errs *errList) {
	st.Kind = KindBuild
	st.Snapshot = SnapshotNone
	set := api.CreateBuild{
		Template:      or(b.template, nil, ""),
		Outputs:       slices.Clone(b.outputs),
		MaxFiles:      or(b.maxFiles, nil, 0),
		MaxFileBytes:  or(b.maxFile, nil, 0),
		MaxTotalBytes: or(b.maxTotal, nil, 0),
		Net:           or(b.net, nil, ""),
		AllowDomains:  slices.Clone(b.allow),
		MemoryBytes:   or(b.limits.memory, nil, 0),
		CPUs:          or(b.limits.cpus, nil, 0),
		Pids:          or(b.limits.pids, nil, 0),
		DiskBytes:     or(b.limits.disk, nil, 0),
	}
	if b.sh != nil {
		set.Command = []string{"/bin/sh", "-c", *b.sh}
		st.Sh = *b.sh
	} else {
		set.Command = slices.Clone(b.command)
	}
	if b.timeout != nil {
		st.Timeout = *b.timeout
		set.TimeoutMs = int64((*b.timeout + time.Millisecond - 1) / time.Millisecond)
	}
	for _, k := range slices.Sorted(maps.Keys(b.env)) {
		set.Env = append(set.Env, k+"="+b.env[k])
	}
	st.Args = slices.Clone(set.Command)
	st.Template = set.Template
	st.Env = slices.Clone(set.Env)
	st.Limits.MemoryBytes, st.Limits.CPUs = set.MemoryBytes, set.CPUs
	st.Limits.Pids, st.Limits.DiskBytes = set.Pids, set.DiskBytes
	st.Outputs = nil
	for _, o := range b.outputs {
		st.Outputs = append(st.Outputs, api.BuildSrc+"/"+o)
	}
	if !b.bad {
		if err := build.CheckSettings(&set); err != nil {
			msg := err.Error()
			if ae := (*api.Error)(nil); errors.As(err, &ae) {
				msg = ae.Message
			}
			errs.add(b.line, b.col, "build", "%s", msg)
		}
	}
	st.Build = &Build{Settings: set}
	if b.source != nil {
		st.Build.Source, st.Build.SourcePath = b.source.id, b.sourcePath
	}
}

// buildLinks checks the source of s, a build step (src is where it is
// written): a step that s waits for (isAnc), with outputs, and the path,
// if any, one of them or below one.
func (b *builder) buildLinks(ix *planIndex, s *PlanStep, src *docStep, isAnc func(x, a string) bool) {
	x := src.build.source
	f := ix.steps[s.Build.Source]
	if x == nil || f == nil {
		return
	}
	fail := func(format string, args ...any) {
		b.errs.add(x.line, x.col, "build.source", format, args...)
	}
	p := s.Build.SourcePath
	switch {
	case !isAnc(s.ID, f.ID):
		fail("step %q is not an ancestor of %q (%s does not wait for it)", f.ID, s.ID, s.ID)
	case len(f.Outputs) == 0:
		fail("step %q has no outputs", f.ID)
	case p != "" && !slices.ContainsFunc(f.Outputs, func(o string) bool { return p == o || strings.HasPrefix(p, o+"/") }):
		fail("%s is not an output of step %q, nor below one (%s)", p, f.ID, strings.Join(f.Outputs, ", "))
	}
}
