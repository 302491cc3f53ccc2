package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/moat-sandbox/moat/bench/internal/machine"
)

// The OCI rows (runc, runsc, crun) run benchCommand in a container built
// from one bundle: an empty root directory holding only mount points and
// the host's system links, and a config.json from the structs below. They
// are the subset of the OCI runtime specification (1.0.2) the bundle
// uses, spelled as in the specification, so the bench needs no module of
// its own for it.

type ociSpec struct {
	OCIVersion string     `json:"ociVersion"`
	Process    ociProcess `json:"process"`
	Root       ociRoot    `json:"root"`
	Hostname   string     `json:"hostname,omitempty"`
	Mounts     []ociMount `json:"mounts"`
	Linux      ociLinux   `json:"linux"`
}

type ociProcess struct {
	Terminal        bool            `json:"terminal"`
	User            ociUser         `json:"user"`
	Args            []string        `json:"args"`
	Env             []string        `json:"env"`
	Cwd             string          `json:"cwd"`
	Capabilities    ociCapabilities `json:"capabilities"`
	NoNewPrivileges bool            `json:"noNewPrivileges"`
}

type ociUser struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// ociCapabilities lists each set explicitly; empty sets (never null)
// drop every capability.
type ociCapabilities struct {
	Bounding    []string `json:"bounding"`
	Effective   []string `json:"effective"`
	Inheritable []string `json:"inheritable"`
	Permitted   []string `json:"permitted"`
	Ambient     []string `json:"ambient"`
}

type ociRoot struct {
	Path     string `json:"path"`
	Readonly bool   `json:"readonly"`
}

type ociMount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type,omitempty"`
	Source      string   `json:"source,omitempty"`
	Options     []string `json:"options,omitempty"`
}

type ociLinux struct {
	UIDMappings   []ociIDMapping `json:"uidMappings,omitempty"`
	GIDMappings   []ociIDMapping `json:"gidMappings,omitempty"`
	Resources     *ociResources  `json:"resources,omitempty"`
	CgroupsPath   string         `json:"cgroupsPath,omitempty"`
	Namespaces    []ociNamespace `json:"namespaces"`
	MaskedPaths   []string       `json:"maskedPaths,omitempty"`
	ReadonlyPaths []string       `json:"readonlyPaths,omitempty"`
}

type ociIDMapping struct {
	ContainerID uint32 `json:"containerID"`
	HostID      uint32 `json:"hostID"`
	Size        uint32 `json:"size"`
}

type ociNamespace struct {
	Type string `json:"type"`
}

type ociResources struct {
	Devices []ociDeviceCgroup `json:"devices,omitempty"`
	Memory  *ociMemory        `json:"memory,omitempty"`
	CPU     *ociCPU           `json:"cpu,omitempty"`
	Pids    *ociPids          `json:"pids,omitempty"`
}

type ociDeviceCgroup struct {
	Allow  bool   `json:"allow"`
	Access string `json:"access,omitempty"`
}

type ociMemory struct {
	Limit *int64 `json:"limit,omitempty"`
	Swap  *int64 `json:"swap,omitempty"` // memory+swap, as on cgroup v1
}

type ociCPU struct {
	Quota  *int64  `json:"quota,omitempty"`
	Period *uint64 `json:"period,omitempty"`
}

type ociPids struct {
	Limit int64 `json:"limit"`
}

// The limits of moat's default operator config: memory 2 GiB (no swap),
// 2 CPUs, 1024 pids.
const (
	ociMemoryLimit = 2 << 30
	ociCPUPeriod   = 100_000
	ociCPUQuota    = 2 * ociCPUPeriod
	ociPidsLimit   = 1024
)

// The container's root maps to an unprivileged host range of 65536 ids,
// just above the 8192 ranges moat leases (runtime/linux uidslot: 1<<30 +
// slot*65536), so it shares ids with no host user and no moat sandbox.
const (
	ociIDBase = 1<<30 + 8192<<16
	ociIDSize = 1 << 16
)

// ociWorkdir is the container's working directory, a tmpfs as in moat
// and the bwrap row.
const ociWorkdir = "/workspace"

// ociOptions are what varies between the OCI rows and hosts.
type ociOptions struct {
	// hostRoot is where the host's top-level system directories are
	// looked up ("/" but in tests).
	hostRoot string
	// userns adds a user namespace mapping the container's ids 0..65535
	// to ociIDBase…; without it the container's root is the host's root
	// (with no capabilities).
	userns bool
	// cgroupsPath is the container's cgroup: absolute, so at the top of
	// every hierarchy as moat's own (/moat/SLOT); "" leaves out the limits
	// and the devices cgroup.
	cgroupsPath string
	// limitSwap sets memory+swap to the memory limit (no swap), when the
	// host's kernel can limit swap per cgroup.
	limitSwap bool
}

// roBind is a read-only bind of the host's path at the same place.
func roBind(path string) ociMount {
	return ociMount{Destination: path, Type: "bind", Source: path, Options: []string{"rbind", "ro", "nosuid", "nodev"}}
}

