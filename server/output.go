package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/config"
	"github.com/moat-sandbox/moat/output"
	"github.com/moat-sandbox/moat/sandbox"
	"github.com/moat-sandbox/moat/store"
)

// What the daemon spends on the output of calls (issue 17): every byte of
// output it holds in memory (the captures of execs in progress, the kept
// output of background processes) is charged to one output.Budget, per
// tenant and in all. Past it, an exec's capture stops growing and the rest
// of its stream spills to a file under <OutputDir>/<tenant>/ (within the
// tenant's disk quota; past that the bytes are only counted), and a
// background process's log drops its oldest chunks (a reader gets a lost
// event with the bytes). The store row of a call keeps counts and a short
// preview; the kept text of a larger capture goes to a file, which the
// sweeper removes after OutputRetention.

// PreviewBytes is how much of each stream a call's store row keeps: its
// first and last PreviewBytes/2 bytes.
const PreviewBytes = 4 << 10

// outputs holds the daemon's output budget and its output files.
type outputs struct {
	budget    *output.Budget
	maxLimit  int
	limit     int
	dir       string // "" keeps no files
	quota     int64
	retention time.Duration
	log       *slog.Logger

	mu    sync.Mutex
	usage map[string]int64 // bytes of files, per tenant directory
	swept bool

	// freed counts bytes given back since the last FreeOSMemory.
	freeMu   sync.Mutex
	freed    int64
	freeing  bool
	lastFree time.Time
}

// outputDefaults fills the output fields of cfg left zero.
func outputDefaults(cfg *Config) {
	if cfg.MaxOutputLimit <= 0 {
		cfg.MaxOutputLimit = config.DefaultMaxOutputLimit
	}
	if cfg.OutputLimit <= 0 {
		cfg.OutputLimit = min(output.DefaultLimit, cfg.MaxOutputLimit)
	}
	if cfg.OutputMemory <= 0 {
		cfg.OutputMemory = config.DefaultMemoryBudget
	}
	if cfg.TenantOutputMemory <= 0 {
		cfg.TenantOutputMemory = min(config.DefaultTenantMemoryBudget, cfg.OutputMemory)
	}
	if cfg.TenantOutputDisk < 0 {
		cfg.TenantOutputDisk = 0
	}
	if cfg.OutputRetention < 0 {
		cfg.OutputRetention = 0
	}
}

// newOutputs sets up the budget and the output directory (made 0700 if
// missing, its usage counted, expired files removed).
func newOutputs(cfg *Config, log *slog.Logger) (*outputs, error) {
	outputDefaults(cfg)
	if cfg.OutputLimit > cfg.MaxOutputLimit {
		return nil, fmt.Errorf("server: output limit %d is above the maximum %d", cfg.OutputLimit, cfg.MaxOutputLimit)
	}
	o := &outputs{budget: output.NewBudget(cfg.OutputMemory, cfg.TenantOutputMemory), maxLimit: cfg.MaxOutputLimit,
		limit: cfg.OutputLimit, dir: cfg.OutputDir, quota: cfg.TenantOutputDisk, retention: cfg.OutputRetention,
		log: log, usage: map[string]int64{}}
	if limit, ok := setMemoryLimit(cfg.OutputMemory); ok {
		log.Debug("soft memory limit", "bytes", limit, "output_budget", cfg.OutputMemory)
	}
	if o.dir == "" {
		return o, nil
	}
	if err := os.MkdirAll(o.dir, 0o700); err != nil {
		return nil, fmt.Errorf("server: output directory: %w", err)
	}
	o.Sweep(time.Now())
	return o, nil
}

// The output budget bounds the output the daemon holds, but not the
// garbage collector's slack: left to GOGC alone, the Go heap grows to
// twice what is live before a collection, so a flood holding its whole
// budget would take twice the budget. The daemon therefore sets the Go
// runtime's soft memory limit to its memory at start, plus the budget,
// plus memoryHeadroom(budget): the collector then runs as the heap nears
// it. What is live beyond the budget (the fixed buffers of each call in
// progress, see docs/API.md) is the headroom's to cover; past the limit
// the runtime collects more often (at most half the CPU), it never fails
// an allocation. A GOMEMLIMIT in the environment, or a limit set by
// another part of the program, is left alone.
var memLimit struct {
	sync.Mutex
	set int64 // the limit this package set last, 0 if none
}

