package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/creack/pty"

	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/sandbox"
)

// policyResult is moat run's --json result with its policy object.
type policyResult struct {
	sandbox.Result
	Policy *struct {
		Profile  string `json:"profile"`
		Effect   string `json:"effect"`
		Decided  string `json:"decided"`
		Rule     string `json:"rule"`
		Source   string `json:"source"`
		Reason   string `json:"reason"`
		Approval string `json:"approval"`
		Kernel   *struct {
			Restrict []sandbox.Restriction `json:"restrict"`
			Binds    []sandbox.Bind        `json:"binds"`
		} `json:"kernel"`
	} `json:"policy"`
}

// moatEnv runs moat with HOME set to home (the user policy's home) and
// returns its exit code and output.
func moatEnv(t *testing.T, home string, args ...string) testutil.Output {
	t.Helper()
	cmd := exec.Command(testutil.Moat(t), args...)
	cmd.Env = append(os.Environ(), "HOME="+home)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatal(err)
		}
		code = ee.ExitCode()
	}
	return testutil.Output{Code: code, Stdout: out.String(), Stderr: errb.String()}
}

func decodeResult(t *testing.T, o testutil.Output) *policyResult {
	t.Helper()
	var r policyResult
	if err := json.Unmarshal([]byte(o.Stdout), &r); err != nil {
		t.Fatalf("not a JSON result (exit %d): %v\n%s\n%s", o.Code, err, o.Stdout, o.Stderr)
	}
	if r.ExitCode != o.Code {
		t.Fatalf("exit %d, JSON %d", o.Code, r.ExitCode)
	}
	return &r
}

func writeFile(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// TestRunPolicyDecisions: the command is decided before anything runs; a
// deny (per-call or from a layer file) is exit 126, exit_reason denied,
// with the rule and its file:line; an ask without a terminal is denied;
// bad policy input is 125.
func TestRunPolicyDecisions(t *testing.T) {
	testutil.RequireRoot(t)
	home, ws := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(ws, ".moat/policy.toml"), "version = 1\ndeny = [\"Exec(touch forbidden*)\"]\n", 0o644)
	writeFile(t, filepath.Join(home, ".config/moat/policy.toml"), "version = 1\nask = [\"Exec(git push*)\"]\n", 0o644)

	o := moatEnv(t, home, "run", "--json", "-w", ws, "--", "touch", "forbidden")
	r := decodeResult(t, o)
	if r.ExitCode != 126 || r.ExitReason != sandbox.ReasonDenied || r.Policy.Effect != "deny" ||
		r.Policy.Source != "project .moat/policy.toml:2" || !strings.Contains(r.Error, "deny Exec(touch forbidden*)") {
		t.Fatalf("project deny: %+v %+v", r.Result, r.Policy)
	}
	if _, err := os.Stat(filepath.Join(ws, "forbidden")); err == nil {
		t.Fatal("a denied command ran")
	}
	// Control: another command of the same run line runs.
	if o := moatEnv(t, home, "run", "-w", ws, "--", "touch", "allowed"); o.Code != 0 {
		t.Fatalf("control: %d %s", o.Code, o.Stderr)
	}
	if _, err := os.Stat(filepath.Join(ws, "allowed")); err != nil {
		t.Fatal(err)
	}
	// Spelled differently, through a shell: still denied.
	for _, args := range [][]string{{"--sh", "true && /usr/bin/touch   forbidden"}, {"--", "env", "A=1", "touch", "forbidden"}, {"--", "sh", "-c", "x=1; touch forbidden"}} {
		o := moatEnv(t, home, append([]string{"run", "-w", ws}, args...)...)
		if o.Code != 126 || !strings.Contains(o.Stderr, "Exec(touch forbidden*)") {
			t.Errorf("%q: exit %d %q", args, o.Code, o.Stderr)
		}
	}
	// Per-call deny, streaming mode: the reason on stderr.
	if o := moatEnv(t, home, "run", "--deny", "Exec(echo *)", "--", "echo", "hi"); o.Code != 126 || o.Stdout != "" || !strings.Contains(o.Stderr, "per-call deny[0]") {
		t.Errorf("per-call deny: %d %q %q", o.Code, o.Stdout, o.Stderr)
	}
	// Ask with no terminal (stdin is not one, no controlling tty): denied.
	cmd := exec.Command(testutil.Moat(t), "run", "--json", "--", "git", "push")
	cmd.Env = append(os.Environ(), "HOME="+home)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, _ := cmd.Output()
	r = decodeResult(t, testutil.Output{Code: cmd.ProcessState.ExitCode(), Stdout: string(out)})
	if r.ExitCode != 126 || r.Policy.Decided != "ask" || r.Policy.Approval != "no terminal" || !strings.Contains(r.Error, "no terminal") {
		t.Errorf("ask without terminal: %+v %+v", r.Result, r.Policy)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--profile", "trusted"}, "no policy file grants it"},
		{[]string{"--profile", "root"}, "want untrusted or trusted"},
		{[]string{"--deny", "Exec("}, "unterminated"},
		{[]string{"--approval-timeout", "0s"}, "approval-timeout"},
	} {
		o := moatEnv(t, home, append(append([]string{"run"}, c.args...), "--", "true")...)
		if o.Code != 125 || !strings.Contains(o.Stderr, c.want) {
			t.Errorf("%v: exit %d %q", c.args, o.Code, o.Stderr)
		}
	}
	// An invalid layer file is refused with its line, never ignored.
	writeFile(t, filepath.Join(ws, ".moat/policy.toml"), "version = 1\ndeny = [\"Exec(\"]\n", 0o644)
	if o := moatEnv(t, home, "run", "-w", ws, "--", "true"); o.Code != 125 || !strings.Contains(o.Stderr, ".moat/policy.toml:2") {
		t.Errorf("invalid project file: %d %q", o.Code, o.Stderr)
	}
}

