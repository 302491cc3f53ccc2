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
//   - with --moat, the same download by curl inside `moat run --net proxy`
//     versus curl on the host (the whole path a sandboxed tool takes).
//
// Goals (docs/PERFORMANCE.md): throughput at least 80% of direct, under
// 1 ms added p50 connect latency on loopback.
//
//	go run ./bench/netproxy [--size BYTES] [--rounds 10] [--connects 2000] [--moat bin/moat] [--json FILE] [--markdown FILE]
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/bench/internal/machine"
	"github.com/moat-sandbox/moat/bench/internal/stats"
	"github.com/moat-sandbox/moat/netproxy"
)

// allowAll admits every destination: the benchmark measures the proxy's
// path, not a policy (bench/policy measures decisions).
type allowAll struct{}

func (allowAll) Decide(context.Context, string, int) netproxy.Verdict {
	return netproxy.Verdict{Allow: true, Rule: "bench"}
}
func (allowAll) Addr(netip.Addr, bool) netproxy.Verdict { return netproxy.Verdict{Allow: true} }

// row is one way of making a transfer.
type row struct {
	Name  string        `json:"name"`
	About string        `json:"about"`
	MBps  stats.Summary `json:"mb_per_s,omitempty"`
	Ratio float64       `json:"ratio_to_direct,omitempty"` // p50 / direct p50
}

// latency is the connect-and-request latency of one way, in ms.
type latency struct {
	Name string        `json:"name"`
	Ms   stats.Summary `json:"ms"`
}

type report struct {
	Machine    machine.Host `json:"machine"`
	Commit     string       `json:"commit"`
	Date       string       `json:"date"`
	SizeBytes  int64        `json:"size_bytes"`
	Rounds     int          `json:"rounds"`
	Throughput []row        `json:"throughput"`
	Sandbox    []row        `json:"sandbox,omitempty"`
	Connects   int          `json:"connects"`
	Latency    []latency    `json:"latency"`
	// AddedP50Ms is the proxy's p50 minus the direct p50.
	AddedP50Ms float64  `json:"added_p50_ms"`
	Failures   []string `json:"failures,omitempty"`
}

func main() {
	size := flag.Int64("size", 256<<20, "bytes of the large download")
	rounds := flag.Int("rounds", 10, "downloads per way, alternating")
	connects := flag.Int("connects", 2000, "fresh connections per way, alternating")
	moat := flag.String("moat", "", "path of the moat binary: also measure curl inside moat run --net proxy against curl on the host")
	jsonOut := flag.String("json", "", "write the results as JSON to `FILE`")
	mdOut := flag.String("markdown", "", "write the markdown report to `FILE`")
	flag.Parse()
	if *size < 1<<20 || *rounds < 1 || *connects < 10 {
		fmt.Fprintln(os.Stderr, "netproxy: --size must be at least 1 MiB, --rounds at least 1, --connects at least 10")
		os.Exit(2)
	}
	rep, err := run(*size, *rounds, *connects, *moat)
	if err != nil {
		fmt.Fprintln(os.Stderr, "netproxy:", err)
		os.Exit(1)
	}
	md := markdown(rep)
	fmt.Print(md)
	if *mdOut != "" {
		if err := os.WriteFile(*mdOut, []byte(md), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "netproxy:", err)
			os.Exit(1)
		}
	}
	if *jsonOut != "" {
		if err := machine.WriteJSON(*jsonOut, rep); err != nil {
			fmt.Fprintln(os.Stderr, "netproxy:", err)
			os.Exit(1)
		}
	}
	if len(rep.Failures) > 0 {
		os.Exit(1)
	}
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

