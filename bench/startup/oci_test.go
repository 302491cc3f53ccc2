package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/bench/internal/machine"
)

// decode round-trips v through JSON into generic maps, as a runtime would
// read config.json.
func decode(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("config.json is not valid JSON: %v", err)
	}
	return m
}

func get(m any, path ...string) any {
	for _, k := range path {
		mm, ok := m.(map[string]any)
		if !ok {
			return nil
		}
		m = mm[k]
	}
	return m
}

// mountsByDest indexes the config's mounts by destination.
func mountsByDest(t *testing.T, m map[string]any) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, x := range m["mounts"].([]any) {
		mt := x.(map[string]any)
		d := mt["destination"].(string)
		if _, dup := out[d]; dup {
			t.Errorf("mount %s twice", d)
		}
		out[d] = mt
	}
	return out
}

func mountOpts(mt map[string]any) []string {
	var opts []string
	for _, o := range mt["options"].([]any) {
		opts = append(opts, o.(string))
	}
	return opts
}

func namespaces(m map[string]any) []string {
	var ns []string
	for _, x := range get(m, "linux", "namespaces").([]any) {
		ns = append(ns, x.(map[string]any)["type"].(string))
	}
	return ns
}

var mergedUsr = []machine.SystemLink{{Path: "/bin", Target: "usr/bin"}, {Path: "/lib", Target: "usr/lib"}, {Path: "/lib64", Target: "usr/lib64"}, {Path: "/sbin", Target: "usr/sbin"}}

func TestOCIConfig(t *testing.T) {
	m := decode(t, ociConfig(ociOptions{userns: true, cgroupsPath: "/moat-bench-runc-1", limitSwap: true}, mergedUsr))

	if v := m["ociVersion"]; v != "1.0.2" {
		t.Errorf("ociVersion %v", v)
	}
	p := m["process"].(map[string]any)
	if args := p["args"].([]any); len(args) != 1 || args[0] != "/bin/true" {
		t.Errorf("args %v", args)
	}
	if p["cwd"] != "/workspace" || p["noNewPrivileges"] != true || p["terminal"] != false {
		t.Errorf("process %v", p)
	}
	for _, set := range []string{"bounding", "effective", "inheritable", "permitted", "ambient"} {
		// An empty list, not null or absent: no capability at all.
		if c, ok := get(p, "capabilities", set).([]any); !ok || len(c) != 0 {
			t.Errorf("capabilities.%s = %v, want []", set, get(p, "capabilities", set))
		}
	}
	if get(m, "root", "path") != "rootfs" || get(m, "root", "readonly") != true {
		t.Errorf("root %v", m["root"])
	}

	ns := namespaces(m)
	for _, want := range []string{"pid", "network", "ipc", "uts", "mount", "cgroup", "user"} {
		if !slices.Contains(ns, want) {
			t.Errorf("namespace %s missing: %v", want, ns)
		}
	}
	for _, k := range []string{"uidMappings", "gidMappings"} {
		maps, _ := get(m, "linux", k).([]any)
		if len(maps) != 1 {
			t.Fatalf("%s %v", k, maps)
		}
		mp := maps[0].(map[string]any)
		if mp["containerID"] != 0.0 || mp["hostID"] != float64(ociIDBase) || mp["size"] != 65536.0 {
			t.Errorf("%s %v", k, mp)
		}
		if mp["hostID"].(float64) < 1<<16 {
			t.Errorf("%s maps to the host's ordinary ids", k)
		}
	}

	if get(m, "linux", "cgroupsPath") != "/moat-bench-runc-1" {
		t.Errorf("cgroupsPath %v", get(m, "linux", "cgroupsPath"))
	}
	r := get(m, "linux", "resources")
	for path, want := range map[string]float64{
		"memory.limit": 2 << 30, "memory.swap": 2 << 30, "cpu.quota": 200000, "cpu.period": 100000, "pids.limit": 1024,
	} {
		if got := get(r, strings.Split(path, ".")...); got != want {
			t.Errorf("resources.%s = %v, want %v", path, got, want)
		}
	}
	if d, _ := get(r, "devices").([]any); len(d) != 1 || get(d[0], "allow") != false || get(d[0], "access") != "rwm" {
		t.Errorf("devices cgroup %v, want deny all (the runtime allows its default devices)", get(r, "devices"))
	}

	mounts := mountsByDest(t, m)
	want := map[string]string{"/proc": "proc", "/dev": "tmpfs", "/dev/pts": "devpts", "/dev/shm": "tmpfs",
		"/usr": "bind", "/etc": "bind", "/tmp": "tmpfs", "/workspace": "tmpfs"}
	for d, typ := range want {
		if mounts[d] == nil || mounts[d]["type"] != typ {
			t.Errorf("mount %s: %v, want type %s", d, mounts[d], typ)
		}
	}
	for _, d := range []string{"/usr", "/etc"} {
		if mounts[d]["source"] != d || !slices.Contains(mountOpts(mounts[d]), "ro") {
			t.Errorf("%s is not a read-only bind of the host's: %v", d, mounts[d])
		}
	}
	if len(mounts) != len(want) {
		t.Errorf("mounts %v, want only %v (the merged-/usr links are symlinks, not binds)", mounts, want)
	}
	// In a user namespace the tty group of devpts's gid=5 is not mapped.
	if slices.ContainsFunc(mountOpts(mounts["/dev/pts"]), func(o string) bool { return strings.HasPrefix(o, "gid=") }) {
		t.Errorf("devpts options %v with a user namespace", mountOpts(mounts["/dev/pts"]))
	}
	for _, masked := range []string{"/proc/kcore", "/proc/keys"} {
		if !slices.Contains(get(m, "linux", "maskedPaths").([]any), any(masked)) {
			t.Errorf("%s not masked", masked)
		}
	}
}

