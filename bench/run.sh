#!/usr/bin/env bash
# Start-up benchmark of moat against its peers (see bench/README.md).
#
#   bash bench/run.sh [startup flags...]     e.g. --rounds 50 --warmup 5
#   make bench
#   CONTROLPLANE_ARGS="--iterations 20 --soak 10s" bash bench/run.sh
#   CONTROLPLANE_ARGS=skip bash bench/run.sh     # without the control plane
#   ROOTFS_ARGS="--rounds 50" bash bench/run.sh  # bench/rootfs flags (or skip)
#
# Installs the peers it needs from Debian when missing, builds moat from
# this checkout, runs bench/startup (results in bench/results/) and prints
# the markdown report, then bench/syscall, bench/policy, bench/netproxy
# and bench/controlplane (the
# daemon: time to interactive, exec round trip, soak; its flags come from
# $CONTROLPLANE_ARGS). Run it as root: moat's runtime needs root, and so
# does apt-get. Exits non-zero when a system had a failed run.
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
# figures by hand: hyperfine -N 'bin/moat run -- /bin/true'). A later
# change adds runc and runsc here.
need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v hyperfine >/dev/null 2>&1 || need+=(hyperfine)
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
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o bin/moat ./cmd/moat

mkdir -p bench/results
rm -f bench/results/startup.json bench/results/startup.md
log "running bench/startup $*"
status=0
go run ./bench/startup --moat bin/moat \
	--json bench/results/startup.json \
	--markdown bench/results/startup.md "$@" || status=$?

if [[ -f bench/results/startup.md ]]; then
	echo
	cat bench/results/startup.md
fi

log "running bench/syscall (seccomp, Landlock and mount overhead, inside vs outside)"
rm -f bench/results/syscall.json bench/results/syscall.md
CGO_ENABLED=0 go run ./bench/syscall --moat bin/moat \
	--json bench/results/syscall.json \
	--markdown bench/results/syscall.md || status=$?

log "running bench/policy (a policy decision against 100 rules)"
rm -f bench/results/policy.json bench/results/policy.md
CGO_ENABLED=0 go run ./bench/policy \
	--json bench/results/policy.json \
	--markdown bench/results/policy.md >/dev/null || status=$?

log "running bench/netproxy (egress proxy throughput and connect latency, against direct)"
rm -f bench/results/netproxy.json bench/results/netproxy.md
CGO_ENABLED=0 go run ./bench/netproxy --moat bin/moat \
	--json bench/results/netproxy.json \
	--markdown bench/results/netproxy.md >/dev/null || status=$?

if [[ ${CONTROLPLANE_ARGS:-} != skip ]]; then
	log "running bench/controlplane ${CONTROLPLANE_ARGS:-} (moat serve: time to interactive, exec round trip, soak)"
	rm -f bench/results/controlplane.json bench/results/controlplane.md
	# shellcheck disable=SC2086 # CONTROLPLANE_ARGS is a list of flags
	CGO_ENABLED=0 go run ./bench/controlplane --moat bin/moat \
		--json bench/results/controlplane.json \
		--markdown bench/results/controlplane.md ${CONTROLPLANE_ARGS:-} || status=$?
fi
if [[ ${ROOTFS_ARGS:-} != skip ]]; then
	command -v busybox >/dev/null 2>&1 || as_root apt-get install -y -qq busybox-static
	log "running bench/rootfs ${ROOTFS_ARGS:-} (warm pool claim, cold create host vs OCI template, snapshot, fork)"
	# shellcheck disable=SC2086 # ROOTFS_ARGS is a list of flags
	CGO_ENABLED=0 go run ./bench/rootfs --out bench/results/rootfs.json ${ROOTFS_ARGS:-} || status=$?
fi
if ((status != 0)); then
	log "benchmark failed (exit $status); see above"
fi
exit "$status"
