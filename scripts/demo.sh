#!/bin/sh
# The README's demo: what the host can enforce, then a few sandboxed calls.
set -u
moat=${1:-bin/moat}
echo "== moat doctor"
"$moat" doctor || exit $?
echo
echo "== moat run -- sh -c 'id; hostname; ls /'"
"$moat" run -- sh -c 'id; hostname; ls /'
echo
echo "== an agent's attempt to read host secrets and reach the network"
"$moat" run --sh 'cat /etc/shadow; ls /root; ls ~/.ssh; python3 -c "import socket; socket.create_connection((\"1.1.1.1\", 80), 2)" 2>&1 | tail -1' ; echo "exit $?"
echo
echo "== --net proxy: the egress proxy is the only way out; it answers what it refuses"
"$moat" run --net proxy --allow-domain pypi.org --sh \
	'curl -s -o /dev/null -w "%{http_code} %header{x-proxy-error}\n" http://exfil.example.net/; curl -s -w " %{http_code}\n" http://169.254.169.254/latest/meta-data/; curl -s --noproxy "*" -m 2 http://1.1.1.1/ || echo "direct: curl exit $? (no route)"'
echo
echo "== the same call as one JSON result (exit code 3 is the command's own)"
"$moat" run --json --sh 'echo out; echo err >&2; exit 3' ; echo "exit $?"
echo
echo "== the control plane: moat serve (embedded defaults, a throwaway data dir)"
echo "   and the example agent (examples/agent, Go SDK) against it over HTTP"
tmp=$(mktemp -d /tmp/moat-demo.XXXXXX) || exit 1
chmod 700 "$tmp"
agent="$tmp/agent"
CGO_ENABLED=0 go build -o "$agent" ./examples/agent || { rm -rf "$tmp"; exit 1; }
mkfifo "$tmp/log"
"$moat" serve --data "$tmp/data" --listen 127.0.0.1:0 2>"$tmp/log" &
daemon=$!
exec 3<"$tmp/log"
url=
while IFS= read -r line <&3; do
	printf '   daemon: %s\n' "$line"
	case $line in
	*msg=listening*)
		url=${line#*url=}
		url=${url%% *}
		break
		;;
	esac
done
if [ -z "$url" ]; then
	echo "moat serve did not start" >&2
	wait "$daemon"
	rm -rf "$tmp"
	exit 1
fi
# The daemon's later log lines go on being shown.
sed 's/^/   daemon: /' <&3 &
logger=$!
MOAT_URL=$url MOAT_TOKEN_FILE=$tmp/data/token "$agent"
status=$?
kill -TERM "$daemon"
wait "$daemon"
dstatus=$?
wait "$logger"
exec 3<&-
rm -rf "$tmp"
echo "agent exit $status; daemon stopped with exit $dstatus"
[ "$status" -eq 0 ] && [ "$dstatus" -eq 0 ]
