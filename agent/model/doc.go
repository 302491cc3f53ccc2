// Package model is moat's model client: one per moat instance, shared by
// every agent (the seed's Oracle: context flows through the model, danger
// is sandboxed in a process — this package is the first half, and never
// runs anything).
//
// A Client is made from a Config of providers (New): each has a kind
// (KindOpenAI for any OpenAI-compatible Chat Completions endpoint,
// through github.com/openai/openai-go/v3; KindAnthropic for the Messages
// API, through github.com/anthropics/anthropic-sdk-go), a base URL, a
// model and optional aliases, tags, an API key file, a max_concurrency
// and a weight. Client.Complete translates a Request (the kind-neutral
// conversation of types.go) to the provider's API and its answer back.
//
// # Routing
//
// A request names a model alias and the tags it requires. The eligible
// providers are those whose model or aliases match the alias AND that
// carry every required tag; this set is computed first and nothing later
// widens it. Among them the client calls the one with the lowest
// in-flight count per weight (then the fewest requests per weight, then
// the name), each provider's max_concurrency bounding its calls in flight
// (a request waits, bounded by its context, only while every eligible
// provider is full: a full provider never holds up a request another
// could take). A retryable failure (429, honouring Retry-After up to the
// cap; 5xx; a timeout; a connection error; a nonsensical answer) fails
// over to the next eligible provider, and once each has failed the client
// backs off (jittered, capped) and tries again, up to WithRetry's
// attempts. Any other 4xx fails at once. Failures are *ProviderError;
// every attempt is reported to the Observer (WithObserver) for metrics
// and audit.
//
// # The green-tea guarantee
//
// A request tagged green-tea (data that must stay local) reaches only
// providers tagged green-tea: tags filter before balancing, failover and
// retries, so no failure can route it elsewhere. With no such provider
// the request fails with ErrNoProvider before anything is sent (and the
// Observer sees an Attempt of class ClassNoProvider, to audit). The same
// holds for every tag.
//
// # Keys
//
// A provider's API key is read once by New from its api_key_file (a
// regular file, not a symlink, at most 64 KiB; ReadKeyFile) or from the
// daemon's KeyFunc. It goes only into the provider's HTTP header: errors
// (the provider's message is cut out of them), logs and Attempts never
// hold it, and the SDKs' environment defaults (OPENAI_API_KEY,
// ANTHROPIC_API_KEY…) are overridden by the configuration.
//
// Package modeltest holds in-test fake providers speaking both wire
// formats.
package model
