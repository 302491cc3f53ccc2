//go:build linux

package network

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testdns"
	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/netproxy"
	"github.com/moat-sandbox/moat/sandbox"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.Cleanup()
	os.Exit(code)
}

const (
	// hangGuard bounds one moat run or control: a run takes well under a
	// second (pip and npm a few); one still running after it is stuck.
	hangGuard = 60 * time.Second
	// nobody is the unprivileged host uid/gid the outside controls run as.
	nobody = 65534

	caTarget   = "/opt/moat-test-ca.pem"
	toolTarget = "/opt/nettool.py"
	helloBody  = "hello from the moat network test server\n"
	largeSize  = 8 << 20
	gitContent = "cloned through the egress proxy\n"
)

// caEnv points every client that reads a CA bundle from the environment at
// the test CA.
var caEnv = []string{
	"SSL_CERT_FILE=" + caTarget, "CURL_CA_BUNDLE=" + caTarget, "GIT_SSL_CAINFO=" + caTarget,
	"REQUESTS_CA_BUNDLE=" + caTarget, "PIP_CERT=" + caTarget, "NODE_EXTRA_CA_CERTS=" + caTarget,
	"npm_config_cafile=" + caTarget,
}

// server is one test server (HTTP or HTTPS) and what it saw.
type server struct {
	*httptest.Server
	port int

	mu       sync.Mutex
	requests []string // "Host RequestURI"
	snis     []string // TLS server names of the ClientHellos (HTTPS)
}

func (s *server) log(r *http.Request) {
	s.mu.Lock()
	s.requests = append(s.requests, r.Host+" "+r.URL.RequestURI())
	s.mu.Unlock()
}

// saw counts the requests whose "Host RequestURI" contains sub.
func (s *server) saw(sub string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.requests {
		if strings.Contains(r, sub) {
			n++
		}
	}
	return n
}

// sawSNI counts the ClientHellos with server name name.
func (s *server) sawSNI(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, sni := range s.snis {
		if sni == name {
			n++
		}
	}
	return n
}

// fixture is what every test here shares: the test DNS server and the
// operator config pointing the proxy at it, the test CA, the test servers
// and the files bound into the sandboxes.
type fixture struct {
	dir    string // world-traversable temp dir with the config, CA and tool
	dns    *testdns.Server
	config string // operator config: [network] dns_server
	ca     string // the CA certificate (PEM)
	caPool *x509.CertPool
	tool   string // netTool

	http, https *server // on 127.0.0.1
	v6          *server // HTTP on [::1]
	host        *server // HTTP on the host's own IPv4 address (nil if none)
	hostV4      netip.Addr

	large    []byte
	largeSHA string
	wheel    []byte
	wheelSHA string
	home     string // $HOME of the moat processes: no user policy file
}

var loopback = []netip.Addr{netip.MustParseAddr("127.0.0.1")}

// newFixture starts the servers; everything is torn down with the test.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	testutil.RequireRoot(t)
	fx := &fixture{dir: openDir(t), home: openDir(t)}
	fx.hostV4 = hostV4(t)
	records := map[string][]netip.Addr{
		"moat.test":         loopback,
		"pkg.moat.test":     loopback,
		"git.moat.test":     loopback,
		"other.moat.test":   loopback,
		"rebind.moat.test":  loopback,
		"ask.moat.test":     loopback,
		"private.moat.test": {netip.MustParseAddr("10.0.0.1")},
		"meta.moat.test":    {netip.MustParseAddr("169.254.169.254")},
	}
	if fx.hostV4.IsValid() {
		records["hostaddr.moat.test"] = []netip.Addr{fx.hostV4}
	}
	fx.dns = testdns.Start(t, records)
	fx.config = filepath.Join(fx.dir, "config.toml")
	writeFile(t, fx.config, fmt.Sprintf("[network]\ndns_server = %q\n", fx.dns.Addr()))
	fx.tool = filepath.Join(fx.dir, "nettool.py")
	writeFile(t, fx.tool, netTool)

	caPEM, leaf, pool := newCA(t)
	// Not *.pem: the policy refuses to bind files so named (credentials).
	fx.ca, fx.caPool = filepath.Join(fx.dir, "test-ca.crt"), pool
	writeFile(t, fx.ca, string(caPEM))

	fx.large = make([]byte, largeSize)
	r := mrand.NewChaCha8([32]byte{'m', 'o', 'a', 't'})
	_, _ = r.Read(fx.large)
	sum := sha256.Sum256(fx.large)
	fx.largeSHA = hex.EncodeToString(sum[:])
	fx.wheel = buildWheel(t)
	sum = sha256.Sum256(fx.wheel)
	fx.wheelSHA = hex.EncodeToString(sum[:])
	gitRoot := buildGitRepo(t)

	fx.http = fx.serve(t, "tcp", "127.0.0.1:0", gitRoot, nil)
	fx.https = fx.serve(t, "tcp", "127.0.0.1:0", gitRoot, &leaf)
	fx.v6 = fx.serve(t, "tcp6", "[::1]:0", gitRoot, nil)
	if fx.hostV4.IsValid() {
		fx.host = fx.serve(t, "tcp", netip.AddrPortFrom(fx.hostV4, 0).String(), gitRoot, nil)
	}
	return fx
}

