// Command netproxy measures moat's egress proxy on this machine against
// the same transfers with no proxy, alternating between the two so that
// drift hits both alike:
//
//   - throughput of a large download from a local HTTP server: direct,
//     through the proxy's CONNECT tunnel, and through its HTTP forwarding
//     (Go client on the host, the proxy in this process: the proxy's own
//     cost);
//   - added connect latency: a fresh connection and a tiny request, direct
//     versus through CONNECT, p50/p95/p99;
//   - with a moat binary (--moat; "" for none), the same download by curl
//     inside `moat run --net proxy` versus curl on the host (the whole
//     path a sandboxed tool takes).
//
// Each round runs every way once, in a fresh random order (--seed). Goals
// (docs/PERFORMANCE.md): throughput at least 80% of direct, under 1 ms
// added p50 connect latency on loopback. A failed transfer is recorded and
// the command exits 1.
//
//	go run ./netproxy [--size BYTES] [--rounds 10] [--connects 2000] [--json FILE] [--markdown FILE]   (from bench/)
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/bench/internal/cli"
	"github.com/moat-sandbox/moat/bench/internal/machine"
	"github.com/moat-sandbox/moat/bench/internal/stats"
	"github.com/moat-sandbox/moat/bench/schema"
	"github.com/moat-sandbox/moat/netproxy"
)

// allowAll admits every destination: the benchmark measures the proxy's
// path, not a policy (bench/policy measures decisions).
type allowAll struct{}

func (allowAll) Decide(context.Context, string, int) netproxy.Verdict {
	return netproxy.Verdict{Allow: true, Rule: "bench"}
}
func (allowAll) Addr(netip.Addr, bool) netproxy.Verdict { return netproxy.Verdict{Allow: true} }

// spec is how bench/netproxy takes the common flags. A missing moat
// binary (or --moat "") skips the rows inside a sandbox.
var spec = cli.Spec{
	Name:          "netproxy",
	About:         "Measures the egress proxy's throughput and added connect latency against direct transfers, alternating.",
	Rounds:        10,
	Warmup:        0,
	RoundsUsage:   "downloads per way (each round runs every way once, in a random order)",
	WarmupUsage:   "unrecorded rounds of downloads first",
	MinRounds:     1,
	MoatUnchecked: true,
}

type options struct {
	cli.Flags
	size     int64
	connects int
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole program; it returns the exit code: 0, 1 when a transfer
// failed or the results could not be written, 2 on bad usage.
func run(args []string, stdout, stderr io.Writer) int {
	o := &options{}
	fs := spec.FlagSet(stderr, &o.Flags)
	fs.Int64Var(&o.size, "size", 256<<20, "bytes of the large download")
	fs.IntVar(&o.connects, "connects", 2000, "fresh connections per way, alternating")
	if err := spec.Parse(fs, args, &o.Flags); err != nil {
		return spec.Exit(stderr, err)
	}
	if o.size < 1<<20 || o.connects < 10 {
		return spec.Exit(stderr, fmt.Errorf("%w: --size must be at least 1 MiB and --connects at least 10", cli.ErrUsage))
	}
	logf := spec.Logf(stderr)
	start := time.Now()
	rep := &schema.Netproxy{Run: spec.Start(&o.Flags, args, start), SizeBytes: o.size, Connects: o.connects}
	if err := measure(o, rep); err != nil {
		rep.Failed = true
		rep.Errors = append(rep.Errors, err.Error())
	}
	if rep.Throughput == nil {
		rep.Throughput = []schema.NetproxyRow{}
	}
	cli.Finish(&rep.Run, start)
	for _, e := range rep.Errors {
		logf("failed: %s", e)
	}
	return o.Conclude(rep.Failed, rep, stdout, logf)
}

// failf records a failed transfer.
func failf(rep *schema.Netproxy, format string, args ...any) {
	rep.Failed = true
	rep.Errors = append(rep.Errors, fmt.Sprintf(format, args...))
}

// blob is written repeatedly to make the large download.
var blob = make([]byte, 1<<20)

func server() (net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/blob", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		if err != nil || n < 0 {
			http.Error(w, "bad n", 400)
			return
		}
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		for n > 0 {
			k := min(n, int64(len(blob)))
			if _, err := w.Write(blob[:k]); err != nil {
				return
			}
			n -= k
		}
	})
	mux.HandleFunc("/tiny", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	go http.Serve(ln, mux)
	return ln, nil
}