// TestRunPolicyAskTerminal: an ask rule asks on the controlling terminal;
// y runs the command, anything else or no answer in time denies it.
func TestRunPolicyAskTerminal(t *testing.T) {
	testutil.RequireRoot(t)
	home := t.TempDir()
	for _, c := range []struct {
		name, answer string
		code         int
		want         string
	}{
		{"yes", "y\n", 0, "pushed"},
		{"no", "n\n", 126, "refused on the terminal"},
		{"timeout", "", 126, "no answer on the terminal"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ptm, pts, err := pty.Open()
			if err != nil {
				testutil.SkipOrFail(t, "no pty: "+err.Error())
			}
			defer ptm.Close()
			cmd := exec.Command(testutil.Moat(t), "run", "--ask", "Exec(echo pushed)", "--approval-timeout", "300ms", "--", "echo", "pushed")
			cmd.Env = append(os.Environ(), "HOME="+home)
			var stdout, stderr bytes.Buffer
			cmd.Stdin, cmd.Stdout, cmd.Stderr = pts, &stdout, &stderr
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pts.Close()
			// Wait for the question, then answer it.
			prompt := make([]byte, 0, 512)
			buf := make([]byte, 256)
			for !bytes.Contains(prompt, []byte("Allow once? [y/N]")) {
				n, err := ptm.Read(buf)
				if err != nil {
					t.Fatalf("reading the prompt: %v (%q)", err, prompt)
				}
				prompt = append(prompt, buf[:n]...)
			}
			if !bytes.Contains(prompt, []byte("ask Exec(echo pushed) (per-call ask[0])")) {
				t.Errorf("prompt %q", prompt)
			}
			if c.answer != "" {
				if _, err := ptm.Write([]byte(c.answer)); err != nil {
					t.Fatal(err)
				}
			}
			go func() { _, _ = bytes.NewBuffer(nil).ReadFrom(ptm) }()
			err = cmd.Wait()
			code := cmd.ProcessState.ExitCode()
			if code != c.code || !strings.Contains(stdout.String()+stderr.String(), c.want) {
				t.Fatalf("exit %d (%v), out %q err %q", code, err, stdout.String(), stderr.String())
			}
		})
	}
}