// memoryHeadroom is the memory limit's margin beyond the output budget: a
// quarter of it, at least 16 MiB.
func memoryHeadroom(budget int64) int64 { return max(budget/4, 16<<20) }

// setMemoryLimit sets the soft memory limit for an output budget, unless
// GOMEMLIMIT or another caller set one; it returns the limit set.
func setMemoryLimit(budget int64) (int64, bool) {
	if budget <= 0 || os.Getenv("GOMEMLIMIT") != "" {
		return 0, false
	}
	memLimit.Lock()
	defer memLimit.Unlock()
	if cur := debug.SetMemoryLimit(-1); cur != math.MaxInt64 && cur != memLimit.set {
		return 0, false
	}
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	var base int64
	if s[0].Value.Kind() == metrics.KindUint64 && s[1].Value.Kind() == metrics.KindUint64 {
		base = int64(s[0].Value.Uint64() - s[1].Value.Uint64())
	}
	limit := base + budget + memoryHeadroom(budget)
	debug.SetMemoryLimit(limit)
	memLimit.set = limit
	return limit, true
}

// checkLimit refuses an output_limit above the maximum: a clear 400 that
// names it, rather than a silent clamp, so that a caller that asked for
// more learns at once what it can have.
func (o *outputs) checkLimit(n int) error {
	if n > o.maxLimit {
		return api.Errorf(api.CodeInvalidArgument, "output_limit %d is above this server's maximum of %d bytes per stream", n, o.maxLimit)
	}
	return nil
}

// tenantDir is the name of a tenant's directory: the tenant itself when it
// is a plain name, else a hash of it.
func tenantDir(tenant string) string {
	if plainName(tenant) {
		return tenant
	}
	h := sha256.Sum256([]byte(tenant))
	return "t-" + hex.EncodeToString(h[:12])
}

// callRef names a call's output files within the output directory:
// <tenant>/<call id with / as .>; the files add .stdout and .stderr.
func callRef(tenant, callID string) string {
	return tenantDir(tenant) + "/" + strings.ReplaceAll(callID, "/", ".")
}

// reserve charges n bytes of files to a tenant directory, within the quota.
func (o *outputs) reserve(dir string, n int64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.usage[dir]+n > o.quota {
		return false
	}
	o.usage[dir] += n
	return true
}

// reserveUpTo charges what fits of n bytes and returns it.
func (o *outputs) reserveUpTo(dir string, n int64) int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	n = max(0, min(n, o.quota-o.usage[dir]))
	o.usage[dir] += n
	return n
}

func (o *outputs) unreserve(dir string, n int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.usage[dir] -= n; o.usage[dir] <= 0 {
		delete(o.usage, dir)
	}
}

// DiskUsage is the bytes of output files of tenant.
func (o *outputs) DiskUsage(tenant string) int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.usage[tenantDir(tenant)]
}

// create opens a new output file for ref and stream, nil when files are
// not kept or it cannot be made.
func (o *outputs) create(ref, stream string) *os.File {
	if o.dir == "" || o.retention <= 0 || o.quota <= 0 {
		return nil
	}
	dir, _, _ := strings.Cut(ref, "/")
	if err := os.Mkdir(filepath.Join(o.dir, dir), 0o700); err != nil && !os.IsExist(err) {
		o.log.Warn("output directory", "err", err)
		return nil
	}
	f, err := os.OpenFile(filepath.Join(o.dir, ref+"."+stream), os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		o.log.Warn("output file", "err", err)
		return nil
	}
	return f
}

// spillFile is the file a starved capture writes the rest of its stream
// to, within its tenant's disk quota: what does not fit is only counted.
type spillFile struct {
	o       *outputs
	dir     string
	f       *os.File
	written int64
	lost    int64
}

