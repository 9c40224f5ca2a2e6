#!/bin/bash
# scale-cycle.sh N [BIN]: one up / sampled probe / down cycle of a one-host lab of N endpoints
# (a /18), printing up and down times, reachability of 100 random pairs, memory per endpoint and the
# cnlab process's max RSS (BENCHMARKS.md, "Labs of 10,000 endpoints"). Needs root; lab name wsN.
n=$1; bin=${2:-cnlab}; lab=ws$n; dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
{ echo "name: $lab"; echo "hosts: [{name: h, podCIDR: 10.64.0.0/18}]"; echo "endpoints:"
  for i in $(seq 0 $((n-1))); do echo "  - {name: e$i}"; done; } > $dir/$lab.yaml
mi() { awk -v k="$1:" '$1==k{print $2}' /proc/meminfo; }
a0=$(mi MemAvailable); s0=$(mi Slab); p0=$(mi Percpu)
/usr/bin/time -f "maxrss_up_kb=%M" -o $dir/rss.up $bin up -f $dir/$lab.yaml > $dir/up.out 2>$dir/up.err || { cat $dir/up.err | tail -3; exit 1; }
up=$(grep -o 'up in [0-9.]*s' $dir/up.out | grep -o '[0-9.]*')
sleep 2
a1=$(mi MemAvailable); s1=$(mi Slab); p1=$(mi Percpu)
# sampled probe: 100 random (from, to) pairs of distinct endpoints, one ping each
ok=0; fail=0
for k in $(seq 100); do
  i=$((RANDOM*32768+RANDOM)); i=$((i % n)); j=$((RANDOM*32768+RANDOM)); j=$((j % n)); [ $i = $j ] && j=$(((j+1)%n))
  dst=$(ip -n cnlab.$lab.ep.default.e$j -4 -br addr show eth0 | awk '{print $3}' | cut -d/ -f1)
  if ip netns exec cnlab.$lab.ep.default.e$i ping -c1 -W2 -q $dst >/dev/null 2>&1; then ok=$((ok+1)); else fail=$((fail+1)); echo "unreachable: e$i -> e$j ($dst)"; fi
done
/usr/bin/time -f "maxrss_down_kb=%M" -o $dir/rss.down $bin down $lab > $dir/down.out 2>$dir/down.err || { tail -3 $dir/down.err; exit 1; }
down=$(grep -o '([0-9.]*s)' $dir/down.out | tr -d '()s')
left=$(ip netns list | grep -c "^cnlab\.$lab\.")
echo "n=$n up_s=$up down_s=$down probe_ok=$ok probe_fail=$fail memavail_drop_kb_per_ep=$(( (a0-a1)/n )) slab_kb_per_ep=$(( (s1-s0)/n )) percpu_kb_per_ep=$(( (p1-p0)/n )) $(cat $dir/rss.up) $(cat $dir/rss.down) netns_left=$left date=$(date -u +%FT%TZ)"
