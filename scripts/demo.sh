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
echo "== the same call as one JSON result (exit code 3 is the command's own)"
"$moat" run --json --sh 'echo out; echo err >&2; exit 3' ; echo "exit $?"
