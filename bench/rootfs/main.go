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
// The create → echo kinds alternate round by round so drift hits them
// alike. Figures go to stdout as markdown and to --out as JSON. Run as
// root (go run ./bench/rootfs); it exits non-zero when a measured run fails.
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
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
	"github.com/moat-sandbox/moat/bench/internal/machine"
	"github.com/moat-sandbox/moat/bench/internal/stats"
	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/config"
	"github.com/moat-sandbox/moat/runtime/linux"
	"github.com/moat-sandbox/moat/sandbox"
	"github.com/moat-sandbox/moat/server"
	"github.com/moat-sandbox/moat/store"
	"github.com/moat-sandbox/moat/templates"
)

func main() {
	linux.RunHelper()
	rounds := flag.Int("rounds", 200, "measured create → echo rounds per kind")
	warmup := flag.Int("warmup", 10, "unrecorded rounds first")
	snapRounds := flag.Int("snapshot-rounds", 10, "snapshots taken (each of a fresh sandbox)")
	forks := flag.Int("forks", 10, "forks measured per snapshot")
	snapMiB := flag.Int("snapshot-mib", 100, "MiB written before each snapshot")
	poolSize := flag.Int("pool", 4, "warm pool size")
	out := flag.String("out", "", "JSON results file (default bench/results/rootfs-TIME.json)")
	flag.Parse()
	if err := run(*rounds, *warmup, *snapRounds, *forks, *snapMiB, *poolSize, *out); err != nil {
		fmt.Fprintln(os.Stderr, "bench/rootfs:", err)
		os.Exit(1)
	}
}

// result is the JSON output.
type result struct {
	Machine   machine.Host             `json:"machine"`
	Commit    string                   `json:"commit"`
	Date      string                   `json:"date"`
	LoadAvg   string                   `json:"loadavg"`
	Kinds     map[string]stats.Summary `json:"kinds"` // ms
	PoolHits  int                      `json:"pool_hits"`
	PoolTries int                      `json:"pool_tries"`
	Snapshot  snapshotFigures          `json:"snapshot"`
	Failures  int                      `json:"failures"`
	Args      []string                 `json:"args"`
	// Samples holds each kind's measured times (ms) in the order taken.
	Samples map[string][]float64 `json:"samples,omitempty"`
}

type snapshotFigures struct {
	MiB       int     `json:"written_mib"`
	MeanBytes float64 `json:"mean_bytes"`
	Entries   int     `json:"entries"`
}

type env struct {
	rt      *linux.Runtime
	c       *client.Client
	ready   chan string
	tempDir string
}

func run(rounds, warmup, snapRounds, forks, snapMiB, poolSize int, out string) error {
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

	res := &result{Machine: machine.Describe(), Commit: machine.GitCommit(), Date: time.Now().UTC().Format(time.RFC3339), LoadAvg: machine.LoadAvg(),
		Kinds: map[string]stats.Summary{}, Args: os.Args[1:]}
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
	for i := range warmup + rounds {
		for _, k := range kinds {
			if k.name == "warm-runtime" {
				ms, err := e.runtimeClaim(ctx)
				if err != nil {
					res.Failures++
					fmt.Fprintf(os.Stderr, "%s: %v\n", k.name, err)
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
				res.Failures++
				fmt.Fprintf(os.Stderr, "%s: %v\n", k.name, err)
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
			res.Failures++
			fmt.Fprintln(os.Stderr, "snapshot:", err)
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
	report(os.Stdout, res)
	if out == "" {
		out = filepath.Join("bench", "results", "rootfs-"+time.Now().UTC().Format("20060102T150405")+".json")
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := machine.WriteJSON(out, res); err != nil {
		return err
	}
	fmt.Println("\nresults:", out)
	if res.Failures > 0 {
		return fmt.Errorf("%d measured runs failed", res.Failures)
	}
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

// report prints the figures as markdown.
func report(w io.Writer, r *result) {
	m := r.Machine
	fmt.Fprintf(w, "## Templates, warm pools, snapshots (bench/rootfs)\n\n%s, kernel %s, %d CPUs (%s), commit %s, load %s\n\n",
		m.OS, m.Kernel, m.CPUs, m.CPUModel, r.Commit, r.LoadAvg)
	fmt.Fprintln(w, "| kind | n | p50 ms | p95 ms | p99 ms |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, k := range []string{"warm", "warm-runtime", "cold-host", "cold-oci", "snapshot", "fork"} {
		s, ok := r.Kinds[k]
		if !ok {
			continue
		}
		fmt.Fprintf(w, "| %s | %d | %.2f | %.2f | %.2f |\n", k, s.N, s.P50, s.P95, s.P99)
	}
	fmt.Fprintf(w, "\nwarm pool hits: %d of %d claims; snapshot of %d MiB written: %.1f MiB stored per snapshot, %d entries\n",
		r.PoolHits, r.PoolTries, r.Snapshot.MiB, r.Snapshot.MeanBytes/(1<<20), r.Snapshot.Entries)
	if h, c := r.Kinds["warm"], r.Kinds["cold-host"]; h.P50 > 0 {
		fmt.Fprintf(w, "cold-host / warm p50: %.1f×; cold-oci / cold-host p50: %.2f×\n", c.P50/h.P50, r.Kinds["cold-oci"].P50/c.P50)
	}
}
