// Command agent shows moat's Go SDK used the way an AI agent's tool runner
// would use it: create a sandbox, write a program into it, run it, read
// back a file it wrote, show the sandbox's audit trail and delete it.
//
// It connects as client.New() does, from the environment: MOAT_URL and
// MOAT_TOKEN for a running `moat serve`, or (without MOAT_URL) it starts
// `moat serve --stdio` itself (MOAT_BIN names the binary).
//
//	go run ./examples/agent
//
// It exits 1 with a message on any failure.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/client"
	"github.com/moat-sandbox/moat/sandbox"
)

// program is what the "agent" runs: it computes something, prints it and
// writes it to a file.
const program = `import json, math, platform

primes = [n for n in range(2, 1000) if all(n % d for d in range(2, math.isqrt(n) + 1))]
result = {"count": len(primes), "sum": sum(primes), "largest": primes[-1], "python": platform.python_version()}
with open("/workspace/result.json", "w") as f:
    json.dump(result, f)
print(f"{len(primes)} primes below 1000, summing to {sum(primes)}")
`

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(1)
	}
}

func run() (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	c, err := client.New()
	if err != nil {
		return err
	}
	defer func() {
		if cerr := c.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()

	sb, err := c.CreateSandbox(ctx, api.CreateSandbox{
		Limits: sandbox.Limits{MemoryBytes: 256 << 20, Pids: 64},
		Labels: map[string]string{"example": "agent"},
	})
	if err != nil {
		return fmt.Errorf("creating a sandbox: %w", err)
	}
	fmt.Println("sandbox", sb.ID())
	deleted := false
	defer func() {
		if !deleted {
			// Clean up after a failure, even if ctx has expired.
			dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer dcancel()
			if derr := sb.Delete(dctx); derr != nil && !client.IsNotFound(derr) {
				fmt.Fprintln(os.Stderr, "agent: deleting the sandbox:", derr)
			}
		}
	}()

	if err := sb.WriteFile(ctx, "/workspace/hello.py", []byte(program), 0o644); err != nil {
		return fmt.Errorf("writing hello.py: %w", err)
	}
	res, err := sb.Exec(ctx, api.Exec{Args: []string{"python3", "/workspace/hello.py"}, TimeoutMs: 30_000})
	if err != nil {
		return fmt.Errorf("running hello.py: %w", err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("hello.py exited %d (%s): %s%s", res.ExitCode, res.ExitReason, res.Error, res.Stderr)
	}
	fmt.Printf("python3 said: %s (exit %d, %d ms, peak memory %d KiB)\n", strings.TrimSpace(res.Stdout), res.ExitCode, res.DurationMs, res.PeakMemoryBytes>>10)

	data, err := sb.ReadFile(ctx, "/workspace/result.json")
	if err != nil {
		return fmt.Errorf("reading result.json: %w", err)
	}
	var result struct {
		Count, Sum, Largest int
		Python              string
	}
	if err := json.Unmarshal(data, &result); err != nil {
		return fmt.Errorf("result.json: %w", err)
	}
	if result.Count == 0 {
		return errors.New("result.json: no primes counted")
	}
	fmt.Printf("result.json: %d primes, sum %d, largest %d (Python %s)\n", result.Count, result.Sum, result.Largest, result.Python)

	fmt.Println("audit trail:")
	page, err := c.Audit(ctx, api.AuditQuery{Sandbox: sb.ID(), Limit: 100})
	if err != nil {
		return fmt.Errorf("reading the audit trail: %w", err)
	}
	for _, ev := range page.Events {
		line := fmt.Sprintf("  #%-5d %s  %-16s %-6s", ev.Seq, ev.Time.Local().Format("15:04:05.000"), ev.Kind, ev.Decision)
		if ev.Call != "" {
			line += " call=" + ev.Call
		}
		if ev.DurationMs > 0 {
			line += fmt.Sprintf(" %dms", ev.DurationMs)
		}
		if ev.Error != "" {
			line += " error=" + ev.Error
		}
		if len(ev.Request) > 0 {
			line += " " + shorten(string(ev.Request), 100)
		}
		fmt.Println(strings.TrimRight(line, " "))
	}
	if page.More {
		fmt.Println("  …")
	}

	if err := sb.Delete(ctx); err != nil {
		return fmt.Errorf("deleting the sandbox: %w", err)
	}
	deleted = true
	fmt.Println("deleted", sb.ID())
	return nil
}

// shorten cuts s to at most n bytes.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
