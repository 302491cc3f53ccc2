package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
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
	if o.dir == "" {
		return o, nil
	}
	if err := os.MkdirAll(o.dir, 0o700); err != nil {
		return nil, fmt.Errorf("server: output directory: %w", err)
	}
	o.Sweep(time.Now())
	return o, nil
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
var plainName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

func tenantDir(tenant string) string {
	if plainName.MatchString(tenant) {
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
	cc.c.SetBudget(o.budget.Account(tenant), func(kept []byte) io.Writer {
		dir, _, _ := strings.Cut(cc.ref, "/")
		cc.spill = &spillFile{o: o, dir: dir, f: o.create(cc.ref, stream)}
		_, _ = cc.spill.Write(kept)
		return cc.spill
	})
	return cc
}

// finish ends the capture: it returns the kept text and whether bytes
// were dropped, frees the buffers and keeps the text in a file when it is
// longer than a preview (a spilled stream already has its file). It
// reports whether a file holds the stream.
func (cc *callCapture) finish() (text string, truncated, kept bool) {
	truncated = cc.c.Truncated()
	held := cc.c.Held()
	text = cc.c.Release()
	cc.o.gaveBack(int64(held))
	if cc.spill != nil {
		cc.spill.close()
		return text, truncated, cc.spill.written > 0
	}
	if len(text) <= PreviewBytes {
		return text, truncated, false
	}
	dir, _, _ := strings.Cut(cc.ref, "/")
	if !cc.o.reserve(dir, int64(len(text))) {
		return text, truncated, false
	}
	f := cc.o.create(cc.ref, cc.stream)
	if f == nil {
		cc.o.unreserve(dir, int64(len(text)))
		return text, truncated, false
	}
	_, err := io.WriteString(f, text)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		cc.o.log.Warn("writing an output file", "ref", cc.ref, "err", err)
		return text, truncated, true
	}
	return text, truncated, true
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

// callOutput is what the store keeps of a result's output; the result to
// store loses its stdout and stderr.
func callOutput(res *sandbox.Result, ref string) (*sandbox.Result, *store.CallOutput) {
	if res == nil {
		return nil, nil
	}
	out := &store.CallOutput{StdoutBytes: res.StdoutBytes, StderrBytes: res.StderrBytes, Ref: ref}
	if res.Stdout != "" {
		out.StdoutPreview = preview(res.Stdout)
	}
	if res.Stderr != "" {
		out.StderrPreview = preview(res.Stderr)
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
