#!/usr/bin/env bash
# The default demo: bring up seed 000's two-host testbed (hosts flip and
# flap joined by a wire), run iperf3 from the client on flap to the server
# on flip for 5 seconds, print the throughput, tear the lab down.
# Usage: scripts/demo.sh [LAB]   (the lab's name, default cnlab-demo;
# make demo LAB=name passes it)
set -euo pipefail
cd "$(dirname "$0")/.."
cnlab=./bin/cnlab
lab=${1:-cnlab-demo}

if $cnlab status "$lab" >/dev/null 2>&1; then
	echo "demo: a lab named $lab is up already; remove it with: $cnlab down $lab" >&2
	exit 1
fi
trap '$cnlab down "$lab" >/dev/null 2>&1' EXIT

$cnlab up --preset multi-host --name "$lab"
server_ip=$($cnlab status "$lab" -o json | python3 -c 'import json,sys; print([e["ip"] for e in json.load(sys.stdin)["endpoints"] if e["name"]=="server"][0])')

# The lab's down kills the daemon with everything else inside the lab.
$cnlab exec "$lab" server -- iperf3 -s -D
echo
echo "iperf3: client on flap -> server on flip ($server_ip), 5 s, over the wire"
out=$(mktemp)
for _ in $(seq 20); do # the daemon needs a moment before it listens
	$cnlab exec "$lab" client -- iperf3 -c "$server_ip" -t 5 -J >"$out" 2>/dev/null && break
	sleep 0.2
done
python3 - "$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
end = r["end"]
print(f'throughput {end["sum_received"]["bits_per_second"]/1e9:.2f} Gbit/s, '
      f'retransmits {end["sum_sent"].get("retransmits", 0)}, '
      f'sender CPU {end["cpu_utilization_percent"]["host_total"]:.0f}%')
PY
rm -f "$out"
echo
