//go:build linux

package escape

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/sandbox"
)

func randomToken(t testing.TB) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// TestSecretReads: docs/THREAT-MODEL.md "secret reads" row. A user's ~/.ssh and
// ~/.aws next to the workspace, /root, /etc/shadow and its kin, moat's state
// directory and another sandbox's workspace are not visible inside. The
// fake secrets are world-readable, so that nothing but the sandbox stands
// between them and the probe.
func TestSecretReads(t *testing.T) {
	testutil.RequireRoot(t)
	base := openDir(t)
	home := filepath.Join(base, "home", "alice")
	ws := filepath.Join(home, "project")
	key := filepath.Join(home, ".ssh", "id_ed25519")
	aws := filepath.Join(home, ".aws", "credentials")
	needle := "MOAT-FAKE-SECRET-" + randomToken(t)
	mkdirs(t, ws, filepath.Dir(key), filepath.Dir(aws))
	writeFile(t, key, "-----BEGIN OPENSSH PRIVATE KEY-----\n"+needle+"\n", 0o644)
	writeFile(t, aws, "[default]\naws_secret_access_key = "+needle+"\n", 0o644)
	chown(t, nobody, home, ws, filepath.Dir(key), filepath.Dir(aws), key, aws)
	if err := os.Chmod(filepath.Dir(filepath.Dir(home)), 0o755); err != nil {
		t.Fatal(err)
	}

	t.Run("user secrets next to the workspace", func(t *testing.T) {
		atts := []attempt{
			A("read", "/workspace/../.ssh/id_ed25519", needle),
			A("read", "/workspace/../.aws/credentials", needle),
			A("read", key, needle),
			A("read", aws, needle),
			A("read", "/home/alice/.ssh/id_ed25519", needle),
			A("ls", filepath.Dir(key)),
		}
		in := inside(t, []string{"-w", ws}, atts...)
		for _, o := range in {
			denied(t, o, "ENOENT")
		}
		out := outside(t, asNobody, A("read", key, needle), A("read", aws, needle))
		for _, o := range out {
			works(t, o)
			if o.str("found") != "true" {
				t.Errorf("control: %s did not contain the secret", o)
			}
		}
		home := inside(t, nil, A("ls", "/home"))[0]
		works(t, home)
		if names := home.strs("names"); !slices.Equal(names, []string{"sandbox"}) {
			t.Errorf("ESCAPE: /home inside lists %v, want only the sandbox user's home", names)
		}
	})

	t.Run("system secrets", func(t *testing.T) {
		// Paths that hold secrets on a typical host; each present one
		// is checked (inside: not visible; outside as root: readable,
		// only its size is looked at).
		var paths []string
		for _, p := range []string{"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
			"/etc/sudoers", "/etc/ssh/ssh_host_ed25519_key", "/etc/ssh/ssh_host_rsa_key",
			"/etc/ssl/private", "/etc/machine-id", "/etc/subuid", "/root", "/root/.ssh",
			"/root/.npmrc", "/root/.aws/credentials", "/root/.config/gh/hosts.yml", "/var/lib/moat",
			"/run/moat", "/var/run/moat"} {
			if _, err := os.Lstat(p); err == nil {
				paths = append(paths, p)
			}
		}
		// moat's state directory (the uid-slot leases now, the
		// daemon's token and database later) and whatever is in it.
		if ents, err := os.ReadDir("/run/moat"); err == nil {
			for _, e := range ents {
				paths = append(paths, filepath.Join("/run/moat", e.Name()))
			}
		}
		var in, ctl []attempt
		for _, p := range paths {
			in = append(in, A("stat", p))
			if fi, err := os.Stat(p); err == nil && fi.IsDir() {
				in = append(in, A("ls", p))
				ctl = append(ctl, A("ls", p))
			} else {
				in = append(in, A("read", p))
				ctl = append(ctl, A("read", p))
			}
		}
		got := inside(t, nil, in...)
		for _, o := range got {
			denied(t, o, "ENOENT")
		}
		for _, o := range outside(t, asRoot, ctl...) {
			works(t, o)
		}
		t.Logf("checked %v", paths)
	})

	t.Run("another sandbox's workspace", func(t *testing.T) {
		wsA, wsB := filepath.Join(base, "ws-a"), filepath.Join(base, "ws-b")
		mkdirs(t, wsA, wsB)
		chown(t, nobody, wsA, wsB)
		fifo := filepath.Join(wsA, "ready")
		if err := unix.Mkfifo(fifo, 0o666); err != nil {
			t.Fatal(err)
		}
		chown(t, nobody, fifo)
		marker := "moat-escape-a-" + strconv.Itoa(os.Getpid())
		secret := needle + "-A"
		// Sandbox A writes a secret into its workspace and its /tmp,
		// listens on an abstract socket, then signals and waits.
		a := startSandbox(t, []string{"-w", wsA, "-i"},
			A("write", "/workspace/secret-a", secret),
			A("write", "/tmp/secret-a", secret),
			A("listen-abstract", marker),
			A("hold", "/workspace/ready"),
		)
		a.waitFIFO(t, fifo)
		in := inside(t, []string{"-w", wsB},
			A("read", filepath.Join(wsA, "secret-a"), secret),
			A("read", "/tmp/secret-a", secret),
			A("ls", wsA),
			A("connect-unix", "@"+marker),
			A("pids"),
		)
		a.finish(t)
		for _, o := range in[:4] {
			denied(t, o, "ENOENT", "ECONNREFUSED")
		}
		for pid, cmd := range in[4].strMap("cmdlines") {
			// B's own command line names the marker too; only A's has
			// the listen attempt.
			if bytes.Contains([]byte(cmd), []byte("listen-abstract")) {
				t.Errorf("ESCAPE: sandbox B sees sandbox A's process %s: %q", pid, cmd)
			}
		}
		// Control: on the host, A's workspace file is there and
		// readable by its owner.
		out := outside(t, asNobody, A("read", filepath.Join(wsA, "secret-a"), secret))[0]
		works(t, out)
		if out.str("found") != "true" {
			t.Errorf("control: A's secret not found on the host: %v", out)
		}
	})
}

