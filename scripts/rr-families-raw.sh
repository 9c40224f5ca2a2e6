#!/bin/bash
# rr-families-raw.sh CNLAB [MODE] [REPS]: the kernel's own cost of IPv6
# against IPv4, without cnlab's datapaths: two namespaces on a bridge in a
# third (names rrf-*), each with an IPv4 and an IPv6 address, and
# `cnlab rr` tcp-rr (1/1 bytes, 3 s, client and server on CPU 0) over each
# family alternately, REPS times (default 5). MODE:
#   plain   the bridge alone
#   brnf    bridge-nf-call-iptables/ip6tables on, no rule
#   brnfct  and an inet table whose forward chain accepts by conntrack state
# Prints "MODE v4|v6 MEAN_US P50_US" per run (BENCHMARKS.md, "Dual-stack").
# Needs root; removes what it made.
CNLAB=${1:?usage: rr-families-raw.sh CNLAB [plain|brnf|brnfct] [REPS]}
M=${2:-plain}; R=${3:-5}
H=rrf-h; A=rrf-a; B=rrf-b
cleanup() { for n in $H $A $B; do ip netns del $n 2>/dev/null; done; true; }
trap cleanup EXIT
cleanup
for n in $H $A $B; do ip netns add $n || exit 1; done
ip -n $H link add br0 type bridge && ip -n $H link set br0 up || exit 1
for n in $A $B; do
	ip -n $H link add v$n type veth peer name eth0 netns $n || exit 1
	ip -n $H link set v$n master br0 up
	ip -n $n link set eth0 up
	ip -n $n link set lo up
done
ip -n $A addr add 10.9.0.1/24 dev eth0; ip -n $B addr add 10.9.0.2/24 dev eth0
ip -n $A addr add fd09::1/64 dev eth0 nodad; ip -n $B addr add fd09::2/64 dev eth0 nodad
if [ "$M" != plain ]; then
	modprobe br_netfilter 2>/dev/null
	ip netns exec $H sysctl -qw net.bridge.bridge-nf-call-iptables=1 net.bridge.bridge-nf-call-ip6tables=1 || exit 1
	if [ "$M" = brnfct ]; then
		ip netns exec $H nft -f - <<'N' || exit 1
table inet rrf {
	chain f {
		type filter hook forward priority 0;
		ct state established,related accept
		ct state new accept
	}
}
N
	fi
fi
ip netns exec $B taskset -c 0 "$CNLAB" rr server --bind :: --port 12865 >/dev/null 2>&1 &
srv=$!
sleep 1
for i in $(seq "$R"); do
	for f in 4 6; do
		a=10.9.0.2:12865
		[ $f = 6 ] && a=[fd09::2]:12865
		ip netns exec $A taskset -c 0 "$CNLAB" rr client --to $a --duration 3s -o json |
			python3 -c 'import json,sys; l=json.load(sys.stdin)["latencyUs"]; print("'"$M v$f"'", l["mean"], l["p50"])'
	done
done
kill $srv 2>/dev/null; wait $srv 2>/dev/null
