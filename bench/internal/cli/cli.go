// Package cli is what the command line of every benchmark shares: the
// common flags (--moat, --json, --markdown, --rounds, --warmup, --seed),
// the moat checkout it measures, the results envelope (schema.Run) and the
// writing of its results: JSON, and the markdown bench/render makes of
// them.
//
// A benchmark declares how it takes the common flags in a Spec, adds its
// own flags to the FlagSet the Spec makes, and parses with Parse:
//
//	var f cli.Flags
//	fs := spec.FlagSet(stderr, &f)
//	fs.IntVar(&o.burst, "burst", 10, "…")
//	if err := spec.Parse(fs, args, &f); err != nil { … }
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/bench/internal/machine"
	"github.com/moat-sandbox/moat/bench/render"
	"github.com/moat-sandbox/moat/bench/schema"
)

// Flags are the common flags of a benchmark, as parsed.
type Flags struct {
	// Moat is the moat binary, an absolute path; "" for a benchmark that
	// takes no --moat, or when --moat "" asked for none.
	Moat string
	// JSON is where the results go (--json); "" writes none.
	JSON string
	// Markdown is where their markdown goes (--markdown); "" prints it.
	Markdown string
	Rounds   int
	Warmup   int
	// Seed seeds the benchmark's shuffles; never 0 after Parse (0 on the
	// command line takes one from the clock).
	Seed uint64
}

// Spec says how one benchmark takes the common flags.
type Spec struct {
	// Name is the benchmark's: "startup" for bench/startup.
	Name string
	// About is the usage's one-line description.
	About string
	// Rounds and Warmup are the defaults of --rounds and --warmup, and
	// RoundsUsage and WarmupUsage say what a round is for this benchmark.
	Rounds, Warmup           int
	RoundsUsage, WarmupUsage string
	// MinRounds is the least --rounds accepted (0 lets --rounds 0 skip
	// what the rounds measure).
	MinRounds int
	// NoMoat is set by a benchmark that measures the checkout's packages
	// in-process and runs no moat binary: it takes no --moat.
	NoMoat bool
	// MoatUnchecked leaves --moat unchecked, only made absolute (or ""):
	// the benchmark checks the binary itself and skips what needs it.
	MoatUnchecked bool
}

// ErrUsage wraps the errors of a bad command line.
var ErrUsage = errors.New("usage")

// FlagSet returns a FlagSet named after the benchmark with the common
// flags registered into f, errors and usage going to stderr.
func (s Spec) FlagSet(stderr io.Writer, f *Flags) *flag.FlagSet {
	fs := flag.NewFlagSet(s.Name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	if !s.NoMoat {
		fs.StringVar(&f.Moat, "moat", DefaultMoat(), "the moat binary to measure (make build)")
	}
	fs.StringVar(&f.JSON, "json", "", "write the results (bench/schema) as JSON to `FILE`")
	fs.StringVar(&f.Markdown, "markdown", "", "write their markdown (bench/render) to `FILE` instead of printing it")
	fs.IntVar(&f.Rounds, "rounds", s.Rounds, s.RoundsUsage)
	fs.IntVar(&f.Warmup, "warmup", s.Warmup, s.WarmupUsage)
	fs.Uint64Var(&f.Seed, "seed", 0, "`N` seeding the order shuffles, to replay a run's order (default: from the clock)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: go run ./%s [flags]   (from bench/)\n\n%s\n\n", s.Name, s.About)
		fs.PrintDefaults()
	}
	return fs
}

// Parse parses args into fs and checks the common flags: --rounds at
// least MinRounds, --warmup not negative, the moat binary present (made
// absolute), the seed taken from the clock when 0. A bad command line is
// an ErrUsage; -h is flag.ErrHelp.
func (s Spec) Parse(fs *flag.FlagSet, args []string, f *Flags) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", ErrUsage, fs.Arg(0))
	}
	if f.Rounds < s.MinRounds {
		return fmt.Errorf("%w: --rounds must be at least %d", ErrUsage, s.MinRounds)
	}
	if f.Warmup < 0 {
		return fmt.Errorf("%w: --warmup must not be negative", ErrUsage)
	}
	if !s.NoMoat {
		if err := f.resolveMoat(s.MoatUnchecked); err != nil {
			return err
		}
	}
	if f.Seed == 0 {
		f.Seed = uint64(time.Now().UnixNano())
	}
	return nil
}

