package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/creack/pty"

	"github.com/moat-sandbox/moat/internal/testutil"
)

// secretFile writes content to a private file and returns its path.
func secretFile(t *testing.T, content string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// asSecret gives the command the file f as the secret NAME (redacted);
// asPlainFile (the control) binds the same file read-only and points
// $NAME_FILE at it, so the command reads the same bytes unredacted.
func asSecret(name, f string) []string { return []string{"--secret", name + "=@" + f} }

func asPlainFile(name, f string) []string {
	target := "/opt/moat-test-" + strings.ToLower(name)
	return []string{"--ro", f + ":" + target, "-e", name + "_FILE=" + target}
}

// leaks reports which of values occur in s, ignoring ASCII case.
func leaks(s string, values ...string) []string {
	var out []string
	for _, v := range values {
		if strings.Contains(strings.ToLower(s), strings.ToLower(v)) {
			out = append(out, v)
		}
	}
	return out
}

// TestSecretTrimmed: a secret file ends with a newline; the value as
// programs print it ($(cat f), Python's .strip()) is redacted too, in
// captured (--json) and streamed output. The control reads the same file
// without --secret and prints the value.
func TestSecretTrimmed(t *testing.T) {
	testutil.RequireRoot(t)
	const value = "Hunter2-Moat-Trim"
	f := secretFile(t, value+"\n")
	script := `v=$(cat "$T_FILE"); echo "cat=[$v]"
python3 -c 'import os,sys; sys.stdout.write("py=" + open(os.environ["T_FILE"]).read().strip() + ";\n")'`
	if res := testutil.Sh(t, script, asPlainFile("T", f)...); res.ExitCode != 0 || res.Stdout != "cat=["+value+"]\npy="+value+";\n" {
		t.Fatalf("control: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	want := "cat=[[REDACTED:T]]\npy=[REDACTED:T];\n"
	if res := testutil.Sh(t, script, asSecret("T", f)...); res.Stdout != want {
		t.Fatalf("--json: stdout %q, want %q (stderr %q)", res.Stdout, want, res.Stderr)
	}
	if o := testutil.Exec(t, append(append([]string{"run"}, asSecret("T", f)...), "--sh", script)...); o.Code != 0 || o.Stdout != want {
		t.Fatalf("streamed: exit %d stdout %q, want %q", o.Code, o.Stdout, want)
	}
}

// TestSecretShort: a secret with fewer than 4 bytes besides surrounding
// whitespace is refused (it could not be redacted without blanking out
// ordinary output), without showing its value.
func TestSecretShort(t *testing.T) {
	testutil.RequireRoot(t)
	for _, v := range []string{"xyz\n", " \n\n", "\t\tq9z\r\n"} {
		o := testutil.Exec(t, "run", "--secret", "T=@"+secretFile(t, v), "--", "true")
		if o.Code != 125 || !strings.Contains(o.Stderr, "at least 4") || strings.TrimSpace(v) != "" && strings.Contains(o.Stderr, strings.TrimSpace(v)) {
			t.Errorf("secret %q: exit %d stderr %q", v, o.Code, o.Stderr)
		}
	}
	if o := testutil.Exec(t, "run", "--secret", "T=@"+secretFile(t, " abcd\n"), "--", "true"); o.Code != 0 {
		t.Errorf("a 4-byte secret: exit %d stderr %q", o.Code, o.Stderr)
	}
}

// runPTY runs moat with args on a new pty (as a terminal user would) and
// returns everything written to the terminal.
func runPTY(t *testing.T, args ...string) string {
	t.Helper()
	ptm, pts, err := pty.Open()
	if err != nil {
		testutil.SkipOrFail(t, "no pty: "+err.Error())
	}
	defer ptm.Close()
	cmd := exec.Command(testutil.Moat(t), args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pts, pts, pts
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pts.Close()
	var buf bytes.Buffer
	done := make(chan struct{})
	go func() { _, _ = buf.ReadFrom(ptm); close(done) }()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("moat %v: %v\n%q", args, err, buf.String())
	}
	ptm.Close()
	<-done
	return buf.String()
}

// TestSecretTTY: under -t the pty's line discipline writes "\n" as
// "\r\n", so `cat` of a secret file (one line or several) no longer
// prints the value byte for byte; it is redacted all the same. The
// control cats the same files without --secret and shows them.
func TestSecretTTY(t *testing.T) {
	testutil.RequireRoot(t)
	one, multi := "Hunter2-Moat-TTY", "first-line-Q7\nsecond-line-Z9\n"
	fa, fb := secretFile(t, one+"\n"), secretFile(t, multi)
	script := `cat "$A_FILE"; cat "$B_FILE"; echo "[$(cat "$B_FILE")]"; echo END`
	run := func(flags ...string) string {
		return runPTY(t, append(append([]string{"run", "-t"}, flags...), "--sh", script)...)
	}
	control := run(append(asPlainFile("A", fa), asPlainFile("B", fb)...)...)
	if !strings.Contains(control, one+"\r\n") || !strings.Contains(control, "first-line-Q7\r\nsecond-line-Z9\r\n") {
		t.Fatalf("control: %q", control)
	}
	out := run(append(asSecret("A", fa), asSecret("B", fb)...)...)
	if l := leaks(out, one, "first-line-Q7", "second-line-Z9"); len(l) > 0 {
		t.Fatalf("under -t %q leaked: %q", l, out)
	}
	if want := "[REDACTED:A][REDACTED:B][[REDACTED:B]]\r\nEND\r\n"; !strings.Contains(out, want) {
		t.Fatalf("under -t: %q, want %q", out, want)
	}
}

// TestSecretNetRefusal: a request to a host name holding the secret in
// mixed case is refused by the egress proxy, which lower-cases host
// names. The value is in neither the proxy's 403 body as the command sees
// it, nor the command's output, nor moat's refusal line on stderr, nor the
// --json result's network events. The control is the same run with the
// file not a secret: each of those carries the (lower-cased) value.
func TestSecretNetRefusal(t *testing.T) {
	testutil.RequireRoot(t)
	const value = "Hunter2-Moat-Net"
	f := secretFile(t, value+"\n")
	// The host comes from the file, so the command line holds no value.
	script := `h=$(cat "$T_FILE")
body=$(curl -s -i "http://$h.example/")
echo "$body"
echo "seen=$(printf '%s' "$body" | grep -ci -- "$h")"`
	run := func(flags ...string) (streamed testutil.Output, result string) {
		flags = append([]string{"--net", "proxy"}, flags...)
		streamed = testutil.Exec(t, append(append([]string{"run"}, flags...), "--sh", script)...)
		j := testutil.Exec(t, append(append([]string{"run", "--json"}, flags...), "--sh", script)...)
		var res struct {
			Stdout  string
			Network struct {
				Denied int
				Events []map[string]any
			}
		}
		if err := json.Unmarshal([]byte(j.Stdout), &res); err != nil || res.Network.Denied == 0 {
			t.Fatalf("--json: %v %q", err, j.Stdout)
		}
		events, _ := json.Marshal(res.Network.Events)
		return streamed, res.Stdout + "\n" + string(events)
	}
	co, cj := run(asPlainFile("T", f)...)
	if !strings.Contains(co.Stdout, "403") || strings.Contains(co.Stdout, "seen=0") ||
		len(leaks(co.Stderr, value)) == 0 || len(leaks(cj, value)) == 0 {
		t.Fatalf("control: the value should show:\nstdout %q\nstderr %q\njson %s", co.Stdout, co.Stderr, cj)
	}
	o, js := run(asSecret("T", f)...)
	if !strings.Contains(o.Stdout, "403") || !strings.Contains(o.Stdout, "seen=0") {
		t.Errorf("the 403 body the command saw carries the value: %q", o.Stdout)
	}
	if l := leaks(o.Stdout+o.Stderr, value); len(l) > 0 {
		t.Errorf("streamed run leaked:\nstdout %q\nstderr %q", o.Stdout, o.Stderr)
	}
	if !strings.Contains(o.Stderr, "refused [REDACTED:T].example:80") {
		t.Errorf("refusal line: %q", o.Stderr)
	}
	if l := leaks(js, value); len(l) > 0 || !strings.Contains(js, `"host":"[REDACTED:T].example"`) {
		t.Errorf("--json leaked or lacks the redacted event: %s", js)
	}
}
