// Command rootfs measures moat's templates, warm pools, snapshots and forks
// through the real control plane (in-process server, HTTP API, Go SDK, the
// Linux runtime), on this machine, in one run:
//
//   - warm: create from a warm pool → first successful `echo` (claim);
//   - warm-runtime: the sandbox's share of that, without the control plane
//     (health check, limits applied, first echo on a sandbox made ahead);
//   - cold-host / cold-oci: the same create → echo without a pool, from the
//     host template and from a template imported from an OCI image;
//   - snapshot: capture a sandbox holding --snapshot-mib MiB of written
//     files (time the sandbox is paused, snapshot size);
//   - fork: create a sandbox from that snapshot → first `echo`.
//
// Each round runs every create → echo kind once, in a fresh random order
// (--seed), so drift hits them alike. The results go to --json, their
// markdown (bench/render) to --markdown or stdout. Run as root, from bench/:
//
//	go run ./rootfs --json results/rootfs.json
//
// It exits non-zero when a measured run fails.
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/bench/internal/cli"
	"github.com/moat-sandbox/moat/bench/internal/stats"
	"github.com/moat-sandbox/moat/bench/schema"
	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/config"
	"github.com/moat-sandbox/moat/runtime/linux"
	"github.com/moat-sandbox/moat/sandbox"
	"github.com/moat-sandbox/moat/server"
	"github.com/moat-sandbox/moat/store"
	"github.com/moat-sandbox/moat/templates"
)

// spec is how bench/rootfs takes the common flags: it runs the control
// plane in-process from the checkout's packages, so it takes no --moat.
var spec = cli.Spec{
	Name:        "rootfs",
	About:       "Measures warm pools, templates, snapshots and forks through the in-process control plane. Run as root.",
	Rounds:      200,
	Warmup:      10,
	RoundsUsage: "measured create → echo rounds, each running every kind once, in a random order",
	WarmupUsage: "unrecorded rounds first",
	MinRounds:   1,
	NoMoat:      true,
}

type options struct {
	cli.Flags
	snapRounds, forks, snapMiB, pool int
}

// maxErrors is how many failures the results keep verbatim.
const maxErrors = 20

