// Package policy is moat's policy engine: it decides whether an agent's
// request — run a command, read or write a host path, connect to a host —
// is allowed, needs approval (ask), or is denied, and says which rule
// decided and why. It is the logical layer; the runtime's sandbox (mounts,
// Landlock, seccomp, no network route) is what enforces, and Roots gives it
// the path lists it needs.
//
// # Files and layers
//
// A policy is made of layers, highest precedence first:
//
//	managed   /etc/moat/policy.toml          (the operator)
//	project   <workspace>/.moat/policy.toml  (the project)
//	user      ~/.config/moat/policy.toml     (the user)
//	per-call  CallRules given with one call  (can only narrow)
//
// A policy file is TOML:
//
//	version = 1                  # required; a newer version is refused
//	profile = "trusted"          # optional: "untrusted" | "trusted"
//	allow = ["Exec(npm run *)", "Write(~/.cache/**)", "Net(domain:*.github.com)"]
//	ask   = ["Exec(git push*)"]
//	deny  = ["Read(~/.ssh/**)", "Exec(rm -rf /*)"]
//
// Unknown keys and tables are errors. Every error names the layer, the file
// and the line (and the column for TOML syntax errors), e.g.
// "project .moat/policy.toml:7: ask: Exec(: unterminated pattern"; Parse
// reports all of a file's errors at once (ErrorList). Missing files are
// fine; unreadable ones (permissions, a directory) are errors. Watcher
// reloads changed files and keeps the last good policy when they are
// invalid; an *Effective is immutable, so sandboxes that hold one are not
// affected by a reload.
//
// # Rules
//
// A rule is Kind(pattern), with Kind one of Exec, Read, Write, Net
// (case-sensitive). The pattern is everything between the first '(' and
// the final ')', trimmed.
//
// Exec patterns are matched against a command's words, with the first word
// replaced by its base name (shell.Normalize: /usr/bin/git push is
// "git push") and joined by single spaces (runs of white space, also inside
// arguments, count as one space). The pattern is normalized the same way
// (Exec(/usr/bin/git push) is Exec(git push)). '*' matches any run of
// characters, spaces included; it is the only wildcard ('?' and '[' are
// literal). So Exec(git push*) matches "git push", "git push origin main",
// and also "git pushx" (write Exec(git push) plus Exec(git push *) to
// exclude that). Matching is case-sensitive.
//
// Read and Write patterns are gitignore-style paths:
//
//   - "~" or "~/..." is anchored at the home (Context.Home); "~user" is an
//     error;
//   - "/..." is absolute;
//   - a pattern with a slash elsewhere ("src/**", "docs/x.md") or starting
//     with "./" is anchored at the workspace (Context.Workspace);
//   - a pattern without a slash (not counting a trailing one: "*.pem",
//     "id_rsa", "node_modules/") matches a path component of that name at
//     any depth, anywhere on the host;
//   - '*' matches within one component (dot-files too), '?' one character,
//     [a-z] / [!a-z] a class, '\' escapes; "**" as a whole component matches
//     any number of components (zero included); "**" inside a component is
//     '*';
//   - a pattern matches a path when it matches the path itself or one of its
//     parent directories (as in gitignore, where ignoring a directory ignores
//     what it holds): "~/.ssh", "~/.ssh/" and "~/.ssh/**" are the same rule
//     and all cover ~/.ssh/id_rsa;
//   - empty, "." and ".." components are errors; matching is case-sensitive
//     (Linux).
//
// Net patterns are domain:NAME (exactly that host), domain:*.NAME (any
// subdomain of NAME, not NAME itself) and domain:* (any host). Host names
// are compared in lower case without a trailing dot; a request's :port is
// ignored; non-ASCII names must be written in punycode. An IP address
// (IPv6, or IPv4 in any inet_aton spelling such as 0x7f.1, which is
// 127.0.0.1) is canonicalized; it matches domain:* and a rule naming that
// address, but only a rule naming it puts it on the allowlist.
//
// # Profiles
//
// The effective profile is the strictest one the layers declare
// (untrusted is stricter than trusted; none declared means untrusted). It
// is a ceiling: a request outside it is denied whatever the rules say.
//
// Only the managed and the user file can widen: declare "trusted", add
// writable roots (allow Write) or add to the network allowlist (allow
// Net). The project file lives in the workspace, which may be a repository
// of unknown origin or an agent's earlier work, so like per-call rules it
// can only narrow; its widening parts are ignored and Warnings says so.
//
// Context.ReadRoots and Context.WriteRoots are host paths the caller binds
// into the sandbox itself (moat run --ro/--rw): they lie inside the
// ceiling like the workspace, and everything else (built-in lists,
// protected paths, rules) still applies in them.
//
//   - untrusted: Read only under the workspace and the system directories
//     SystemReadDirs (/usr, /bin, /sbin, /lib, /lib32, /lib64, /libx32,
//     /etc — the runtime shows a filtered /etc; /opt is not included);
//     Write only under the workspace.
//   - trusted: Read anywhere except HostRuntimeDirs (/proc, /sys, /dev,
//     /run, /var/run, /tmp, /var/tmp: the sandbox gets its own) unless they
//     lie inside the workspace or a writable root; Write under the
//     workspace and under the targets of allow Write rules of the managed
//     and user files (not of project or per-call rules, and not base-name
//     patterns, which grant nothing outside the workspace).
//
// Network (both profiles): a Net request is allowed only for a host on the
// allowlist — allow Net rules of the managed and user files, and the
// caller's own list (Context.NetAllow: moat run --allow-domain, a create's
// allow_domains) — and then deny > ask > allow across every layer, the
// project's and per-call deny and ask rules included. domain:*.NAME
// matches subdomains, not NAME itself; domain:* admits no raw IP address;
// cidr:PREFIX matches IP destinations. The egress proxy (package netproxy)
// asks Decide for every connection and request, and DecideAddr for every
// address it is about to dial: an internal address (loopback, private,
// link-local, metadata, the host's own) needs an allow cidr: entry (or an
// entry naming that IP). Only the managed file can permit network mode
// open (open_network = true); see OpenNetwork.
//
// In both profiles, built-in lists apply before any rule:
//
//   - CredentialPaths (~/.ssh, ~/.aws, ~/.config/gh, ~/.netrc, ~/.gnupg,
//     ~/.docker/config.json, ~/.kube/config, ~/.git-credentials, ~/.npmrc,
//     ~/.pypirc, ~/.config/gcloud, ~/.azure, ~/.password-store,
//     ~/.local/share/keyrings, ~/.cargo/credentials[.toml], ~/.vault-token)
//     and HostSecrets (/etc/shadow, /etc/gshadow, /etc/sudoers[.d],
//     /etc/ssl/private, /etc/ssh/ssh_host_*, moat's /var/lib/moat and
//     /run/moat) are neither readable nor writable (an entry that holds the
//     whole workspace does not apply inside the workspace; a warning says
//     so);
//   - CredentialNames (*.pem, *.key, id_rsa*, id_ed25519*, id_ecdsa*,
//     *_token, .env) are not readable at any depth (writing them is not
//     restricted by the list), except under CredentialNameExempt (/usr,
//     /bin, /sbin, /lib*, /etc/ssl/certs, /etc/ca-certificates,
//     /etc/pki/ca-trust), where packaged files and public certificates live;
//   - protected paths are never writable (the list matters inside writable
//     roots; Write here means any change of the entry or its content):
//     a ".git" entry itself, .git/config, .git/config.worktree and anything
//     named hooks below .git, at any depth (nested repositories, modules);
//     a ".moat" entry and .moat/policy.toml at any depth; ShellRCFiles
//     (.bashrc, .bash_profile, .bash_login, .bash_logout, .profile, .zshrc,
//     .zprofile, .zshenv, .zlogin, .zlogout, .inputrc) at any depth; and the
//     policy files' own paths (the three standard ones always, present or
//     not, and any file loaded) with each of their parent directories as
//     an entry (so none can be renamed away and replaced).
//
// # Evaluation
//
// One request against the effective policy:
//
//  1. A bad request (empty path, NUL byte, a path not absolute after
//     anchoring, an unresolvable path, a bad host, an empty command) is
//     denied, Decision.Invalid set.
//  2. Write to a protected path: deny ("builtin: .git is read-only").
//  3. The built-in credential lists and the profile's ceiling: deny
//     ("builtin: credentials ...", "profile untrusted: ...").
//  4. Rules: the effect is the most restrictive of all matching rules of
//     all layers (deny > ask > allow). Each layer decides deny > ask >
//     allow > none and layers combine to the most restrictive, which is the
//     same thing; so a lower layer, and a per-call layer, can only narrow.
//  5. No rule matches: allow ("profile trusted: default").
//
// The deciding rule is the first, by layer precedence (managed, project,
// user, per-call) and then file order, of the matching rules that have the
// winning effect. Allow rules therefore never override a deny or ask in any
// layer; they matter as grants (allow Write and allow Net of the managed
// and user files in the trusted profile) and to name the rule that allowed.
//
// # Request paths
//
// Request paths are host paths: absolute, "~/..." (the home), or relative
// to the workspace. A caller holding a sandbox-side path (/workspace/...)
// maps it to the host first. Paths are cleaned ("..", ".", "//", a trailing
// slash). With Context.Resolve, symlinks are resolved on the host as the
// kernel walks them (".." after a symlink goes to the target's parent; the
// longest existing prefix is resolved, the rest appended), and two paths
// are judged, the most restrictive winning: the directory entry (parent
// resolved, last component not followed: what a rename, delete or atomic
// replace acts on) and its final target (what a read or write reaches).
// Workspace and Home are resolved once when compiling. A symlink whose
// target is a sandbox-side path is resolved as a host path. The decision is
// a check at one moment: a sandbox can change a symlink afterwards, which is
// why the runtime enforces the same lists itself.
//
// # Commands
//
// An Exec request is an argv or a shell string. A string is parsed with
// policy/shell, which returns every simple command (through pipelines,
// lists, loops, substitutions, sh -c strings, eval, and wrappers such as
// env, sudo, xargs, find -exec). An argv is judged as it is and also as
// policy/shell reads it once each word is single-quoted, so its wrappers
// are unwrapped the same way. The engine also looks into wrappers itself:
// for a wrapper program (env, command, exec, nice, timeout, sudo, xargs,
// find, busybox, strace, flock, ...; see the wrappers table) every suffix of
// its arguments is judged as a command too, and for a shell with a -c
// option (and su -c, flock -c, script -c, watch, parallel, eval) the
// arguments that follow are parsed as scripts, recursively (at most 8
// levels, 1024 commands; beyond, the request counts as unparsable). The
// request's effect is the most restrictive over all these commands
// (wrapper and unwrapped forms alike); Decision.Commands lists them.
//
// Normalized before matching (the unwrapped form is judged besides the
// command as written, so both must pass):
//
//   - the program's path: /usr/bin/git is git;
//   - wrappers, by their own option grammar: command [-p], exec [-cl]
//     [-a NAME], builtin, nice [-n N | -N], nohup, timeout [-s SIG] [-k D]
//     [--foreground ...] DURATION, time [-p ...], stdbuf -oL/-eL/-i...,
//     setsid, ionice [-c C] [-n N], chrt [policy options] PRIORITY,
//     taskset [-c] MASK, flock [options] FILE (and FILE -c STRING), env
//     [-i] [-u NAME] [-C DIR] [-S STRING] [NAME=VALUE...], sudo/doas
//     [options] [NAME=VALUE...], xargs [options] (its command gets
//     dynamic arguments appended, or {} replaced with -I), find -exec/
//     -execdir/-ok/-okdir, busybox APPLET;
//   - git's global options, to find the subcommand: -C DIR, -c NAME=VALUE,
//     --config-env=NAME=VAR, --git-dir[=]DIR, --work-tree[=]DIR,
//     --namespace[=]NS, --attr-source[=]TREE, --exec-path=DIR, -p,
//     --paginate, -P, --no-pager, --bare, --no-replace-objects,
//     --no-lazy-fetch, --no-optional-locks, --no-advice,
//     --literal-pathspecs, --glob-pathspecs, --noglob-pathspecs,
//     --icase-pathspecs. So `git -C . push` and `nice -n 5 git -c x=y push`
//     are judged as `git push`. An alias defined on the command line
//     (-c alias.NAME=..., --config-env=alias.NAME=...) used as the
//     subcommand makes the subcommand unknowable (`git` followed by any
//     words); a shell alias (!CMD) is also parsed as a script; an alias
//     whose value is dynamic or comes from the environment makes the command
//     unknowable. An option git does not have makes the subcommand
//     unknowable.
//
// Not normalized: aliases and configuration from git's files and the
// environment (GIT_CONFIG_*, core.pager, core.sshCommand, hooks), global
// options of other programs (npm --prefix, docker -H, kubectl
// --context, ...), programs that run commands they read from files
// (make, npm run, bash script.sh) and wrappers outside the list above
// (strace, watch, chroot, ...), which are only judged through the suffixes
// of their arguments (a dynamic word among them that may be the command
// makes it unknowable).
//
// A word whose value is only known at run time — an expansion ($HOME,
// "$TMPDIR", $f, ${X:-y}, $(ls), $((1+2))), a glob (*.go), brace expansion,
// ~user, a {} that xargs -I or find -exec fills in — is dynamic
// (shell.Command.Dynamic). A dynamic argument does not make a command
// unknowable: the command is judged against the Exec rules whose literal
// parts are consistent with its known words, a dynamic word standing for
// any text (several words, or none). Under Exec(curl *) or Exec(git push*),
// `echo $HOME`, `ls "$TMPDIR"`, `for f in a b; do echo $f; done` and
// `x=$(ls)` (ls is judged; an assignment is no command) are allowed;
// `git $sub` could be `git push`, so the strictest of the rules that could
// match applies (Exec(git push*)), and the reason says which argument is
// dynamic and which rule could match. xargs' appended arguments count as a
// dynamic word at the end; a shell reading commands from its standard
// input, or a command whose options could not be read, counts as any
// command of its name.
//
// A command is unknowable (shell.Command.Unknowable) when which program
// runs, or with which words, cannot be known before it runs: its command
// word is dynamic ($cmd arg, "$(which curl)" x), it runs a command string
// that is dynamic (eval "$s", sh -c "$s", bash -c "echo $x", a
// here-document with expansions read by a shell), a wrapper's command or
// an option or operand before it is dynamic in a way that could move it
// (nice $x, timeout $t git push, env A=$x cmd — quoted "$x" values of
// known options are fine), an unquoted expansion in find's arguments (it
// may hold -exec), or it names a function or alias defined in the script.
// An unknowable command, and a string that does not parse, gets the
// strictest Exec rule of the policy; the reason says why and names the
// rule. With no Exec rule the profile's default (allow) applies. Exec rules
// judge only the commands moat is asked to run, not what those programs run
// in turn; Warnings says so.
//
// # Per-call rules
//
// CallRules (ParseCall, then Effective.With) form the lowest layer. They
// can only narrow: their deny and ask rules count like any other; their
// allow rules never grant (no writable root, nothing on the network
// allowlist); their profile may only be "untrusted".
package policy