// serve starts one test server on addr (TLS with cert when not nil).
func (fx *fixture) serve(t *testing.T, network, addr, gitRoot string, cert *tls.Certificate) *server {
	t.Helper()
	s := &server{}
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, helloBody)
	})
	mux.HandleFunc("/large", func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "large", time.Time{}, bytes.NewReader(fx.large))
	})
	mux.Handle("/git/", http.StripPrefix("/git/", http.FileServer(http.Dir(gitRoot))))
	mux.HandleFunc("/simple/moatpkg/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<!DOCTYPE html>\n<html><body>\n<a href=\"/files/moatpkg-1.0-py3-none-any.whl#sha256=%s\">moatpkg-1.0-py3-none-any.whl</a>\n</body></html>\n", fx.wheelSHA)
	})
	mux.HandleFunc("/files/moatpkg-1.0-py3-none-any.whl", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(fx.wheel)
	})
	mux.HandleFunc("/moatpkg", func(w http.ResponseWriter, r *http.Request) {
		base := "https://" + r.Host
		doc := map[string]any{
			"_id": "moatpkg", "name": "moatpkg",
			"dist-tags": map[string]string{"latest": "1.0.0"},
			"versions": map[string]any{"1.0.0": map[string]any{
				"_id": "moatpkg@1.0.0", "name": "moatpkg", "version": "1.0.0", "description": "moat test package",
				"dist": map[string]string{"tarball": base + "/moatpkg/-/moatpkg-1.0.0.tgz", "shasum": strings.Repeat("0", 40)},
			}},
			"time": map[string]string{"created": "2024-01-01T00:00:00.000Z", "modified": "2024-01-01T00:00:00.000Z", "1.0.0": "2024-01-01T00:00:00.000Z"},
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(doc)
	})
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.log(r)
		mux.ServeHTTP(w, r)
	}))
	hs.Listener.Close()
	hs.Listener = ln
	// The proxy dials a tunnel's destination before it reads the
	// ClientHello, so a refused tunnel is an aborted handshake here.
	hs.Config.ErrorLog = log.New(io.Discard, "", 0)
	if cert != nil {
		hs.TLS = &tls.Config{
			Certificates: []tls.Certificate{*cert},
			GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
				s.mu.Lock()
				s.snis = append(s.snis, h.ServerName)
				s.mu.Unlock()
				return nil, nil
			},
		}
		hs.StartTLS()
	} else {
		hs.Start()
	}
	t.Cleanup(hs.Close)
	s.Server = hs
	s.port = ln.Addr().(*net.TCPAddr).Port
	return s
}

// url is scheme://host:port/path on s.
func (s *server) url(host, path string) string {
	scheme := "http"
	if s.TLS != nil {
		scheme = "https"
	}
	return fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, strconv.Itoa(s.port)), path)
}

