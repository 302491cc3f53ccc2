package main

import (
	"bytes"
	"fmt"
	"time"

	"github.com/moat-sandbox/moat/bench/internal/machine"
)

// The same-machine references: one process that builds a sandbox, runs
// `echo hello` in it and exits, timed like bench/startup times /bin/true
// (machine.Timer: fork to reaped exit, no copying goroutine inside the
// timed window); its stdout is checked afterwards.

// timeOneShot runs argv once with t and returns its wall-clock duration;
// an error when it did not exit 0 in time or did not print want.
func timeOneShot(t *machine.Timer, argv []string, want string) (time.Duration, error) {
	d, err := t.Time(argv)
	if err != nil {
		return d, err
	}
	if got := t.Stdout(len(want) + 64); !bytes.Equal(got, []byte(want)) {
		return d, fmt.Errorf("stdout %q, want %q", got, want)
	}
	return d, nil
}
