//go:build linux

// Command probe makes one escape attempt per subcommand and reports what the
// kernel answered, as JSON, so that the escape tests read the outcome of the
// attempt rather than an exit code.
//
//	probe OP ARGS...         one attempt; prints one JSON object on one line
//	probe multi JSON         JSON is an array of [OP, ARGS...] arrays; the
//	                         attempts run in order in this one process and
//	                         one JSON array of results is printed
//
// Every attempt is a single syscall-level operation (sometimes preceded by
// the open that gives it a descriptor) and reports the errno it got. The
// probe exits 0 whatever the attempts did, except for the attempts that are
// expected to get the process killed (int80, x32), and for usage errors
// (exit 2).
//
// The probe is built static (CGO_ENABLED=0) from the standard library and
// golang.org/x/sys/unix only, so it runs the same inside a sandbox and
// outside it.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"syscall"

	"golang.org/x/sys/unix"
)

// Result is the outcome of one attempt.
type Result struct {
	Op   string   `json:"op"`
	Args []string `json:"args,omitempty"`
	// OK is true when the attempt succeeded.
	OK bool `json:"ok"`
	// Errno is the name of the errno the attempt failed with ("EPERM"),
	// or "" when it succeeded or failed without an errno.
	Errno string `json:"errno"`
	// Err is the error text, if any.
	Err string `json:"err,omitempty"`
	// Detail is a short human-readable note.
	Detail string `json:"detail,omitempty"`
	// Values holds structured observations of the attempt.
	Values map[string]any `json:"values,omitempty"`
}

type opFunc func(r *Result, args []string) error

// op describes one subcommand: its minimum number of arguments and its
// function.
type op struct {
	minArgs int
	usage   string
	fn      opFunc
}

var ops = map[string]op{}

func register(name string, minArgs int, usage string, fn opFunc) {
	if _, dup := ops[name]; dup {
		panic("duplicate op " + name)
	}
	ops[name] = op{minArgs: minArgs, usage: usage, fn: fn}
}

// kept holds descriptors an attempt wants to keep open for later attempts
// of the same process (a listening socket before "hold").
var kept []int

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	// A setuid copy of the probe may only report its identity: nothing
	// else should ever run with borrowed privileges.
	if os.Geteuid() != os.Getuid() && os.Args[1] != "ids" {
		fmt.Fprintln(os.Stderr, "probe: running setuid; only \"ids\" is allowed")
		os.Exit(2)
	}
	if os.Args[1] == "multi" {
		if len(os.Args) != 3 {
			usage()
		}
		var list [][]string
		if err := json.Unmarshal([]byte(os.Args[2]), &list); err != nil {
			fmt.Fprintln(os.Stderr, "probe: multi: bad JSON:", err)
			os.Exit(2)
		}
		out := make([]*Result, 0, len(list))
		for _, a := range list {
			if len(a) == 0 {
				fmt.Fprintln(os.Stderr, "probe: multi: empty attempt")
				os.Exit(2)
			}
			out = append(out, run(a[0], a[1:]))
		}
		emit(out)
		return
	}
	emit(run(os.Args[1], os.Args[2:]))
}

func usage() {
	names := make([]string, 0, len(ops))
	for n, o := range ops {
		names = append(names, n+" "+o.usage)
	}
	sort.Strings(names)
	fmt.Fprintln(os.Stderr, "usage: probe OP ARGS... | probe multi '[[\"OP\",\"ARG\"],...]'")
	for _, n := range names {
		fmt.Fprintln(os.Stderr, "  "+n)
	}
	os.Exit(2)
}

func emit(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe: marshal:", err)
		os.Exit(2)
	}
	os.Stdout.Write(append(b, '\n'))
}

// run performs one attempt.
func run(name string, args []string) *Result {
	r := &Result{Op: name, Args: args}
	o, ok := ops[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "probe: unknown op %q\n", name)
		usage()
	}
	if len(args) < o.minArgs {
		fmt.Fprintf(os.Stderr, "probe: %s %s\n", name, o.usage)
		os.Exit(2)
	}
	err := o.fn(r, args)
	if err != nil {
		r.OK = false
		r.Err = err.Error()
		var en syscall.Errno
		if errors.As(err, &en) && en != 0 {
			r.Errno = errnoName(en)
		}
		return r
	}
	r.OK = true
	return r
}

// errnoName returns the symbolic name of e ("EPERM").
func errnoName(e syscall.Errno) string {
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return fmt.Sprintf("errno%d", int(e))
}

// errnoErr turns a raw errno into an error (nil for 0).
func errnoErr(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// set records a structured observation.
func (r *Result) set(k string, v any) {
	if r.Values == nil {
		r.Values = map[string]any{}
	}
	r.Values[k] = v
}

// wrap adds context to an error while keeping its errno visible.
func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}