// flags are the moat run flags of a proxy sandbox with the allowlist
// allow (each entry one --allow-domain), the test CA and the tool bound,
// and the CA variables set.
func (fx *fixture) flags(allow ...string) []string {
	f := []string{"--config", fx.config, "--net", "proxy",
		"--ro", fx.ca + ":" + caTarget, "--ro", fx.tool + ":" + toolTarget}
	for _, e := range caEnv {
		f = append(f, "-e", e)
	}
	for _, a := range allow {
		f = append(f, "--allow-domain", a)
	}
	return f
}

// netResult is moat run --json's result with its network object.
type netResult struct {
	sandbox.Result
	Network *struct {
		Mode    string           `json:"mode"`
		Allow   []string         `json:"allow_domains"`
		Deny    []string         `json:"deny_domains"`
		Proxy   string           `json:"proxy"`
		Allowed int              `json:"allowed"`
		Denied  int              `json:"denied"`
		Events  []netproxy.Event `json:"events"`
	} `json:"network"`
	args []string
}

// events returns the result's proxy events of kind for host ("" any).
func (r *netResult) events(kind, host string) []netproxy.Event {
	if r.Network == nil {
		return nil
	}
	var out []netproxy.Event
	for _, e := range r.Network.Events {
		if e.Kind == kind && (host == "" || e.Host == host) {
			out = append(out, e)
		}
	}
	return out
}

func (r *netResult) String() string {
	b, _ := json.MarshalIndent(r.Network, "  ", "  ")
	return fmt.Sprintf("moat %s\n  exit %d (%s) %s\n  stdout: %s\n  stderr: %s\n  network: %s",
		strings.Join(r.args, " "), r.ExitCode, r.ExitReason, r.Error, r.Stdout, r.Stderr, b)
}

// moatRun runs `moat run --json FLAGS -- ARGV` with $HOME in the
// fixture (so no user policy file applies) and decodes its result.
func (fx *fixture) moatRun(t *testing.T, flags []string, argv ...string) *netResult {
	t.Helper()
	args := append([]string{"run", "--json"}, flags...)
	args = append(append(args, "--"), argv...)
	o := fx.moatExec(t, args...)
	var res netResult
	if err := json.Unmarshal([]byte(o.Stdout), &res); err != nil {
		t.Fatalf("moat %v: exit %d, not a JSON result: %v\nstdout: %s\nstderr: %s", args, o.Code, err, o.Stdout, o.Stderr)
	}
	if res.ExitCode != o.Code {
		t.Fatalf("moat %v: JSON exit_code %d but process exit %d", args, res.ExitCode, o.Code)
	}
	res.args = args
	return &res
}

// sh runs a shell script in a sandbox with flags and requires exit 0.
func (fx *fixture) sh(t *testing.T, flags []string, script string) *netResult {
	t.Helper()
	res := fx.moatRun(t, flags, "/bin/sh", "-c", script)
	if res.ExitCode != 0 {
		t.Fatalf("script failed in the sandbox:\n%s", res)
	}
	return res
}

// moatExec runs the moat binary (a hang guard, not a timed assertion: it
// gets SIGTERM after hangGuard and the test fails).
func (fx *fixture) moatExec(t *testing.T, args ...string) testutil.Output {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, testutil.Moat(t), args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = append(os.Environ(), "HOME="+fx.home, "MOAT_CONFIG=")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Errorf("moat %v did not end within %v and was terminated", args, hangGuard)
	}
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("moat %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return testutil.Output{Code: code, Stdout: out.String(), Stderr: errb.String()}
}

// outside runs a shell script on the host as nobody (no proxy variables,
// no sandbox) and returns its stdout; a failure of the shell itself fails
// the test.
func outside(t *testing.T, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL,
		Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}}
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "LANG=C.UTF-8"}
	cmd.Dir = "/"
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("control on the host: %v\nscript: %s\nstdout: %s\nstderr: %s", err, script, out.String(), errb.String())
	}
	return out.String()
}

// shq quotes s for the shell.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// curlOut is what one curl invocation did.
type curlOut struct {
	Exit    int    // curl's exit status
	Code    int    // %{http_code}: the final response's status (0: none)
	Connect int    // %{http_connect}: the proxy's answer to CONNECT (0: none)
	XError  string // the X-Proxy-Error of any response head
	Body    string
}

func (c curlOut) String() string {
	return fmt.Sprintf("curl exit %d, http_code %d, http_connect %d, X-Proxy-Error %q, body %q", c.Exit, c.Code, c.Connect, c.XError, c.Body)
}