// ociConfig builds the container's configuration: /bin/true in /workspace
// as the container's root with no capabilities and no_new_privs; the
// host's /usr, /etc (and the system directories that are not symlinks)
// bound read-only; fresh /proc with runc's default masked and read-only
// paths; /dev a tmpfs with devpts and /dev/shm (the runtime adds the
// usual device nodes); tmpfs /tmp and /workspace; pid, network, ipc, uts,
// mount and cgroup namespaces, a user namespace with o.userns, and moat's
// default limits in o.cgroupsPath. The root is read-only.
func ociConfig(o ociOptions, layout []machine.SystemLink) ociSpec {
	none := []string{}
	s := ociSpec{
		OCIVersion: "1.0.2",
		Process: ociProcess{
			Args: []string{benchCommand},
			Env:  []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			Cwd:  ociWorkdir,
			Capabilities: ociCapabilities{
				Bounding: none, Effective: none, Inheritable: none, Permitted: none, Ambient: none,
			},
			NoNewPrivileges: true,
		},
		Root:     ociRoot{Path: "rootfs", Readonly: true},
		Hostname: "sandbox",
		Mounts: []ociMount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts",
				Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			roBind("/usr"),
		},
		Linux: ociLinux{
			Namespaces: []ociNamespace{{"pid"}, {"network"}, {"ipc"}, {"uts"}, {"mount"}, {"cgroup"}},
			MaskedPaths: []string{"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
				"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"},
			ReadonlyPaths: []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
	}
	for _, l := range layout {
		if l.Target == "" {
			s.Mounts = append(s.Mounts, roBind(l.Path))
		}
	}
	s.Mounts = append(s.Mounts,
		roBind("/etc"),
		ociMount{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777"}},
		ociMount{Destination: ociWorkdir, Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=755"}},
	)
	if o.userns {
		s.Linux.Namespaces = append(s.Linux.Namespaces, ociNamespace{"user"})
		m := []ociIDMapping{{ContainerID: 0, HostID: ociIDBase, Size: ociIDSize}}
		s.Linux.UIDMappings, s.Linux.GIDMappings = m, m
	} else {
		// devpts's gid=5 (tty) exists only through a mapping in a
		// user namespace; on the host's ids it is the host's tty.
		s.Mounts[2].Options = append(s.Mounts[2].Options, "gid=5")
	}
	if o.cgroupsPath != "" {
		mem, quota, period := int64(ociMemoryLimit), int64(ociCPUQuota), uint64(ociCPUPeriod)
		r := &ociResources{
			Devices: []ociDeviceCgroup{{Allow: false, Access: "rwm"}},
			Memory:  &ociMemory{Limit: &mem},
			CPU:     &ociCPU{Quota: &quota, Period: &period},
			Pids:    &ociPids{Limit: ociPidsLimit},
		}
		if o.limitSwap {
			r.Memory.Swap = &mem
		}
		s.Linux.Resources = r
		s.Linux.CgroupsPath = o.cgroupsPath
	}
	return s
}

// writeBundle writes an OCI bundle into dir (which must exist): config.json
// and rootfs/, holding the mount points of the configuration and the
// host's system symlinks. With a user namespace rootfs belongs to the
// container's root, as the runtimes create nothing in it themselves.
func writeBundle(dir string, o ociOptions) error {
	layout := machine.HostLayout(o.hostRoot)
	spec := ociConfig(o, layout)
	b, err := json.MarshalIndent(spec, "", "\t")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	root := filepath.Join(dir, spec.Root.Path)
	if err := os.Mkdir(root, 0o755); err != nil {
		return err
	}
	for _, m := range spec.Mounts {
		// The runtimes create the mount points inside /dev themselves.
		if filepath.Dir(m.Destination) != "/" {
			continue
		}
		p := filepath.Join(root, m.Destination)
		if err := os.Mkdir(p, 0o755); err != nil {
			return err
		}
		// runc gives a tmpfs the mode of its mount point, whatever its
		// mode= option says: /tmp must be 1777 beneath it too.
		if mode, ok := tmpfsMode(m); ok {
			if err := os.Chmod(p, mode); err != nil {
				return err
			}
		}
	}
	for _, l := range layout {
		if l.Target != "" {
			if err := os.Symlink(l.Target, filepath.Join(root, l.Path)); err != nil {
				return err
			}
		}
	}
	if o.userns {
		// The mapped root must be able to reach the root directory.
		if err := os.Chmod(dir, 0o755); err != nil {
			return err
		}
		err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, ociIDBase, ociIDBase)
		})
		if err != nil {
			return fmt.Errorf("chown rootfs: %w", err)
		}
	}
	return nil
}

// tmpfsMode is the mode= option of a tmpfs mount, as a file mode.
func tmpfsMode(m ociMount) (os.FileMode, bool) {
	if m.Type != "tmpfs" {
		return 0, false
	}
	for _, opt := range m.Options {
		if v, ok := strings.CutPrefix(opt, "mode="); ok {
			n, err := strconv.ParseUint(v, 8, 32)
			if err != nil {
				return 0, false
			}
			mode := os.FileMode(n & 0o777)
			if n&0o1000 != 0 {
				mode |= os.ModeSticky
			}
			return mode, true
		}
	}
	return 0, false
}
