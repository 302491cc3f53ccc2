// Package sandboxtest is a fake sandbox.Runtime for tests: sandboxes that
// live in memory and "run" commands by a small script of behaviours.
//
// FOR TESTS ONLY. Nothing here isolates anything: there are no
// namespaces, no cgroups, no seccomp, no Landlock, no limits and no
// network. Every Enforcement it reports says "fake" (Runtime "fake", and
// one protection, named "fake", that says nothing is isolated). It
// exists so that the control plane (the server's API, auth, tenancy,
// quotas, policy decisions, approvals, store and audit) can be tested
// without root and fast; what the kernel enforces is tested with the
// real runtime (runtime/linux) only.
//
// # Files
//
// Each sandbox has an in-memory file tree: /workspace (the default
// working directory, writable), /tmp, /home/user, /etc/hostname and
// /etc/passwd, /dev/null and /dev/zero, empty read-only /usr/bin and
// /bin, and a /proc that cannot be looked into (EACCES: the fake has no
// processes to show). /etc, /usr, /bin, /proc and /dev are read-only to
// the sandbox (EACCES). Spec.Workspace and Spec.Binds are NOT mounted: a host
// workspace is not visible, the in-memory /workspace is used instead. The
// Files operations (read, write, list, stat, mkdir, remove, move, tar in
// and out) work on that tree with the errno codes of the real agent for
// the common cases (ENOENT, EEXIST, ENOTDIR, EISDIR, ENOTEMPTY, EACCES,
// ETOOBIG, EBADTAR, EINVAL).
//
// # Commands
//
// A process's argv is looked up among the builtins below by its base name
// (so "cat", "/bin/cat" and "/usr/bin/cat" are the same); an absolute
// path elsewhere, or an unknown name, is tried with the runtime's Handler
// (WithHandler) and is otherwise exit 127 with Result.Error set, like a
// missing command.
//
//	sh -c SCRIPT     runs SCRIPT with the mini shell below
//	echo [-n] ARGS   prints ARGS
//	printf FMT ARGS  \n \t \\ \NNN (octal) escapes; %s %d %b %%
//	cat [FILE...]    copies stdin ("-") or files (a FIFO blocks for a writer)
//	head -c N|-n N [FILE]  the first bytes / lines
//	yes [WORD]       WORD (default y) forever, until its reader goes
//	true, false, exit [N], sleep SECONDS, pwd, hostname, env [CMD...]
//	id [-u|-g]       uid and gid 1000
//	touch, mkdir [-p], rm [-r] [-f], mkfifo FILE...
//	read VAR         one line of stdin into $VAR; false at end of input
//	exec CMD...      runs CMD and ends the script with its status
//
// The mini shell (sh -c) understands: commands separated by ";", "&&",
// "||" and newlines; pipes "|"; redirections "> F", ">> F", "< F",
// "2> F", ">&2", "2>&1"; single and double quotes and backslashes; $VAR
// and ${VAR} (from read and the environment), $? and the positional
// parameters of "sh -c SCRIPT NAME ARGS..." ($0..$9, $#, $@); and
// "while LIST; do LIST; done". Anything else is a syntax error (exit 2). A command not found in
// a script prints "sh: NAME: not found" and is status 127, as in a real
// shell.
//
// A process ends, as with the real runtime: with its status (exited);
// with 128+N (signaled) when Proc.Signal or Process.Signals delivers
// signal N (other than SIGCHLD, SIGWINCH, SIGURG and SIGCONT, which are
// ignored); with 124 (timeout) at Process.Timeout or the context's
// deadline; with 137 (killed) when its context is cancelled; with 125
// (setup_error) and an error if its sandbox is shut down under it. Stdout
// and stderr go to Process.Stdout/Stderr when set, else into the Result
// (capped by OutputLimit, default 2,000,000 bytes, Truncated past it;
// SpillDir is not supported). Byte counts and durations are real.
// Secrets, TTYs and resizes are accepted and ignored.
//
// # Budgets
//
// The Runtime is a sandbox.Budgeter: NewBudget checks the id and limits as
// runtime/linux does and keeps the budget in memory; a Spec.Budget must
// name a live budget (else sandbox.ErrInvalidSpec), and Close fails with
// sandbox.ErrBusy while a sandbox created in the budget has not ended.
// Nothing is enforced: no limit of a budget applies, and CPUTime is
// always 0.
//
// Specs and processes are checked with the sandbox package's checks, the
// ones runtime/linux makes before anything runs (Spec.Validate,
// Limits.Validate, CheckHostname, CheckEnv, Process.Validate, a relative
// cwd), so requests it refuses fail the same way.
package sandboxtest