// curlScript is a shell function that runs curl with its arguments and
// prints what it did between markers (see parseCurl).
const curlScript = `probe() {
  rm -f /tmp/h /tmp/b
  w=$(curl -sS -o /tmp/b -D /tmp/h -w '%{http_code} %{http_connect}' "$@" 2>/tmp/e); rc=$?
  echo "@@probe $rc $w"
  echo "@@head"; cat /tmp/h 2>/dev/null
  echo "@@body"; cat /tmp/b 2>/dev/null
  echo "@@end"
}
`

// curls runs curl once per argument list in one sandbox with flags.
func (fx *fixture) curls(t *testing.T, flags []string, calls ...[]string) ([]curlOut, *netResult) {
	t.Helper()
	var sb strings.Builder
	sb.WriteString(curlScript)
	for _, c := range calls {
		sb.WriteString("probe")
		for _, a := range c {
			sb.WriteString(" " + shq(a))
		}
		sb.WriteString("\n")
	}
	res := fx.sh(t, flags, sb.String())
	outs := parseCurl(res.Stdout)
	if len(outs) != len(calls) {
		t.Fatalf("curl probes: got %d results for %d calls:\n%s", len(outs), len(calls), res)
	}
	return outs, res
}

// curl1 is curls with one call.
func (fx *fixture) curl1(t *testing.T, flags []string, args ...string) (curlOut, *netResult) {
	t.Helper()
	o, res := fx.curls(t, flags, args)
	return o[0], res
}

func parseCurl(s string) []curlOut {
	var outs []curlOut
	var cur *curlOut
	section := ""
	var body strings.Builder
	for _, line := range strings.SplitAfter(s, "\n") {
		trim := strings.TrimRight(line, "\r\n")
		switch {
		case strings.HasPrefix(trim, "@@probe "):
			f := strings.Fields(trim)
			outs = append(outs, curlOut{})
			cur = &outs[len(outs)-1]
			if len(f) >= 4 {
				cur.Exit, _ = strconv.Atoi(f[1])
				cur.Code, _ = strconv.Atoi(f[2])
				cur.Connect, _ = strconv.Atoi(f[3])
			}
			section = ""
		case cur == nil:
		case trim == "@@head":
			section = "head"
		case trim == "@@body":
			section = "body"
			body.Reset()
		case trim == "@@end":
			cur.Body = body.String()
			section = ""
		case section == "head":
			if k, v, ok := strings.Cut(trim, ":"); ok && strings.EqualFold(strings.TrimSpace(k), "X-Proxy-Error") && cur.XError == "" {
				cur.XError = strings.TrimSpace(v)
			}
		case section == "body":
			body.WriteString(line)
		}
	}
	return outs
}

// toolOut is what netTool printed.
type toolOut struct {
	OK        bool   `json:"ok"`
	Err       string `json:"err"`
	Status    int    `json:"status"`
	Connect   int    `json:"connect"`
	XError    string `json:"x_proxy_error"`
	Handshake string `json:"handshake"`
	Body      string `json:"body"`
	Addrs     []string
	Answers   int `json:"answers"`
	Results   []struct {
		Target string `json:"target"`
		OK     bool   `json:"ok"`
		Err    string `json:"err"`
	} `json:"results"`
}

func parseTool(t *testing.T, s string) toolOut {
	t.Helper()
	var o toolOut
	if err := json.Unmarshal([]byte(strings.TrimSpace(s)), &o); err != nil {
		t.Fatalf("nettool printed %q: %v", s, err)
	}
	return o
}

// tool runs netTool in a sandbox with flags.
func (fx *fixture) tool1(t *testing.T, flags []string, args ...string) (toolOut, *netResult) {
	t.Helper()
	res := fx.moatRun(t, flags, append([]string{"/usr/bin/python3", toolTarget}, args...)...)
	if res.ExitCode != 0 {
		t.Fatalf("nettool %v failed in the sandbox:\n%s", args, res)
	}
	return parseTool(t, res.Stdout), res
}