func TestOCIConfigWithoutUsernsOrLimits(t *testing.T) {
	m := decode(t, ociConfig(ociOptions{}, mergedUsr))
	if slices.Contains(namespaces(m), "user") {
		t.Error("user namespace without userns")
	}
	for _, k := range []string{"uidMappings", "gidMappings", "resources", "cgroupsPath"} {
		if v, ok := m["linux"].(map[string]any)[k]; ok {
			t.Errorf("linux.%s = %v, want absent", k, v)
		}
	}
	if !slices.Contains(mountOpts(mountsByDest(t, m)["/dev/pts"]), "gid=5") {
		t.Error("devpts without gid=5 on the host's ids")
	}
	m = decode(t, ociConfig(ociOptions{cgroupsPath: "/x"}, nil))
	if v := get(m, "linux", "resources", "memory", "swap"); v != nil {
		t.Errorf("memory.swap = %v without limitSwap", v)
	}
}

// fakeHost makes a host root with the given top-level entries: "dir/" a
// directory, "name->target" a symlink.
func fakeHost(t *testing.T, entries ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, e := range entries {
		var err error
		if name, target, ok := strings.Cut(e, "->"); ok {
			err = os.Symlink(target, filepath.Join(root, name))
		} else {
			err = os.MkdirAll(filepath.Join(root, e), 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestHostLayout(t *testing.T) {
	merged := fakeHost(t, "usr/bin/", "bin->usr/bin", "lib->usr/lib", "lib64->usr/lib64", "sbin->usr/sbin")
	if got := machine.HostLayout(merged); !slices.Equal(got, mergedUsr) {
		t.Errorf("merged /usr: %v, want %v", got, mergedUsr)
	}
	// A split host: directories become read-only binds; what it lacks
	// (lib64, libx32) is left out; a file is neither.
	split := fakeHost(t, "usr/", "bin/", "sbin/", "lib/", "lib32/")
	if err := os.WriteFile(filepath.Join(split, "libx32"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	want := []machine.SystemLink{{Path: "/bin", Target: ""}, {Path: "/lib", Target: ""}, {Path: "/sbin", Target: ""}, {Path: "/lib32", Target: ""}}
	got := machine.HostLayout(split)
	if !slices.Equal(got, want) {
		t.Fatalf("split /usr: %v, want %v", got, want)
	}
	mounts := mountsByDest(t, decode(t, ociConfig(ociOptions{}, got)))
	for _, l := range want {
		mt := mounts[l.Path]
		if mt == nil || mt["type"] != "bind" || mt["source"] != l.Path || !slices.Contains(mountOpts(mt), "ro") {
			t.Errorf("split host: %s not bound read-only: %v", l.Path, mt)
		}
	}
}

func TestWriteBundle(t *testing.T) {
	for _, c := range []struct {
		name  string
		host  []string
		links map[string]string // symlinks expected in rootfs
		dirs  []string          // mount points expected in rootfs
	}{
		{"merged", []string{"usr/bin/", "bin->usr/bin", "lib->usr/lib", "sbin->usr/sbin"},
			map[string]string{"bin": "usr/bin", "lib": "usr/lib", "sbin": "usr/sbin"},
			[]string{"proc", "dev", "usr", "etc", "tmp", "workspace"}},
		{"split", []string{"usr/", "bin/", "lib/", "lib64/", "sbin/"}, nil,
			[]string{"proc", "dev", "usr", "etc", "tmp", "workspace", "bin", "lib", "lib64", "sbin"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			// userns off: its chown of rootfs needs root.
			if err := writeBundle(dir, ociOptions{hostRoot: fakeHost(t, c.host...), cgroupsPath: "/id"}); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(dir, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			var spec ociSpec
			if err := json.Unmarshal(b, &spec); err != nil || spec.Root.Path != "rootfs" {
				t.Fatalf("config.json: %v, root %q", err, spec.Root.Path)
			}
			root := filepath.Join(dir, "rootfs")
			ents, err := os.ReadDir(root)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			if len(names) != len(c.dirs)+len(c.links) {
				t.Errorf("rootfs holds %v", names)
			}
			for _, d := range c.dirs {
				if fi, err := os.Lstat(filepath.Join(root, d)); err != nil || !fi.IsDir() {
					t.Errorf("mount point %s: %v", d, err)
				}
			}
			for l, target := range c.links {
				if got, err := os.Readlink(filepath.Join(root, l)); err != nil || got != target {
					t.Errorf("symlink %s -> %q (%v), want -> %s", l, got, err, target)
				}
			}
			// runc gives a tmpfs its mount point's mode.
			if fi, err := os.Stat(filepath.Join(root, "tmp")); err != nil || fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
				t.Errorf("rootfs/tmp mode %v (%v), want 1777", fi.Mode(), err)
			}
			// The runtime creates /dev's mount points inside its tmpfs.
			if _, err := os.Lstat(filepath.Join(root, "dev", "pts")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("rootfs/dev/pts: %v, want none", err)
			}
		})
	}
}

func TestTmpfsMode(t *testing.T) {
	for _, c := range []struct {
		m    ociMount
		mode os.FileMode
		ok   bool
	}{
		{ociMount{Type: "tmpfs", Options: []string{"nosuid", "mode=1777"}}, 0o777 | os.ModeSticky, true},
		{ociMount{Type: "tmpfs", Options: []string{"mode=755", "size=1k"}}, 0o755, true},
		{ociMount{Type: "tmpfs", Options: []string{"nosuid"}}, 0, false},
		{ociMount{Type: "bind", Options: []string{"mode=755"}}, 0, false},
		{ociMount{Type: "tmpfs", Options: []string{"mode=9"}}, 0, false},
	} {
		if mode, ok := tmpfsMode(c.m); mode != c.mode || ok != c.ok {
			t.Errorf("tmpfsMode(%v) = %v, %v; want %v, %v", c.m, mode, ok, c.mode, c.ok)
		}
	}
}

func TestCgroupLayoutName(t *testing.T) {
	for _, c := range []struct {
		v1   []string
		v2   bool
		ctrl string
		want string
	}{
		{[]string{"pids", "memory", "cpu"}, true, "hugetlb\n", "hybrid: v1 memory/cpu/pids, v2 only hugetlb"},
		{[]string{"memory"}, true, "", "hybrid: v1 memory, v2 no controller"},
		{nil, true, "cpu memory pids", "v2"},
		{[]string{"cpu", "memory"}, false, "", "v1"},
		{nil, false, "", "unknown"},
	} {
		if got := cgroupLayoutName(c.v1, c.v2, c.ctrl); got != c.want {
			t.Errorf("cgroupLayoutName(%v, %v, %q) = %q, want %q", c.v1, c.v2, c.ctrl, got, c.want)
		}
	}
}

// A missing runtime is a skip naming the package to install, for every
// OCI row; nothing is created.
func TestPrepareOCIMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	for _, rt := range []ociRuntime{runcRuntime, runscRuntime, crunRuntime} {
		_, err := prepareOCI(rt)(&options{})
		var skip *skipError
		if !errors.As(err, &skip) || skip.reason != rt.name+" not installed: apt-get install -y "+rt.name {
			t.Errorf("%s: %v, want a skip", rt.name, err)
		}
	}
}

func TestOCISystems(t *testing.T) {
	for _, name := range []string{"runc", "runsc", "crun"} {
		i := slices.IndexFunc(systems, func(s system) bool { return s.name == name })
		if i < 0 || systems[i].prepare == nil || systems[i].about == "" {
			t.Errorf("system %s missing", name)
		}
	}
	// runsc's row states its platform and network, and logs inside its
	// temporary directory.
	flags := runscRuntime.flags("/tmp/x")
	for _, f := range []string{"--platform=ptrace", "--network=none", "--log", "/tmp/x/runsc.log"} {
		if !slices.Contains(flags, f) {
			t.Errorf("runsc flags %v lack %s", flags, f)
		}
	}
}

// fakeRuntime puts an executable shell script named name in a directory
// of its own, which becomes PATH.
func fakeRuntime(t *testing.T, name, script string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":/usr/bin:/bin")
}

// The probe run: a failure is a skip for crun and an error for runc; a
// run that leaves state behind is an error; the temporary directory goes
// either way. Root only: the bundle's rootfs is chowned to the mapped ids.
func TestPrepareOCIProbe(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (chown of the bundle)")
	}
	const failing = `case "$*" in *--version*) echo "$(basename $0) version 9.9"; exit 0;; esac
echo "cgroups in hybrid mode not supported" >&2; echo second line >&2; exit 1
`
	o := &options{runTimeout: 10 * time.Second}
	for _, c := range []struct {
		rt     ociRuntime
		script string
		skip   string // the wanted skip reason's start, or "" for an error
		err    string
	}{
		{crunRuntime, failing, "crun 9.9 cannot run here: cgroups in hybrid mode not supported (this host's cgroups are ", ""},
		{runcRuntime, failing, "", "cgroups in hybrid mode not supported"},
		{runcRuntime, "[ \"$3\" = run ] && touch \"$2/leftover\"\nexit 0\n", "", "leftover"},
	} {
		tmp := t.TempDir()
		t.Setenv("TMPDIR", tmp)
		fakeRuntime(t, c.rt.name, c.script)
		p, err := prepareOCI(c.rt)(o)
		var skip *skipError
		switch {
		case p != nil:
			t.Errorf("%s: prepared %v", c.rt.name, p.argv)
			p.cleanup()
		case c.skip != "":
			if !errors.As(err, &skip) || !strings.HasPrefix(skip.reason, c.skip) || skip.version != "crun version 9.9" {
				t.Errorf("%s: %v, want a skip %q…", c.rt.name, err, c.skip)
			}
		default:
			if err == nil || errors.As(err, &skip) || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %v, want an error with %q", c.rt.name, err, c.err)
			}
		}
		if ents, _ := os.ReadDir(tmp); len(ents) > 0 {
			t.Errorf("%s: %s left in TMPDIR", c.rt.name, ents[0].Name())
		}
	}
}