func main() {
	linux.RunHelper()
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole program; it returns the exit code: 0, 1 when a measured
// run failed or the results could not be written, 2 on bad usage.
func run(args []string, stdout, stderr io.Writer) int {
	o := &options{}
	fs := spec.FlagSet(stderr, &o.Flags)
	fs.IntVar(&o.snapRounds, "snapshot-rounds", 10, "snapshots taken (each of a fresh sandbox)")
	fs.IntVar(&o.forks, "forks", 10, "forks measured per snapshot")
	fs.IntVar(&o.snapMiB, "snapshot-mib", 100, "MiB written before each snapshot")
	fs.IntVar(&o.pool, "pool", 4, "warm pool size")
	if err := spec.Parse(fs, args, &o.Flags); err != nil {
		return spec.Exit(stderr, err)
	}
	if o.snapRounds < 0 || o.forks < 0 || o.snapMiB < 0 || o.pool < 1 {
		return spec.Exit(stderr, fmt.Errorf("%w: --snapshot-rounds, --forks and --snapshot-mib must not be negative, --pool at least 1", cli.ErrUsage))
	}
	logf := spec.Logf(stderr)
	start := time.Now()
	res := &schema.Rootfs{
		Run:    spec.Start(&o.Flags, args, start),
		Config: schema.RootfsConfig{SnapshotRounds: o.snapRounds, Forks: o.forks, SnapshotMiB: o.snapMiB, Pool: o.pool},
		Kinds:  map[string]stats.Summary{},
	}
	if err := measure(o, res, logf); err != nil {
		res.Fail(maxErrors, err.Error())
		logf("%v", err)
	}
	cli.Finish(&res.Run, start)
	if res.Failures > 0 {
		res.Failed = true
	}
	return o.Conclude(res.Failed, res, stdout, logf)
}

type env struct {
	rt      *linux.Runtime
	c       *client.Client
	ready   chan string
	tempDir string
}

// measure starts the control plane and runs the kinds, filling res; a
// failed measured run is counted (and its error kept), an error is a
// failed set-up.
func measure(o *options, res *schema.Rootfs, logf func(string, ...any)) error {
	rounds, warmup, snapRounds, forks, snapMiB, poolSize := o.Rounds, o.Warmup, o.snapRounds, o.forks, o.snapMiB, o.pool
	failed := func(what string, err error) {
		res.Failures++
		res.Fail(maxErrors, what+": "+err.Error())
		logf("%s: %v", what, err)
	}
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "moat-bench-rootfs-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	e, stop, err := start(ctx, dir, poolSize)
	if err != nil {
		return err
	}
	defer stop()

	samples := map[string][]float64{}
	kinds := []struct {
		name string
		req  api.CreateSandbox
	}{
		{"warm", api.CreateSandbox{}},
		{"cold-host", api.CreateSandbox{Hostname: "cold"}}, // a hostname: no pool serves it
		{"cold-oci", api.CreateSandbox{Template: "bench-oci"}},
		{"warm-runtime", api.CreateSandbox{}},
	}
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	for i := range warmup + rounds {
		for _, ki := range rng.Perm(len(kinds)) {
			k := kinds[ki]
			if k.name == "warm-runtime" {
				ms, err := e.runtimeClaim(ctx)
				if err != nil {
					failed(k.name, err)
				} else if i >= warmup {
					samples[k.name] = append(samples[k.name], ms)
				}
				continue
			}
			if k.name == "warm" {
				<-e.ready // a sandbox is ready (not timed)
			}
			ms, info, err := e.createEcho(ctx, k.req)
			if err != nil {
				failed(k.name, err)
				continue
			}
			if i < warmup {
				continue
			}
			if k.name == "warm" {
				res.PoolTries++
				if !info.Pooled {
					continue // a miss is a cold create; not a warm figure
				}
				res.PoolHits++
			}
			samples[k.name] = append(samples[k.name], ms)
		}
	}
	res.Snapshot.MiB = snapMiB
	var total float64
	for range snapRounds {
		snapMs, sn, forkMs, err := e.snapshotFork(ctx, snapMiB, forks)
		if err != nil {
			failed("snapshot", err)
			continue
		}
		samples["snapshot"] = append(samples["snapshot"], snapMs)
		samples["fork"] = append(samples["fork"], forkMs...)
		total += float64(sn.Bytes)
		res.Snapshot.Entries = sn.Entries
	}
	if n := len(samples["snapshot"]); n > 0 {
		res.Snapshot.MeanBytes = total / float64(n)
	}
	for k, v := range samples {
		if sum, ok := stats.Summarize(v); ok {
			res.Kinds[k] = sum
		}
	}
	res.Samples = samples
	return nil
}

// start runs the control plane in-process over HTTP on loopback, with a
// store holding an OCI-imported template and a warm pool of the host
// template.
func start(ctx context.Context, dir string, poolSize int) (*env, func(), error) {
	def := config.BuiltIn()
	// As moat serve does: inits forked by the spawner.
	rt, err := linux.New(linux.WithDefaults(def.Limits), linux.WithKillGrace(def.KillGrace), linux.WithSpawner())
	if err != nil {
		return nil, nil, err
	}
	layers, err := templates.Open(filepath.Join(dir, "store"))
	if err != nil {
		return nil, nil, err
	}
	img, err := ociImage(filepath.Join(dir, "oci"))
	if err != nil {
		return nil, nil, fmt.Errorf("building the OCI image: %w", err)
	}
	if _, err := layers.Import(ctx, templates.ImportRequest{Name: "bench-oci", Kind: templates.SourceOCI, Path: img}); err != nil {
		return nil, nil, err
	}
	st, err := store.Open(ctx, filepath.Join(dir, "moat.db"))
	if err != nil {
		return nil, nil, err
	}
	tape, err := audit.Open(filepath.Join(dir, "audit"))
	if err != nil {
		return nil, nil, err
	}
	ready := make(chan string, 1024)
	svc, err := server.New(server.Config{Runtime: rt, Store: st, Tape: tape, Layers: layers,
		Pools: []server.PoolConfig{{Template: "host", Size: poolSize}}, MaxSandboxes: 1000, MaxPerTenant: 1000,
		OnPoolReady: func(string) { ready <- "" }, Home: dir,
		PolicyManaged: filepath.Join(dir, "none.toml"), PolicyUser: filepath.Join(dir, "none-user.toml")})
	if err != nil {
		return nil, nil, err
	}
	if err := svc.Start(ctx); err != nil {
		return nil, nil, err
	}
	const token = "moat_bench_token_0123456789abcdef0123456789"
	if err := os.WriteFile(filepath.Join(dir, server.TokensFile), []byte("bench "+token+"\n"), 0o600); err != nil {
		return nil, nil, err
	}
	tokens, _, err := server.LoadTokens(dir)
	if err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	hs := &http.Server{Handler: svc.Handler(tokens)}
	go hs.Serve(ln)
	c, err := client.New(client.WithHTTP("http://"+ln.Addr().String(), token))
	if err != nil {
		return nil, nil, err
	}
	stop := func() {
		hs.Close()
		_ = svc.Close(context.Background())
		rt.Close()
		tape.Close()
		st.Close()
	}
	return &env{rt: rt, c: c, ready: ready, tempDir: dir}, stop, nil
}

// createEcho times create → the first successful echo; the sandbox is
// deleted afterwards (not timed).
func (e *env) createEcho(ctx context.Context, req api.CreateSandbox) (float64, *api.Sandbox, error) {
	t0 := time.Now()
	sb, err := e.c.CreateSandbox(ctx, req)
	if err != nil {
		return 0, nil, err
	}
	defer sb.Delete(context.Background())
	r, err := sb.Exec(ctx, api.Exec{Args: []string{"echo", "hi"}})
	ms := float64(time.Since(t0).Microseconds()) / 1000
	if err != nil {
		return 0, nil, err
	}
	if r.ExitCode != 0 || string(r.Stdout) != "hi\n" {
		return 0, nil, fmt.Errorf("echo: exit %d %q", r.ExitCode, r.Stdout)
	}
	return ms, sb.Snapshot(), nil
}

// runtimeClaim is the sandbox's share of a warm claim, without the control
// plane (no policy load, store or audit write, HTTP): a sandbox created
// ahead (not timed), then health check, limits applied and the first echo
// (timed).
func (e *env) runtimeClaim(ctx context.Context) (float64, error) {
	sb, err := e.rt.Create(ctx, &sandbox.Spec{})
	if err != nil {
		return 0, err
	}
	defer sb.Shutdown(context.Background())
	c := sb.(sandbox.Claimable)
	t0 := time.Now()
	if err := c.Ping(ctx); err != nil {
		return 0, err
	}
	if err := c.SetLimits(sandbox.Limits{MemoryBytes: 512 << 20}); err != nil {
		return 0, err
	}
	r, err := sb.Exec(ctx, &sandbox.Process{Args: []string{"echo", "hi"}})
	ms := float64(time.Since(t0).Microseconds()) / 1000
	if err != nil || r.ExitCode != 0 || string(r.Stdout) != "hi\n" {
		return 0, fmt.Errorf("echo: %v %+v", err, r)
	}
	return ms, nil
}

// snapshotFork writes mib MiB of fresh random files into a new sandbox,
// snapshots it (timed: the API call, during which the sandbox is paused),
// then times forks create → echo from the snapshot.
func (e *env) snapshotFork(ctx context.Context, mib, forks int) (float64, *api.Snapshot, []float64, error) {
	sb, err := e.c.CreateSandbox(ctx, api.CreateSandbox{Hostname: "snap"})
	if err != nil {
		return 0, nil, nil, err
	}
	defer sb.Delete(context.Background())
	script := fmt.Sprintf("mkdir -p /workspace/data && for i in $(seq 1 %d); do head -c 1048576 /dev/urandom > /workspace/data/f$i; done", mib)
	if r, err := sb.Exec(ctx, api.Exec{Args: []string{"sh", "-c", script}, TimeoutMs: 120_000}); err != nil || r.ExitCode != 0 {
		return 0, nil, nil, fmt.Errorf("writing files: %v %+v", err, r)
	}
	t0 := time.Now()
	sn, err := sb.TakeSnapshot(ctx)
	snapMs := float64(time.Since(t0).Microseconds()) / 1000
	if err != nil {
		return 0, nil, nil, err
	}
	defer e.c.DeleteSnapshot(context.Background(), sn.ID)
	var forkMs []float64
	for range forks {
		ms, _, err := e.createEcho(ctx, api.CreateSandbox{Snapshot: sn.ID})
		if err != nil {
			return 0, nil, nil, err
		}
		forkMs = append(forkMs, ms)
	}
	return snapMs, sn, forkMs, nil
}

// ociImage writes an OCI image layout holding a busybox root (Debian's
// busybox-static) and returns its path.
func ociImage(path string) (string, error) {
	bb, err := os.ReadFile("/usr/bin/busybox")
	if err != nil {
		return "", fmt.Errorf("%w (install busybox-static)", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, body []byte) error {
		h.Size = int64(len(body))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	for _, d := range []string{"bin/", "etc/", "usr/", "usr/bin/"} {
		if err := add(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755}, nil); err != nil {
			return "", err
		}
	}
	if err := add(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755}, bb); err != nil {
		return "", err
	}
	for _, n := range []string{"sh", "echo", "cat", "ls", "head", "seq", "mkdir"} {
		if err := add(&tar.Header{Name: "bin/" + n, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777}, nil); err != nil {
			return "", err
		}
	}
	if err := add(&tar.Header{Name: "etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644}, []byte("root:x:0:0:root:/root:/bin/sh\n")); err != nil {
		return "", err
	}
	tw.Close()
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		return "", err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return "", err
	}
	img, err = mutate.Config(img, v1.Config{Env: []string{"PATH=/bin:/usr/bin"}})
	if err != nil {
		return "", err
	}
	p, err := layout.Write(path, empty.Index)
	if err != nil {
		return "", err
	}
	return path, p.AppendImage(img)
}