// resolveMoat makes --moat absolute and, unless unchecked, checks that
// the binary is there.
func (f *Flags) resolveMoat(unchecked bool) error {
	if f.Moat == "" {
		if unchecked {
			return nil
		}
		return fmt.Errorf("%w: --moat must name the moat binary", ErrUsage)
	}
	abs, err := filepath.Abs(f.Moat)
	if err == nil && !unchecked {
		err = checkExecutable(abs)
	}
	if err != nil {
		return fmt.Errorf("%w: moat binary %s: %v (build it: make build)", ErrUsage, f.Moat, err)
	}
	f.Moat = abs
	return nil
}

// Start begins the envelope of a run started at start: the benchmark, its
// command line (args without the program name), the machine, the
// checkout's commit, the date, the load average and the common flags.
// The versions map is empty, ready for the systems the run prepares.
func (s Spec) Start(f *Flags, args []string, start time.Time) schema.Run {
	return schema.Run{
		Schema:       schema.Version,
		Bench:        s.Name,
		Command:      machine.ShellQuote(append([]string{"go", "run", "./" + s.Name}, args...)),
		Machine:      machine.Describe(),
		Commit:       machine.GitCommit(),
		Date:         start.UTC().Format(time.RFC3339),
		LoadAvgStart: machine.LoadAvg(),
		Rounds:       f.Rounds,
		Warmup:       f.Warmup,
		Seed:         f.Seed,
		Versions:     map[string]string{},
	}
}

// Finish ends the envelope of a run started at start: its duration, in
// whole seconds, and the load average now.
func Finish(r *schema.Run, start time.Time) {
	r.DurationSec = time.Since(start).Round(time.Second).Seconds()
	r.LoadAvgEnd = machine.LoadAvg()
}

// Write writes the results r: as JSON to --json, and their markdown
// (render.Markdown) to --markdown, or to stdout without it. logf says
// what was written. It returns the first error and carries on past it.
func (f *Flags) Write(r schema.Result, stdout io.Writer, logf func(format string, args ...any)) error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	if f.JSON != "" {
		err := writeJSON(f.JSON, r)
		if err == nil {
			logf("wrote %s", f.JSON)
		}
		keep(err)
	}
	md, err := render.Markdown(r)
	if err != nil {
		keep(fmt.Errorf("rendering the markdown: %w", err))
		return first
	}
	if f.Markdown == "" {
		_, err := io.WriteString(stdout, md)
		keep(err)
		return first
	}
	err = writeFile(f.Markdown, []byte(md))
	if err == nil {
		logf("wrote %s", f.Markdown)
	}
	keep(err)
	return first
}

// Conclude writes the results r (Write) and returns the benchmark's exit
// code: 1 when the run failed or a result could not be written, else 0.
func (f *Flags) Conclude(failed bool, r schema.Result, stdout io.Writer, logf func(format string, args ...any)) int {
	code := 0
	if failed {
		code = 1
	}
	if err := f.Write(r, stdout, logf); err != nil {
		logf("%v", err)
		code = 1
	}
	return code
}

// Logf returns a printf to stderr prefixed with the benchmark's name.
func (s Spec) Logf(stderr io.Writer) func(format string, args ...any) {
	return func(format string, args ...any) {
		fmt.Fprintf(stderr, s.Name+": "+format+"\n", args...)
	}
}

// Exit is the exit code of a benchmark whose parsing ended in err: 0 for
// -h, 2 otherwise; it prints err.
func (s Spec) Exit(stderr io.Writer, err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(stderr, "%s: %v\n", s.Name, err)
	return 2
}

// Levels parses a comma-separated list of counts ("1,8,32") given to
// flagName, each from 1 to max; with ascending, each must be larger than
// the one before.
func Levels(flagName, s string, max int, ascending bool) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > max {
			return nil, fmt.Errorf("%w: %s: %q is not a count from 1 to %d", ErrUsage, flagName, f, max)
		}
		if ascending && len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("%w: %s must ascend: %d after %d", ErrUsage, flagName, n, out[len(out)-1])
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s selects nothing", ErrUsage, flagName)
	}
	return out, nil
}