// bgSandbox is a sandbox running in the background with a "hold" attempt.
type bgSandbox struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   bytes.Buffer
	errb  bytes.Buffer
	done  chan error
}

// startSandbox starts `moat run --json FLAGS -- probe multi ATTS`; its
// last attempt should be "hold FIFO".
func startSandbox(t *testing.T, flags []string, atts ...attempt) *bgSandbox {
	t.Helper()
	args := append([]string{"run", "--json"}, flags...)
	args = append(args, "--ro", probeBin(t)+":"+probeTarget, "--", probeTarget, "multi", multiArg(t, atts))
	b := &bgSandbox{cmd: exec.Command(moatBin(t), args...), done: make(chan error, 1)}
	b.cmd.Stdout, b.cmd.Stderr = &b.out, &b.errb
	w, err := b.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	b.stdin = w
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { b.done <- b.cmd.Wait() }()
	t.Cleanup(func() {
		b.stdin.Close()
		_ = b.cmd.Process.Kill()
		<-b.done
		b.done <- nil
	})
	return b
}

// waitFIFO waits until the sandbox writes to fifo (host path), or fails if
// the sandbox ends first.
func (b *bgSandbox) waitFIFO(t *testing.T, fifo string) {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		f, err := os.Open(fifo) // blocks until the sandbox opens it for writing
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		data, _ := io.ReadAll(f)
		f.Close()
		got <- string(data)
	}()
	select {
	case s := <-got:
		if s != "ready\n" {
			t.Fatalf("sandbox signalled %q", s)
		}
	case err := <-b.done:
		b.done <- err
		// Unblock the reader, which waits for a writer.
		if w, err := os.OpenFile(fifo, os.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
		t.Fatalf("background sandbox ended before it was ready: %v\nstdout: %s\nstderr: %s", err, b.out.String(), b.errb.String())
	}
}

// finish closes the sandbox's stdin and checks that it ended cleanly.
func (b *bgSandbox) finish(t *testing.T) *sandbox.Result {
	t.Helper()
	b.stdin.Close()
	var err error
	select {
	case err = <-b.done:
	case <-time.After(hangGuard): // a hang guard, see moat
		_ = b.cmd.Process.Kill()
		err = <-b.done
		b.done <- err
		t.Fatalf("background sandbox did not end within %v after its stdin closed (killed)", hangGuard)
	}
	b.done <- err
	var res sandbox.Result
	if jerr := json.Unmarshal(b.out.Bytes(), &res); jerr != nil {
		t.Fatalf("background sandbox: %v, not a JSON result: %v\n%s\n%s", err, jerr, b.out.String(), b.errb.String())
	}
	if res.ExitCode != 0 {
		t.Errorf("background sandbox: exit %d (%s) %s: %s %s", res.ExitCode, res.ExitReason, res.Error, res.Stdout, res.Stderr)
	}
	outs, perr := parseOutcomes(res.Stdout)
	if perr != nil {
		t.Fatalf("background sandbox output: %v: %q", perr, res.Stdout)
	}
	for _, o := range outs {
		if !o.OK {
			t.Errorf("background sandbox: %s", o)
		}
	}
	return &res
}
