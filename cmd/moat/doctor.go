package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/moat-sandbox/moat/config"
	moatruntime "github.com/moat-sandbox/moat/runtime"
	"github.com/moat-sandbox/moat/sandbox"
)

// doctorReport is `moat doctor --json`.
type doctorReport struct {
	OK          bool                 `json:"ok"`
	Runtime     string               `json:"runtime"`
	Checks      []moatruntime.Check  `json:"checks"`
	Enforcement *sandbox.Enforcement `json:"enforcement,omitempty"`
}

func doctorCommand() *command {
	var asJSON bool
	var rtFlag string
	return &command{
		name:  "doctor",
		usage: "[--json] [--runtime NAME]",
		short: "Report what this host can enforce, what it cannot, and why",
		long: `Probe the kernel features moat's sandbox runtime needs (--runtime; default
the config's runtime, else linux), then start a real sandbox and read back,
from inside it, what the kernel says is in effect (uid, seccomp mode,
no_new_privs, every capability set).

Exit codes: 0 when every required protection is available and the test
sandbox confirmed it; 1 otherwise.`,
		setup: func(fs *pflag.FlagSet) {
			fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
			fs.StringVar(&rtFlag, "runtime", "", runtimeFlagUsage())
		},
		run: func(ctx context.Context, args []string) error {
			if len(args) > 0 {
				return usageError("doctor takes no arguments")
			}
			name, cfgErr, err := doctorRuntime(rtFlag)
			if err != nil {
				return err
			}
			rep := runDoctor(ctx, name, cfgErr)
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else {
				printDoctor(rep)
			}
			if !rep.OK {
				return &exitError{code: 1}
			}
			return nil
		},
	}
}

func printDoctor(rep doctorReport) {
	for _, c := range rep.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
			if !c.Required {
				mark = "warn"
			}
		}
		fmt.Printf("%s  %-22s %s\n", mark, c.Name, c.Detail)
	}
	if rep.OK {
		fmt.Println("\nmoat can enforce its full sandbox on this host.")
	} else {
		fmt.Println("\nmoat cannot enforce its sandbox on this host: see FAIL lines.")
	}
}

// doctorRuntime is the runtime moat doctor checks: --runtime, else the
// one moat run and moat serve would open. A config file that does not load
// (cfgErr) is a warning: the doctor then checks --runtime or moat's default.
func doctorRuntime(flag string) (name string, cfgErr, err error) {
	d, cfgErr := config.Load("")
	if cfgErr != nil {
		d = config.BuiltIn()
	}
	name, err = runtimeName(flag, d)
	return name, cfgErr, err
}

func runDoctor(ctx context.Context, name string, cfgErr error) doctorReport {
	rep := doctorReport{Runtime: name}
	if cfgErr != nil {
		rep.Checks = append(rep.Checks, moatruntime.Check{Name: "config", Detail: cfgErr.Error()})
	}
	probe, _ := moatruntime.Probe(name) // name is known
	rep.Checks = append(rep.Checks, probe...)
	add := func(name string, ok bool, detail string) {
		rep.Checks = append(rep.Checks, moatruntime.Check{Name: name, OK: ok, Detail: detail, Required: true})
	}
	rt, closeRT, err := openRuntime(name, moatruntime.Options{})
	if err != nil {
		add("runtime", false, err.Error())
	} else {
		defer closeRT()
		enf := rt.Enforcement()
		rep.Enforcement = &enf
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		res, err := rt.Run(ctx, nil, &sandbox.Process{Args: []string{"/bin/sh", "-c", "id -u; cat /proc/self/status"}})
		switch {
		case err != nil:
			add("test sandbox", false, err.Error())
		case res.ExitCode != 0:
			add("test sandbox", false, fmt.Sprintf("exit %d: %s %s", res.ExitCode, res.Error, res.Stderr))
		default:
			add("test sandbox", true, fmt.Sprintf("started and ran /bin/sh in %d ms", res.DurationMs))
			verifyStatus(res.Stdout, add)
		}
	}
	rep.OK = true
	for _, c := range rep.Checks {
		if c.Required && !c.OK {
			rep.OK = false
		}
	}
	return rep
}

// verifyStatus checks what the kernel reports inside the test sandbox.
func verifyStatus(out string, add func(string, bool, string)) {
	lines := strings.Split(out, "\n")
	field := func(k string) string {
		for _, l := range lines {
			if v, ok := strings.CutPrefix(l, k+":"); ok {
				return strings.TrimSpace(v)
			}
		}
		return ""
	}
	uid := strings.TrimSpace(lines[0])
	add("inside: uid", uid == "1000", "uid "+uid)
	add("inside: no_new_privs", field("NoNewPrivs") == "1", "NoNewPrivs "+field("NoNewPrivs"))
	add("inside: seccomp", field("Seccomp") == "2", "Seccomp mode "+field("Seccomp")+" (2 = filter)")
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		add("inside: "+k, strings.Trim(field(k), "0") == "", k+" "+field(k))
	}
}