func (sp *spillFile) Write(p []byte) (int, error) {
	if sp.f == nil {
		sp.lost += int64(len(p))
		return len(p), nil
	}
	k := sp.o.reserveUpTo(sp.dir, int64(len(p)))
	n, err := sp.f.Write(p[:k])
	sp.written += int64(n)
	if int64(n) < k {
		sp.o.unreserve(sp.dir, k-int64(n))
	}
	sp.lost += int64(len(p) - n)
	if err != nil {
		sp.f.Close()
		sp.f = nil
	}
	return len(p), nil
}

func (sp *spillFile) close() {
	if sp.f != nil {
		sp.f.Close()
		sp.f = nil
	}
}

// callCapture is the capture of one stream of an exec.
type callCapture struct {
	o      *outputs
	ref    string
	stream string
	c      *output.Capture
	spill  *spillFile
}

// newCapture returns the capture of stream of the call callID of tenant,
// limit bytes, charged to the budget.
func (o *outputs) newCapture(tenant, callID, stream string, limit int) *callCapture {
	cc := &callCapture{o: o, ref: callRef(tenant, callID), stream: stream, c: output.NewCapture(limit)}
	cc.c.SetBudget(o.budget.Account(tenant), func() io.Writer {
		dir, _, _ := strings.Cut(cc.ref, "/")
		cc.spill = &spillFile{o: o, dir: dir, f: o.create(cc.ref, stream)}
		return cc.spill
	})
	return cc
}

// finish ends the capture once the call is over: it reports whether
// bytes were dropped, returns the store row's preview of the kept text,
// and keeps that text in a file when it is longer than a preview (a
// spilled stream already has its file); kept reports whether a file holds
// the stream. The kept bytes stay in the capture's buffers, charged to the
// budget, until the answer is written from them (execAnswer) and the
// capture released (release): no copy of them is made.
func (cc *callCapture) finish() (truncated, kept bool, prev []byte) {
	truncated = cc.c.Truncated()
	prev = previewOf(cc.c)
	if cc.spill != nil {
		cc.spill.close()
		return truncated, cc.spill.written > 0, prev
	}
	n := cc.c.KeptLen()
	if n <= PreviewBytes {
		return truncated, false, prev
	}
	dir, _, _ := strings.Cut(cc.ref, "/")
	if !cc.o.reserve(dir, int64(n)) {
		return truncated, false, prev
	}
	f := cc.o.create(cc.ref, cc.stream)
	if f == nil {
		cc.o.unreserve(dir, int64(n))
		return truncated, false, prev
	}
	err := cc.c.WriteKept(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		cc.o.log.Warn("writing an output file", "ref", cc.ref, "err", err)
	}
	return truncated, true, prev
}

// release frees the capture's buffers and gives their bytes back.
func (cc *callCapture) release() {
	held := cc.c.Held()
	cc.c.Discard()
	if cc.spill != nil {
		cc.spill.close()
	}
	cc.o.gaveBack(int64(held))
}

// execAnswer is the answer of an exec whose stdout and stderr are still
// in their captures, charged to the output budget. It is written as JSON
// straight from the captures' buffers (encodeJSON), through a fixed
// buffer, so that an answer of any size costs the daemon no more than
// answerBuffer beyond what the budget already holds (encoding it whole
// took up to 6 times its stdout: a NUL byte is "\u0000"). The captures
// are released once it is written, or dropped (release).
type execAnswer struct {
	res            *sandbox.Result // Stdout and Stderr are "": they are in the captures
	stdout, stderr *callCapture
	once           sync.Once
}

// answerBuffer is the buffer one answer is encoded through.
const answerBuffer = 32 << 10

// answerStreamer is an answer that writes its own JSON to the response.
type answerStreamer interface {
	encodeJSON(w io.Writer) error
}