// TestPolicyKernelWorkspace: what the policy protects in a bound workspace
// stays protected when the policy layer is bypassed — the command is
// allowed, and then tries the files itself. Every attempt fails inside;
// each has a control on an unprotected sibling inside, and the protected
// files stay readable and writable on the host.
func TestPolicyKernelWorkspace(t *testing.T) {
	testutil.RequireRoot(t)
	home := t.TempDir()
	// The owner's control outside needs to reach the workspace: not under
	// t.TempDir's 0700 parent.
	ws, err := os.MkdirTemp("", "moat-policy-ws-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(ws) })
	const owner = 4242
	files := map[string]string{
		"id_rsa": "KEY", ".env": "TOKEN=1", "server.pem": "PEM", "secrets/db.txt": "pw",
		".git/config": "[core]\n", ".bashrc": "# rc\n", "vendor/lib.go": "package lib\n",
		"notes.txt": "notes\n", "src/main.go": "package main\n", "sub/.git/config": "[core]\n",
		".moat/policy.toml": "version = 1\n",
	}
	for p, c := range files {
		writeFile(t, filepath.Join(ws, p), c, 0o600)
	}
	writeFile(t, filepath.Join(home, ".config/moat/policy.toml"), "version = 1\ndeny = [\"Read(secrets/**)\", \"Write(vendor/**)\"]\n", 0o644)
	if err := filepath.Walk(ws, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, owner, owner)
	}); err != nil {
		t.Fatal(err)
	}
	attempts := []struct{ name, sh string }{
		{"read id_rsa", "cat id_rsa"},
		{"read .env", "cat .env"},
		{"read server.pem", "cat server.pem"},
		{"list denied dir", "ls secrets"},
		{"read denied file", "cat secrets/db.txt"},
		{"rename hidden file", "mv id_rsa stolen"},
		{"remove hidden file", "rm -f server.pem"},
		{"write .git/config", "echo '[core] fsmonitor = evil' >> .git/config"},
		{"replace .git/config", "echo x > cfg && mv -f cfg .git/config"},
		{"plant a hook", "echo evil > .git/hooks/pre-commit"},
		{"move .git away", "mv .git g"},
		{"move hooks away", "mv .git/hooks h"},
		{"remove .git", "rm -rf .git; test -e .git/config && exit 1; exit 0"},
		{"nested repo config", "echo x >> sub/.git/config"},
		{"nested repo hook", "mkdir -p sub/.git/hooks/x"},
		{"write .bashrc", "echo evil >> .bashrc"},
		{"remove .bashrc", "rm -f .bashrc"},
		{"write deny Write dir", "echo x > vendor/new.go"},
		{"change deny Write file", "echo x >> vendor/lib.go"},
		{"write policy file", "echo 'profile = \"trusted\"' >> .moat/policy.toml"},
		{"replace policy dir", "mv .moat m && mkdir .moat"},
	}
	for _, a := range attempts {
		t.Run(a.name, func(t *testing.T) {
			o := moatEnv(t, home, "run", "-w", ws, "--sh", a.sh)
			if o.Code == 0 {
				t.Fatalf("allowed inside: %q (stderr %q)", a.sh, o.Stderr)
			}
		})
	}
	// Controls inside: the same operations on unprotected files work.
	o := moatEnv(t, home, "run", "-w", ws, "--sh", "cat notes.txt >/dev/null && echo y >> notes.txt && mv src s2 && mv s2 src && mkdir -p extra/.cache && echo z > extra/f && git --version >/dev/null 2>&1; ls .git >/dev/null && rm -r extra")
	if o.Code != 0 {
		t.Fatalf("control inside: exit %d %q", o.Code, o.Stderr)
	}
	// The host files are intact and still the owner's.
	for p, c := range files {
		b, err := os.ReadFile(filepath.Join(ws, p))
		if p == "notes.txt" {
			c += "y\n"
		}
		if err != nil || string(b) != c {
			t.Errorf("%s on the host: %q %v", p, b, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(ws, ".git/hooks")); err == nil {
		t.Errorf("hooks planted")
	}
	// The known limit: a protected entry that does not exist yet (here a
	// workspace without .moat) can be created inside. The project layer can
	// only narrow, so a policy file planted that way grants nothing.
	ws2 := t.TempDir()
	if o := moatEnv(t, home, "run", "-w", ws2, "--sh", "mkdir .moat && printf 'version = 1\\nprofile = \"trusted\"\\nallow = [\"Write(/etc/**)\"]\\n' > .moat/policy.toml"); o.Code != 0 {
		t.Fatalf("planting a policy file: %d %q", o.Code, o.Stderr)
	}
	r := decodeResult(t, moatEnv(t, home, "run", "--json", "-w", ws2, "--", "true"))
	if r.ExitCode != 0 || r.Policy.Profile != "untrusted" {
		t.Fatalf("planted policy widened the sandbox: %+v %q", r.Policy, r.Error)
	}
	// Control outside: as the owner (an unprivileged uid) the files are
	// readable and writable.
	ctl := exec.Command("/bin/sh", "-c", "cat id_rsa .env secrets/db.txt >/dev/null && echo '#' >> .bashrc && echo '#' >> .git/config")
	ctl.Dir = ws
	ctl.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: owner, Gid: owner}}
	if out, err := ctl.CombinedOutput(); err != nil {
		t.Fatalf("control outside as uid %d: %v %s", owner, err, out)
	}
}