// measure runs the ways and fills rep; an error is a set-up failure.
func measure(o *options, rep *schema.Netproxy) error {
	size, connects := o.size, o.connects
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	srv, err := server()
	if err != nil {
		return err
	}
	defer srv.Close()
	px := netproxy.New(netproxy.Config{Logger: slog.New(slog.DiscardHandler)})
	ep := px.Endpoint(allowAll{})
	pln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go ep.Serve("bench", pln)
	defer ep.Close()
	target := srv.Addr().String()
	proxyAddr := pln.Addr().String()
	blobPath := "/blob?n=" + strconv.FormatInt(size, 10)

	direct := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	pu, _ := url.Parse("http://" + proxyAddr)
	forward := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), DisableKeepAlives: true}}
	ways := []struct {
		name, about string
		get         func() (int64, error)
	}{
		{"direct", "Go client to the server, no proxy", func() (int64, error) { return httpGet(direct, "http://"+target+blobPath) }},
		{"proxy CONNECT", "Go client through the proxy's CONNECT tunnel (TCP relay, as HTTPS and SOCKS5 take)", func() (int64, error) {
			c, err := tunnel(proxyAddr, target)
			if err != nil {
				return 0, err
			}
			defer c.Close()
			return request(c, target, blobPath)
		}},
		{"proxy HTTP forward", "Go client sending GET http://… to the proxy (request re-issued upstream)", func() (int64, error) {
			return httpGet(forward, "http://"+target+blobPath)
		}},
	}
	samples := make([][]float64, len(ways))
	for round := range o.Warmup + o.Rounds {
		for _, i := range rng.Perm(len(ways)) {
			w := ways[i]
			t0 := time.Now()
			n, err := w.get()
			d := time.Since(t0)
			if err == nil && n != size {
				err = fmt.Errorf("got %d bytes, want %d", n, size)
			}
			if err != nil {
				failf(rep, "%s: %v", w.name, err)
				continue
			}
			if round >= o.Warmup {
				samples[i] = append(samples[i], float64(size)/d.Seconds()/1e6)
			}
		}
	}
	for i, w := range ways {
		s, _ := stats.Summarize(samples[i])
		rep.Throughput = append(rep.Throughput, schema.NetproxyRow{Name: w.name, About: w.about, MBps: s})
	}
	for i := range rep.Throughput {
		if d := rep.Throughput[0].MBps.P50; d > 0 {
			rep.Throughput[i].Ratio = rep.Throughput[i].MBps.P50 / d
		}
	}

	// Connect latency: dial, request /tiny, read the answer.
	lat := make([][]float64, 2)
	for range connects {
		for _, i := range rng.Perm(2) {
			t0 := time.Now()
			var c net.Conn
			var err error
			if i == 0 {
				c, err = net.Dial("tcp", target)
			} else {
				c, err = tunnel(proxyAddr, target)
			}
			if err == nil {
				_, err = request(c, target, "/tiny")
				c.Close()
			}
			if err != nil {
				failf(rep, "connect: %v", err)
				continue
			}
			lat[i] = append(lat[i], float64(time.Since(t0).Microseconds())/1000)
		}
	}
	for i, name := range []string{"direct", "proxy CONNECT"} {
		s, _ := stats.Summarize(lat[i])
		rep.Latency = append(rep.Latency, schema.NetproxyLatency{Name: name, Ms: s})
	}
	rep.AddedP50Ms = rep.Latency[1].Ms.P50 - rep.Latency[0].Ms.P50

	switch {
	case o.Moat == "":
		rep.SandboxSkipped = "no moat binary (--moat \"\")"
	default:
		if err := checkExecutable(o.Moat); err != nil {
			rep.SandboxSkipped = fmt.Sprintf("moat binary %s: %v (make build)", o.Moat, err)
			break
		}
		rep.Versions["moat"] = machine.Version(o.Moat, "version")
		rep.Sandbox = sandboxRows(o, rng, target, blobPath, rep)
	}
	return nil
}