// encodeJSON writes the answer as encoding/json writes a sandbox.Result,
// byte for byte (no newline after it).
func (a *execAnswer) encodeJSON(w io.Writer) error {
	// The result without its text; the two strings are streamed into
	// the places of their empty values. A string value cannot hold
	// `"stdout":""` unescaped, and stdout comes before stderr.
	b, err := json.Marshal(a.res)
	if err != nil {
		return err
	}
	const outKey, errKey = `"stdout":`, `"stderr":`
	i, j := bytes.Index(b, []byte(outKey+`""`)), bytes.Index(b, []byte(errKey+`""`))
	if i < 0 || j < i {
		return fmt.Errorf("encoding an exec answer: no empty stdout and stderr in %.200s", b)
	}
	i, j = i+len(outKey), j+len(errKey)
	buf := make([]byte, 0, answerBuffer)
	stream := func(cc *callCapture) error {
		js := output.NewJSONStringBuffer(w, buf)
		if err := cc.c.WriteKept(js); err != nil {
			return err
		}
		return js.Close()
	}
	for _, step := range []func() error{
		func() error { _, err := w.Write(b[:i]); return err },
		func() error { return stream(a.stdout) },
		func() error { _, err := w.Write(b[i+2 : j]); return err },
		func() error { return stream(a.stderr) },
		func() error { _, err := w.Write(b[j+2:]); return err },
	} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// MarshalJSON encodes the answer whole: for the rare paths that need it
// as one value (a JSON-RPC batch, an error carrying the result).
func (a *execAnswer) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	if err := a.encodeJSON(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// release gives the captures back; it may be called more than once.
func (a *execAnswer) release() {
	a.once.Do(func() {
		a.stdout.release()
		a.stderr.release()
	})
}

// releaseAnswer releases v if it is an answer holding output: call it
// once an operation's answer is written or dropped.
func releaseAnswer(v any) {
	if a, ok := v.(interface{ release() }); ok {
		a.release()
	}
}

// previewOf is preview of the capture's kept text, read from its
// buffers.
func previewOf(c *output.Capture) []byte {
	var pw previewWriter
	_ = c.WriteKept(&pw)
	return pw.preview()
}

// previewWriter keeps the first and the last PreviewBytes/2 bytes of what
// is written to it, and counts it.
type previewWriter struct {
	head, tail []byte
	n          int
}

func (pw *previewWriter) Write(p []byte) (int, error) {
	const h = PreviewBytes / 2
	pw.n += len(p)
	if k := min(h-len(pw.head), len(p)); k > 0 {
		pw.head = append(pw.head, p[:k]...)
	}
	if len(p) >= h {
		pw.tail = append(pw.tail[:0], p[len(p)-h:]...)
	} else {
		pw.tail = append(pw.tail, p...)
		if over := len(pw.tail) - h; over > 0 {
			pw.tail = pw.tail[:copy(pw.tail, pw.tail[over:])]
		}
	}
	return len(p), nil
}

// preview is what preview returns for the text written.
func (pw *previewWriter) preview() []byte {
	if pw.n == 0 {
		return nil
	}
	if pw.n <= PreviewBytes {
		// The whole text: the head, then what the tail has past it.
		return append(append([]byte(nil), pw.head...), pw.tail[len(pw.tail)-(pw.n-len(pw.head)):]...)
	}
	var b bytes.Buffer
	b.Grow(PreviewBytes + 64)
	b.Write(pw.head)
	fmt.Fprintf(&b, "\n[... %d bytes not in the preview ...]\n", pw.n-PreviewBytes)
	b.Write(pw.tail)
	return b.Bytes()
}

// freeAfter is how much output memory given back makes the daemon return
// its free heap pages to the kernel at once: the runtime's own scavenger
// returns them over minutes, and a flood's pages would stay in the
// daemon's RSS that long.
const freeAfter = 8 << 20

// gaveBack counts n bytes given back and, past freeAfter, has the heap's
// unused pages returned (debug.FreeOSMemory: a collection, then the
// release), at most once a second.
func (o *outputs) gaveBack(n int64) {
	o.freeMu.Lock()
	defer o.freeMu.Unlock()
	o.freed += n
	if o.freed < freeAfter || o.freeing {
		return
	}
	o.freeing = true
	time.AfterFunc(max(0, time.Until(o.lastFree.Add(time.Second))), func() {
		o.freeMu.Lock()
		o.freed = 0
		o.freeMu.Unlock()
		debug.FreeOSMemory()
		o.freeMu.Lock()
		o.freeing, o.lastFree = false, time.Now()
		o.freeMu.Unlock()
	})
}

// preview is what a store row keeps of a stream's text: all of it up to
// PreviewBytes, else its first and last halves around a marker.
func preview(text string) []byte {
	if len(text) <= PreviewBytes {
		return []byte(text)
	}
	h := PreviewBytes / 2
	var b bytes.Buffer
	b.Grow(PreviewBytes + 64)
	b.WriteString(text[:h])
	fmt.Fprintf(&b, "\n[... %d bytes not in the preview ...]\n", len(text)-PreviewBytes)
	b.WriteString(text[len(text)-h:])
	return b.Bytes()
}

// previews are the store row's previews of an exec's streams, made from
// their captures (previewOf).
type previews struct{ stdout, stderr []byte }

// callOutput is what the store keeps of a result's output, its previews
// made from the result's text or given (pv); the result to store loses
// its stdout and stderr.
func callOutput(res *sandbox.Result, ref string, pv *previews) (*sandbox.Result, *store.CallOutput) {
	if res == nil {
		return nil, nil
	}
	out := &store.CallOutput{StdoutBytes: res.StdoutBytes, StderrBytes: res.StderrBytes, Ref: ref}
	switch {
	case pv != nil:
		out.StdoutPreview, out.StderrPreview = pv.stdout, pv.stderr
	default:
		if res.Stdout != "" {
			out.StdoutPreview = preview(res.Stdout)
		}
		if res.Stderr != "" {
			out.StderrPreview = preview(res.Stderr)
		}
	}
	r := *res
	r.Stdout, r.Stderr = "", ""
	return &r, out
}

// Sweep removes the output files last written before now less the
// retention (all of them when files are not kept), and gives their bytes
// back to their tenants' quotas. The first sweep (at start) counts what
// the files of an earlier daemon take.
func (o *outputs) Sweep(now time.Time) (removed int) {
	if o.dir == "" {
		return 0
	}
	o.mu.Lock()
	first := !o.swept
	o.swept = true
	o.mu.Unlock()
	cut := now.Add(-o.retention)
	_ = filepath.WalkDir(o.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(o.dir, path)
		if err != nil {
			return nil
		}
		dir, _, _ := strings.Cut(rel, string(filepath.Separator))
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		gone := (o.retention <= 0 || fi.ModTime().Before(cut)) && os.Remove(path) == nil
		switch {
		case gone && first:
			removed++
		case gone:
			removed++
			o.unreserve(dir, fi.Size())
		case !first:
		default:
			o.mu.Lock()
			o.usage[dir] += fi.Size()
			o.mu.Unlock()
		}
		return nil
	})
	return removed
}

// sweepEvery is how often the sweeper runs: a tenth of the retention,
// between a second and ten minutes.
func (o *outputs) sweepEvery() time.Duration {
	return min(max(o.retention/10, time.Second), 10*time.Minute)
}

// startOutputSweeper removes expired output files until the service
// closes.
func (s *Service) startOutputSweeper() {
	if s.out.dir == "" {
		return
	}
	s.tasks.Add(1)
	go func() {
		defer s.tasks.Done()
		t := time.NewTicker(s.out.sweepEvery())
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case now := <-t.C:
				if n := s.out.Sweep(now); n > 0 {
					s.log.Debug("removed expired output files", "files", n)
				}
			}
		}
	}()
}

// plainName says whether s is ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$. A
// function rather than a regexp: compiling that pattern at package init
// cost every start of the binary (the CLI's too) 0.2 ms and 960
// allocations.
func plainName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return true
}
