#!/bin/sh
# Flow observability at a set rate (issue 35's target: no flow lost below
# 10,000 flows/s into `cnlab observe -o json`; past it, the stream says how
# many were lost). For each datapath: policy-lab recording every new flow
# (observe: all, no policy), then from x/a on one host to y/a on the other
# N UDP datagrams, each to another destination port (so each is a new
# flow), paced at R per second; afterwards `observe -o json` must hold a
# flow for each of the N ports, or say how many events it lost. Prints one
# line per run: datapath, rate asked, rate sent, flows sent, flows
# observed, missing, lost.
#   scripts/bench-observe-flood.sh [RUNS] [RATES] [DATAPATHS]
#   (default 5; "10000 20000 40000"; "iptables nftables ebpf"; 20,000 flows per run)
set -eu
runs=${1:-5}
rates=${2:-10000 20000 40000}
dps=${3:-iptables nftables ebpf}
n=${FLOWS:-20000}
B=${CNLAB:-bin/cnlab}
lab=obs-flood
trap '$B down $lab >/dev/null 2>&1 || true' EXIT INT TERM
tmp=$(mktemp -d)
for dp in $dps; do
	$B up -f examples/policy-lab.yaml --name $lab --datapath "$dp" --observe all >/dev/null
	dst=$($B status $lab -o json | python3 -c 'import json,sys; print([e["ip"] for e in json.load(sys.stdin)["endpoints"] if e["id"]=="y/a"][0])')
	for i in $(seq "$runs"); do
		for rate in $rates; do
			since=$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)
			sent=$($B exec $lab x/a -- python3 -c '
import socket, sys, time
dst, n, rate = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
t0 = time.perf_counter()
for i in range(n):
    while time.perf_counter() - t0 < i / rate:
        pass
    s.sendto(b"x", (dst, 1024 + i % 64000))
el = time.perf_counter() - t0
print(f"{n/el:.0f}")
' "$dst" "$n" "$rate")
			sleep 1.5
			$B observe $lab --since "$since" --from x/a --to y/a --protocol udp --last 0 -o json >"$tmp/flows.json"
			python3 - "$dp" "$rate" "$sent" "$n" "$tmp/flows.json" <<'PY'
import json, sys
dp, rate, sent, n, path = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
ports, lost = set(), 0
for line in open(path):
    r = json.loads(line)
    if "lost" in r:
        lost += r["lost"] or 1
        continue
    ports.add(r["dstPort"])
missing = sum(1 for i in range(n) if 1024 + i % 64000 not in ports)
print(f"{dp:9s} asked {rate:6d}/s sent {sent:>6s}/s flows {n} observed {len(ports)} missing {missing} lost-reported {lost}")
PY
		done
	done
	$B down $lab >/dev/null
done
rm -rf "$tmp"
