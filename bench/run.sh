#!/usr/bin/env bash
# The whole benchmark suite of moat against its peers (see bench/README.md),
# one command on a fresh Debian machine, as root:
#
#   make bench                                   # = bash bench/run.sh
#   bash bench/run.sh --rounds 50 --warmup 5     # bench/startup's flags
#   CONTROLPLANE_ARGS="--rounds 20 --soak 10s" bash bench/run.sh
#   CONTROLPLANE_ARGS=skip bash bench/run.sh     # without the control plane
#   ROOTFS_ARGS="--rounds 50" bash bench/run.sh  # bench/rootfs flags (or skip)
#   DENSITY_ARGS="--levels 1,10,100" bash bench/run.sh  # bench/density flags (or skip)
#   DAEMON_ARGS="--rounds 2" bash bench/run.sh   # bench/daemon flags (or skip)
#   WORKFLOW_ARGS="--rounds 10 --fair-runs 1" bash bench/run.sh  # bench/workflow flags (or skip)
#   BUILD_ARGS="--build-rounds 3" bash bench/run.sh  # bench/build flags (or skip)
#   AGENT_ARGS="--runs 20" bash bench/run.sh     # bench/agent flags (or skip)
#
# Every benchmark NAME takes its flags from $NAME_ARGS (upper case;
# "skip" skips it), bench/startup's also from the command line. The
# benchmarks are their own Go module, bench/: each runs from there
# (go -C bench run ./NAME) and takes the same common flags (--moat,
# --json, --markdown, --rounds, --warmup, --seed; bench/README.md).
#
# Installs what it needs from Debian when missing (bubblewrap, runc,
# runsc, crun, hyperfine, busybox-static, gcc), builds moat from this checkout,
# then runs, each writing bench/results/NAME.json in the results schema
# (bench/schema) and its markdown (bench/render) as NAME.md:
# bench/startup (cold start: moat, bare, bwrap, runc, runsc, crun),
# bench/syscall, bench/policy, bench/netproxy, bench/controlplane (time to
# interactive, exec round trip, soak), bench/daemon (output floods, durable
# exec throughput and an auth flood, against the daemon before issue 17,
# which it builds from git archive), bench/rootfs (warm pool, templates,
# snapshots, forks), bench/density (live sandboxes, memory, scaling),
# bench/workflow (a chain of steps from snapshots and a retry from a
# snapshot against one cold create, CPU fairness under a budget),
# bench/build (a C build on the host against the same moat build, a
# trivial build's fixed cost against one cold create), bench/agent (a
# tool call of an agent run against the exec round trip, the tool latency
# of 100 runs at once on one model client), and last
# bench/report, which writes docs/PERFORMANCE.md, its plots in
# docs/perf/ and bench/results/summary.json from those results. Exits
# non-zero when a run of a system failed, never because a figure is slow.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf '==> %s\n' "$*" >&2; }

as_root() {
	if [[ $EUID -eq 0 ]]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo "$@"
	else
		log "need root to run: $*"
		return 1
	fi
}

# Debian packages of the systems compared (and hyperfine, for checking
# figures by hand: hyperfine -N 'bin/moat run -- /bin/true'; busybox-static,
# the image bench/rootfs imports; gcc, the compiler of bench/build's C
# project). crun is installed and tried: on a host
# whose cgroups it cannot use (hybrid v1/v2) bench/startup skips it and
# writes why next to its row.
need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v runc >/dev/null 2>&1 || need+=(runc)
command -v runsc >/dev/null 2>&1 || need+=(runsc)
command -v crun >/dev/null 2>&1 || need+=(crun)
command -v hyperfine >/dev/null 2>&1 || need+=(hyperfine)
command -v busybox >/dev/null 2>&1 || need+=(busybox-static)
command -v gcc >/dev/null 2>&1 || need+=(gcc)
if ((${#need[@]})); then
	log "installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	if ! as_root apt-get install -y --no-install-recommends "${need[@]}"; then
		log "install failed; updating the package lists and retrying"
		as_root apt-get update
		as_root apt-get install -y --no-install-recommends "${need[@]}"
	fi
fi

if ! command -v go >/dev/null 2>&1; then
	log "go not found in PATH: install the Go toolchain named in go.mod (Debian's golang package is too old)"
	exit 1
fi
if [[ $EUID -ne 0 ]]; then
	log "warning: not root; moat's runs will fail (try --systems bare,bwrap)"
fi

log "building moat"
# make build, not a plain go build: it embeds the lean init (cmd/moat-init)
# that every sandbox starts from, as the shipped binary does.
make build

# Results of an earlier run never mix into this one's report.
mkdir -p bench/results
rm -f bench/results/*.json bench/results/*.md
status=0

# bench NAME WHAT ARGS...: run bench/NAME from the bench module, its
# results in bench/results/NAME.json and .md; ARGS are its flags. Static
# (CGO_ENABLED=0): bench/syscall runs its own binary inside a sandbox.
bench() {
	local name=$1 what=$2
	shift 2
	log "running bench/$name $* ($what)"
	CGO_ENABLED=0 go -C bench run "./$name" \
		--json "results/$name.json" --markdown "results/$name.md" "$@" || status=$?
}

# args NAME: the flags of bench/NAME from $NAME_ARGS, or "skip".
args() {
	local var
	var="$(tr '[:lower:]' '[:upper:]' <<<"$1")_ARGS"
	printf '%s' "${!var:-}"
}

for step in \
	"startup|cold start: moat, bare, bwrap, runc, runsc, crun" \
	"syscall|seccomp, Landlock and mount overhead, inside vs outside" \
	"policy|a policy decision against 100 rules" \
	"netproxy|egress proxy throughput and connect latency, against direct" \
	"controlplane|moat serve: time to interactive, exec round trip, soak" \
	"daemon|moat serve under output floods, durable exec throughput and an auth flood, new against the daemon before issue 17" \
	"rootfs|warm pool claim, cold create host vs OCI template, snapshot, fork" \
	"density|live idle sandboxes, memory per sandbox, start latency as they grow" \
	"workflow|workflows: a chain from snapshots and a retry against a cold create, fairness under a budget" \
	"build|sandboxed builds: a C build on the host against the same moat build, a trivial build against a cold create" \
	"agent|agent runs: a tool call against the exec round trip, tool latency of 100 runs on one model client"; do
	name=${step%%|*}
	flags=$(args "$name")
	if [[ $flags == skip ]]; then
		log "skipping bench/$name"
		continue
	fi
	if [[ $name == startup ]]; then
		# shellcheck disable=SC2086 # $flags is a list of flags
		bench "$name" "${step#*|}" "$@" $flags
		[[ -f bench/results/startup.md ]] && { echo; cat bench/results/startup.md; }
		continue
	fi
	# shellcheck disable=SC2086 # $flags is a list of flags
	bench "$name" "${step#*|}" $flags
done

log "writing docs/PERFORMANCE.md, docs/perf/*.png and bench/results/summary.json (bench/report)"
go -C bench run ./report --results results --out ../docs/PERFORMANCE.md \
	--plots ../docs/perf --summary results/summary.json || status=$?

if ((status != 0)); then
	log "benchmark failed (exit $status); see above"
fi
exit "$status"