// TestPolicyKernelTrusted: the trusted profile shows the home read-only
// with its credentials hidden, and the host's runtime directories not at
// all; the same reads work on the host.
func TestPolicyKernelTrusted(t *testing.T) {
	testutil.RequireRoot(t)
	base, err := os.UserHomeDir()
	if err != nil {
		t.Skip("no home directory")
	}
	home, err := os.MkdirTemp(base, ".moat-trusted-test-")
	if err != nil {
		testutil.SkipOrFail(t, "cannot make a test home: "+err.Error())
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	writeFile(t, filepath.Join(home, ".ssh/id_ed25519"), "KEY", 0o600)
	writeFile(t, filepath.Join(home, ".aws/credentials"), "AWS", 0o600)
	writeFile(t, filepath.Join(home, ".netrc"), "machine x", 0o600)
	writeFile(t, filepath.Join(home, "notes.txt"), "notes", 0o600)
	writeFile(t, filepath.Join(home, "proj/key.pem"), "PEM", 0o600)
	writeFile(t, filepath.Join(home, ".config/moat/policy.toml"), "version = 1\nprofile = \"trusted\"\n", 0o644)

	o := moatEnv(t, home, "run", "--json", "--sh", "cat "+home+"/notes.txt")
	r := decodeResult(t, o)
	if r.ExitCode != 0 || r.Stdout != "notes" || r.Policy.Profile != "trusted" {
		t.Fatalf("control inside: %+v %q", r.Policy, r.Stderr)
	}
	for _, sh := range []string{
		"cat " + home + "/.ssh/id_ed25519", "ls " + home + "/.ssh", "cat " + home + "/.aws/credentials",
		"cat " + home + "/.netrc", "echo x >> " + home + "/notes.txt", "touch " + home + "/new",
		"ls /var/lib/moat/", "cat /proc/1/environ | grep -q HOME=" + home, "ls /run/moat",
	} {
		if o := moatEnv(t, home, "run", "--sh", sh); o.Code == 0 {
			t.Errorf("allowed inside: %q", sh)
		}
	}
	// The policy engine refuses what the kernel does not hide (a credential
	// name inside a read-only host directory) when moat is asked.
	if o := moatEnv(t, home, "policy", "explain", "Read("+home+"/proj/key.pem)"); !strings.Contains(o.Stdout, "deny") {
		t.Errorf("explain: %q", o.Stdout)
	}
	// Control outside: the same files are readable on the host.
	for _, p := range []string{".ssh/id_ed25519", ".aws/credentials", ".netrc"} {
		if _, err := os.ReadFile(filepath.Join(home, p)); err != nil {
			t.Errorf("control outside: %v", err)
		}
	}
}