// wantRefusal asserts a proxy refusal: status (the final response's or the
// CONNECT answer's) 403 with X-Proxy-Error code, and a "connect" event with
// decision deny and that code for host.
func wantRefusal(t *testing.T, what string, got curlOut, res *netResult, host, code string) {
	t.Helper()
	status := got.Code
	if got.Connect != 0 {
		status = got.Connect
	}
	if status != http.StatusForbidden || got.XError != code {
		t.Errorf("%s: %s, want 403 with X-Proxy-Error %s\n%s", what, got, code, res)
	}
	wantEvent(t, what, res, host, netproxy.DecisionDeny, code)
}

// wantHello asserts that a request got the test server's /hello.
func wantHello(t *testing.T, what string, got curlOut, res *netResult) {
	t.Helper()
	if got.Exit != 0 || got.Code != http.StatusOK || got.Body != helloBody || got.XError != "" {
		t.Errorf("control: %s: %s, want 200 with the server's body\n%s", what, got, res)
	}
}

// wantEvent asserts a "connect" event for host with decision (and code).
func wantEvent(t *testing.T, what string, res *netResult, host, decision, code string) {
	t.Helper()
	for _, e := range res.events(netproxy.KindConnect, host) {
		if e.Decision == decision && e.Code == code {
			return
		}
	}
	t.Errorf("%s: no connect event for %s with decision %s code %q in the result:\n%s", what, host, decision, code, res)
}

// wantDNS asserts a "dns" event for host that answered want (in order)
// with decision.
func wantDNS(t *testing.T, what string, res *netResult, host, decision string, want ...string) {
	t.Helper()
	for _, e := range res.events(netproxy.KindDNS, host) {
		if e.Decision == decision && slices.Equal(e.Answers, want) {
			return
		}
	}
	t.Errorf("%s: no dns event for %s answering %v with decision %s in the result:\n%s", what, host, want, decision, res)
}

// newCA makes a test CA and a server certificate for *.moat.test and
// pkg.moat.test (ECDSA P-256) and returns the CA as PEM.
func newCA(t *testing.T) ([]byte, tls.Certificate, *x509.CertPool) {
	t.Helper()
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "moat network test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "pkg.moat.test"},
		DNSNames:  []string{"*.moat.test", "pkg.moat.test"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

// buildWheel returns a minimal valid wheel of moatpkg 1.0.
func buildWheel(t *testing.T) []byte {
	t.Helper()
	files := []struct{ name, body string }{
		{"moatpkg/__init__.py", "VERSION = \"1.0\"\n"},
		{"moatpkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: moatpkg\nVersion: 1.0\nSummary: moat network test package\n"},
		{"moatpkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: moat-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		w, err := zw.Create(f.name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(f.body))
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
	}
	record.WriteString("moatpkg-1.0.dist-info/RECORD,,\n")
	w, err := zw.Create("moatpkg-1.0.dist-info/RECORD")
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte(record.String()))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// buildGitRepo makes a bare repository with one commit, prepared for
// git's dumb HTTP protocol, and returns the directory holding repo.git.
func buildGitRepo(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	work := filepath.Join(root, "work")
	git := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=moat test", "-c", "user.email=test@moat.test",
			"-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false"}, args...)...)
		cmd.Dir = dir
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + root, "GIT_CONFIG_NOSYSTEM=1", "LANG=C"}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git(root, "init", "-q", work)
	writeFile(t, filepath.Join(work, "README.md"), gitContent)
	git(work, "add", "README.md")
	git(work, "commit", "-q", "-m", "first")
	git(root, "clone", "-q", "--bare", "--no-local", work, filepath.Join(root, "repo.git"))
	git(filepath.Join(root, "repo.git"), "update-server-info")
	return root
}

// hostV4 returns the first IPv4 address of an up, non-loopback interface
// of the host (invalid if none).
func hostV4(t *testing.T) netip.Addr {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifs {
		if i.Flags&net.FlagUp == 0 || i.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() && !p.Addr().IsLinkLocalUnicast() {
				return p.Addr()
			}
		}
	}
	return netip.Addr{}
}

// openDir returns a temp directory every uid can traverse.
func openDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	for _, p := range []string{filepath.Dir(d), d} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// writeFile writes a world-readable file.
func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
}