// checkExecutable reports why path is not an executable file.
func checkExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return errors.New("not an executable file")
	}
	return nil
}

// sandboxRows times curl's download on the host and inside moat run
// --net proxy (the run's own proxy), each round in a random order.
func sandboxRows(o *options, rng *rand.Rand, target, path string, rep *schema.Netproxy) []schema.NetproxyRow {
	bin, size := o.Moat, o.size
	curl := []string{"curl", "-s", "-o", "/dev/null", "-w", "%{size_download} %{speed_download}"}
	ways := []struct {
		name, about string
		argv        []string
	}{
		{"curl on the host", "curl, no sandbox, no proxy", append(append([]string{}, curl...), "--noproxy", "*", "http://"+target+path)},
		{"curl in moat run --net proxy, CONNECT", "curl inside a sandbox whose only way out is the egress proxy, tunnelled (-p, as HTTPS goes; the run's own proxy)",
			append([]string{bin, "run", "--net", "proxy", "--allow-domain", "127.0.0.0/8", "--"}, append(append([]string{}, curl...),
				"--noproxy", "", "-p", "-x", "http://127.0.0.1:3128", "http://"+target+path)...)},
		{"curl in moat run --net proxy, HTTP forward", "the same, plain HTTP forwarded by the proxy",
			append([]string{bin, "run", "--net", "proxy", "--allow-domain", "127.0.0.0/8", "--"}, append(append([]string{}, curl...),
				"--noproxy", "", "-x", "http://127.0.0.1:3128", "http://"+target+path)...)},
	}
	samples := make([][]float64, len(ways))
	for round := range o.Warmup + o.Rounds {
		for _, i := range rng.Perm(len(ways)) {
			w := ways[i]
			out, err := exec.Command(w.argv[0], w.argv[1:]...).Output()
			f := strings.Fields(string(out))
			if err == nil && (len(f) != 2 || f[0] != strconv.FormatInt(size, 10)) {
				err = fmt.Errorf("curl printed %q", out)
			}
			if err != nil {
				failf(rep, "%s: %v", w.name, err)
				continue
			}
			if round >= o.Warmup {
				bps, _ := strconv.ParseFloat(f[1], 64)
				samples[i] = append(samples[i], bps/1e6)
			}
		}
	}
	var rows []schema.NetproxyRow
	for i, w := range ways {
		s, _ := stats.Summarize(samples[i])
		rows = append(rows, schema.NetproxyRow{Name: w.name, About: w.about, MBps: s})
	}
	if d := rows[0].MBps.P50; d > 0 {
		for i := range rows {
			rows[i].Ratio = rows[i].MBps.P50 / d
		}
	}
	return rows
}

func httpGet(c *http.Client, u string) (int64, error) {
	return drain(c.Get(u))
}

// drain reads a 200 answer's whole body.
func drain(resp *http.Response, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return 0, fmt.Errorf("status %s", resp.Status)
	}
	return io.Copy(io.Discard, resp.Body)
}

// tunnel opens a CONNECT tunnel to target through the proxy.
func tunnel(proxy, target string) (net.Conn, error) {
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil {
		c.Close()
		return nil, err
	}
	if resp.StatusCode != 200 {
		c.Close()
		return nil, fmt.Errorf("CONNECT: %s", resp.Status)
	}
	if br.Buffered() > 0 {
		c.Close()
		return nil, errors.New("CONNECT: bytes after the answer")
	}
	return c, nil
}

// request sends GET path over c and reads the whole answer.
func request(c net.Conn, host, path string) (int64, error) {
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, host)
	return drain(http.ReadResponse(bufio.NewReaderSize(c, 64<<10), nil))
}
