// Package agent holds the end-to-end tests of `moat agent`: the real moat
// binary, a private daemon (`moat serve --stdio --models FILE`, data in a
// temporary directory) or a `moat serve` over HTTP, and fake model
// providers (agent/model/modeltest: an OpenAI-compatible and an Anthropic
// server replaying scripted turns) — no real model is reached. They cover
// a task that writes a file, runs it and reads its output; concurrent runs
// sharing the daemon's one model client under a provider's
// max_concurrency; balancing and failover between two providers; the
// green-tea guarantee (a green-tea agent never reaches an untagged
// provider); resuming a run after its daemon was killed; and --json.
//
// The tests need root (their tool calls run in sandboxes) and are skipped
// without it, except under CI=true where they fail instead. They write
// only in temporary directories.
//
// The suite tests the Linux sandbox: its files build on Linux only.
package agent