func run(size int64, rounds, connects int, moat string) (*report, error) {
	srv, err := server()
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	px := netproxy.New(netproxy.Config{Logger: slog.New(slog.DiscardHandler)})
	ep := px.Endpoint(allowAll{})
	pln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go ep.Serve("bench", pln)
	defer ep.Close()
	target := srv.Addr().String()
	proxyAddr := pln.Addr().String()
	blobPath := "/blob?n=" + strconv.FormatInt(size, 10)

	rep := &report{Machine: machine.Describe(), Commit: machine.GitCommit(), Date: time.Now().UTC().Format(time.RFC3339),
		SizeBytes: size, Rounds: rounds, Connects: connects}
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
	for range rounds {
		for i, w := range ways {
			t0 := time.Now()
			n, err := w.get()
			d := time.Since(t0)
			if err == nil && n != size {
				err = fmt.Errorf("got %d bytes, want %d", n, size)
			}
			if err != nil {
				rep.Failures = append(rep.Failures, w.name+": "+err.Error())
				continue
			}
			samples[i] = append(samples[i], float64(size)/d.Seconds()/1e6)
		}
	}
	for i, w := range ways {
		s, _ := stats.Summarize(samples[i])
		rep.Throughput = append(rep.Throughput, row{Name: w.name, About: w.about, MBps: s})
	}
	for i := range rep.Throughput {
		if d := rep.Throughput[0].MBps.P50; d > 0 {
			rep.Throughput[i].Ratio = rep.Throughput[i].MBps.P50 / d
		}
	}

	// Connect latency: dial, request /tiny, read the answer.
	lat := make([][]float64, 2)
	for range connects {
		for i := range 2 {
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
				rep.Failures = append(rep.Failures, "connect: "+err.Error())
				continue
			}
			lat[i] = append(lat[i], float64(time.Since(t0).Microseconds())/1000)
		}
	}
	for i, name := range []string{"direct", "proxy CONNECT"} {
		s, _ := stats.Summarize(lat[i])
		rep.Latency = append(rep.Latency, latency{Name: name, Ms: s})
	}
	rep.AddedP50Ms = rep.Latency[1].Ms.P50 - rep.Latency[0].Ms.P50

	if moat != "" {
		rep.Sandbox, err = sandboxRows(moat, target, blobPath, size, rounds, &rep.Failures)
		if err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// sandboxRows times curl's download on the host and inside moat run
// --net proxy (the run's own proxy), alternating.
func sandboxRows(moat, target, path string, size int64, rounds int, failures *[]string) ([]row, error) {
	bin, err := filepath.Abs(moat)
	if err != nil {
		return nil, err
	}
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
	for range rounds {
		for i, w := range ways {
			out, err := exec.Command(w.argv[0], w.argv[1:]...).Output()
			f := strings.Fields(string(out))
			if err == nil && (len(f) != 2 || f[0] != strconv.FormatInt(size, 10)) {
				err = fmt.Errorf("curl printed %q", out)
			}
			if err != nil {
				*failures = append(*failures, w.name+": "+err.Error())
				continue
			}
			bps, _ := strconv.ParseFloat(f[1], 64)
			samples[i] = append(samples[i], bps/1e6)
		}
	}
	var rows []row
	for i, w := range ways {
		s, _ := stats.Summarize(samples[i])
		rows = append(rows, row{Name: w.name, About: w.about, MBps: s})
	}
	if d := rows[0].MBps.P50; d > 0 {
		for i := range rows {
			rows[i].Ratio = rows[i].MBps.P50 / d
		}
	}
	return rows, nil
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

func markdown(r *report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Egress proxy (bench/netproxy)\n\n%s, %d CPUs, kernel %s, commit %s, %s. Download of %d MiB, %d rounds per way, alternating.\n\n",
		r.Machine.CPUModel, r.Machine.CPUs, r.Machine.Kernel, r.Commit, r.Date, r.SizeBytes>>20, r.Rounds)
	b.WriteString("| way | MB/s p50 | p95 (slowest 5%) | ratio to direct (p50) |\n|---|---|---|---|\n")
	for _, t := range append(append([]row{}, r.Throughput...), r.Sandbox...) {
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.2f |\n", t.Name, t.MBps.P50, lowTail(t.MBps), t.Ratio)
	}
	fmt.Fprintf(&b, "\nConnect and tiny request on a fresh connection, %d per way, alternating (ms):\n\n| way | p50 | p95 | p99 |\n|---|---|---|---|\n", r.Connects)
	for _, l := range r.Latency {
		fmt.Fprintf(&b, "| %s | %.3f | %.3f | %.3f |\n", l.Name, l.Ms.P50, l.Ms.P95, l.Ms.P99)
	}
	fmt.Fprintf(&b, "\nAdded p50 connect latency through the proxy: %.3f ms.\n", r.AddedP50Ms)
	for _, f := range r.Failures {
		fmt.Fprintf(&b, "\nFAILED: %s\n", f)
	}
	return b.String()
}

// lowTail is the throughput the slowest 5% of transfers stayed under:
// for a rate, the bad tail is the low one.
func lowTail(s stats.Summary) float64 {
	// With few rounds, the 5th percentile is interpolated between the
	// slowest samples; Summary keeps only p95, so recompute from min.
	return s.Min
}
