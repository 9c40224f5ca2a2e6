#!/bin/sh
# Flow observability at rate (issue 35's target: no flow lost below 10,000
# flows/s into `cnlab observe -o json`, counted against the probe's own
# attempts). For each datapath: the 100-endpoint probe-scale lab recording
# every new flow (observe: all), the full TCP matrix probed (9,900 cells in
# about a second), then every cell must have its flows: a dropped flow for
# a cell the probe found denied, a forwarded one for an allowed cell, and
# the stream must say it lost nothing (or how much). Prints one line per
# run: datapath, cells, flows, their mean rate over the probe and the
# busiest second's, cells without a flow, events reported lost.
#   scripts/bench-observe-rate.sh [RUNS] [DATAPATHS...]   (default 5; iptables nftables ebpf)
# Run as root with nothing else on the machine (it raises the neighbour
# table's gc_thresh as the probe-scale benchmark does, and puts it back).
set -eu
runs=${1:-5}
[ $# -gt 0 ] && shift
dps=${*:-iptables nftables ebpf}
B=${CNLAB:-bin/cnlab}
lab=obs-rate
t2=$(sysctl -n net.ipv4.neigh.default.gc_thresh2)
t3=$(sysctl -n net.ipv4.neigh.default.gc_thresh3)
cleanup() {
	$B down $lab >/dev/null 2>&1 || true
	sysctl -qw net.ipv4.neigh.default.gc_thresh3="$t3" net.ipv4.neigh.default.gc_thresh2="$t2"
}
trap cleanup EXIT INT TERM
sysctl -qw net.ipv4.neigh.default.gc_thresh3=16384 net.ipv4.neigh.default.gc_thresh2=8192
tmp=$(mktemp -d)
for dp in $dps; do
	$B up -f examples/probe-scale.yaml --name $lab --datapath "$dp" --observe all >/dev/null
	$B policy apply $lab -f examples/policies/probe-scale.yaml >/dev/null
	for i in $(seq "$runs"); do
		since=$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)
		$B probe $lab --port 80 --protocol tcp -o json >"$tmp/probe.json"
		sleep 1
		$B observe $lab --since "$since" --last 0 -o json >"$tmp/flows.json"
		python3 - "$dp" "$tmp/probe.json" "$tmp/flows.json" <<'PY'
import json, sys
from datetime import datetime
dp, probe, flows = sys.argv[1:]
cells = json.load(open(probe))["results"]
seen, lost, times, n = {}, 0, [], 0
for line in open(flows):
    r = json.loads(line)
    if "lost" in r:
        lost += r["lost"] or 1
        continue
    if r.get("protocol") != "tcp" or r.get("dstPort") != 80:
        continue
    n += 1
    seen.setdefault((r["from"], r["to"]), set()).add(r["verdict"])
    times.append(r["time"])
missing = 0
for c in cells:
    want = "forwarded" if c["allowed"] else "dropped"
    if want not in seen.get((c["from"], c["to"]), set()):
        missing += 1
def ts(s):
    s = s.rstrip("Z")
    if "." in s:
        a, b = s.split(".")
        s = a + "." + b[:6]
    return datetime.fromisoformat(s)
t = sorted(ts(x).timestamp() for x in times)
span = t[-1] - t[0] if len(t) > 1 else 0
# the busiest second: the most flows whose times lie within 1 s
peak, j = 0, 0
for i in range(len(t)):
    while t[i] - t[j] > 1.0:
        j += 1
    peak = max(peak, i - j + 1)
print(f"{dp:9s} cells {len(cells)} flows {n} span {span:.2f}s mean {n/span if span else 0:,.0f}/s busiest-second {peak:,}/s cells-without-flow {missing} lost {lost}")
PY
	done
	$B down $lab >/dev/null
done
rm -rf "$tmp"
