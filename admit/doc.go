// Package admit is admission: from a request and the policy layers to a
// spec the runtime can build, with the decision and the egress endpoint.
//
// Both front doors admit through it: moat run (cmd/moat, runpolicy.go and
// runnet.go) and the daemon (server, policy.go and network.go). The steps,
// in the order a front door takes them:
//
//   - Layers.Load loads the policy layers for a spec's context: the
//     managed file, the project file of the spec's host workspace, the
//     user's file (a policy.Watcher, so the daemon can re-read them).
//   - Rules parses per-call rules (moat run's --allow/--ask/--deny, a
//     create's or an exec's policy) and Narrow adds them, which can only
//     narrow; DenyRules makes deny rules of a network denylist.
//   - Decide decides a request (an exec's argv or shell line, a path).
//   - Compile compiles the allowed policy into the spec (compile.Policy):
//     binds, hidden, read-only and pinned paths.
//   - ParseNetwork, ListsFit, PermitOpen and BoundAllow check the network
//     a caller asks for; Attach puts it into the spec, with an endpoint of
//     the egress proxy deciding with an compile.NetPolicy for mode proxy.
//
// What stays in each front door is its own: the flags, the terminal's ask
// prompt and the printing for moat run; approvals, audit events, metrics
// and the API's errors for the daemon. The errors of this package are
// plain (the caller's or the operator's fault is said by their type), so
// that each front door words them in its own terms.
//
// admit imports neither server nor a runtime (internal/importrules).
package admit
