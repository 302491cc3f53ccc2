package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// cpuTimes is one reading of /proc/stat: per CPU, the ticks spent busy
// (user, nice, system, irq, softirq) and in all (idle, iowait and the
// time the hypervisor stole too).
type cpuTimes struct {
	busy, total []uint64
}

// readCPUTimes reads /proc/stat.
func readCPUTimes() (cpuTimes, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	defer f.Close()
	return parseCPUTimes(f)
}

// parseCPUTimes reads the per-CPU lines ("cpu0 user nice system idle
// iowait irq softirq steal …") of a /proc/stat.
func parseCPUTimes(r io.Reader) (cpuTimes, error) {
	var t cpuTimes
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		var busy, total uint64
		// Guest time is already counted in user and nice: the first 8
		// fields are the whole.
		for i, s := range f[1:min(len(f), 9)] {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return cpuTimes{}, fmt.Errorf("/proc/stat %s: %q: %w", f[0], s, err)
			}
			total += v
			if i != 3 && i != 4 && i != 7 { // idle, iowait, steal
				busy += v
			}
		}
		t.busy, t.total = append(t.busy, busy), append(t.total, total)
	}
	if err := sc.Err(); err != nil {
		return cpuTimes{}, err
	}
	if len(t.total) == 0 {
		return cpuTimes{}, fmt.Errorf("/proc/stat: no per-CPU line")
	}
	return t, nil
}

// busySince returns, per CPU, the fraction of the time since before it
// spent busy.
func (t cpuTimes) busySince(before cpuTimes) ([]float64, error) {
	if len(t.total) != len(before.total) {
		return nil, fmt.Errorf("/proc/stat: %d CPUs, then %d", len(before.total), len(t.total))
	}
	out := make([]float64, len(t.total))
	for i := range t.total {
		if dt := t.total[i] - before.total[i]; dt > 0 {
			out[i] = round(float64(t.busy[i]-before.busy[i])/float64(dt), 4)
		}
	}
	return out, nil
}

// hostBusy reads /proc/stat at the instants from and end and sends, per
// CPU, the fraction of that time it was busy (or the error); the result
// is sent once, on a buffered channel. It gives up when ctx ends.
func hostBusy(ctx context.Context, from, end time.Time) <-chan hostReading {
	ch := make(chan hostReading, 1)
	go func() {
		at := func(t time.Time) bool {
			timer := time.NewTimer(time.Until(t))
			defer timer.Stop()
			select {
			case <-timer.C:
				return true
			case <-ctx.Done():
				return false
			}
		}
		if !at(from) {
			ch <- hostReading{err: ctx.Err()}
			return
		}
		before, err := readCPUTimes()
		if err != nil || !at(end) {
			ch <- hostReading{err: cmpErr(err, ctx.Err())}
			return
		}
		after, err := readCPUTimes()
		if err != nil {
			ch <- hostReading{err: err}
			return
		}
		busy, err := after.busySince(before)
		ch <- hostReading{busy: busy, err: err}
	}()
	return ch
}

// hostReading is what hostBusy sends.
type hostReading struct {
	busy []float64
	err  error
}

// cmpErr returns the first non-nil error.
func cmpErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
