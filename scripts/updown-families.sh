#!/bin/sh
# usage: scripts/updown-families.sh CNLAB DATAPATH RUNS (as root) — times `cnlab up` of 1,000 endpoints, IPv4 and dual-stack alternately
C=$1; DP=$2; N=$3
DIR=$(mktemp -d)
for fam in 4 dual; do
  cidrs="[10.8.0.0/20]"; [ $fam = dual ] && cidrs="[10.8.0.0/20, 'fd00:8::/64']"
  { echo "name: u$fam"; echo "hosts: [{name: h, podCIDRs: $cidrs}]"; echo "endpoints:"; i=0; while [ $i -lt 1000 ]; do echo "  - {name: e$i}"; i=$((i+1)); done; } > $DIR/up1000-$fam.yaml
done
for r in $(seq $N); do
  for fam in 4 dual; do
    t0=$(date +%s.%N)
    $C up -f $DIR/up1000-$fam.yaml --datapath $DP >/dev/null 2>&1 || echo "up failed $fam"
    t1=$(date +%s.%N)
    $C down u$fam >/dev/null 2>&1
    echo "$DP $fam run$r up_s $(echo "$t1 - $t0" | bc)"
  done
done
