#!/usr/bin/env bash
# Measures `cnlab cluster up` and `cnlab cluster down` (binaries and images
# cached) and the cluster's memory: REPS times (default 5) up, two agent
# pods Ready, the resident memory of every process of the cluster summed
# (control plane, containerd, shims, kubelet, kube-proxy, kube-router,
# pods), down. Prints one line per repetition and the medians and ranges.
#
#   sudo scripts/bench-cluster.sh [REPS] [cluster up flags...]
#   sudo scripts/bench-cluster.sh 5 --policy kube-router
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-5}
shift || true
name=bench-cl
make -s build
kubectl=$(readlink -f /var/cache/cnlab/k8s-tools/current)/kubectl
rss_of_cluster() { # sum of VmRSS (kB) of processes in the node netns or its cgroups, and the forwarder
	local ino total=0 pid r
	ino=$(stat -L -c %i /run/netns/cnlabk8s.$name.node1)
	for pid in $(ls /proc | grep -E '^[0-9]+$'); do
		if [ "$(stat -L -c %i /proc/$pid/ns/net 2>/dev/null)" = "$ino" ] ||
			grep -q "cnlabk8s.$name" /proc/$pid/cgroup 2>/dev/null ||
			{ tr '\0' '\n' </proc/$pid/environ; } 2>/dev/null | grep -qx "CNLAB_CLUSTER_FORWARD=$name"; then
			r=$(awk '/^VmRSS:/ {print $2}' /proc/$pid/status 2>/dev/null || true)
			total=$((total + ${r:-0}))
		fi
	done
	echo $total
}
ups=() downs=() mems=()
for i in $(seq "$reps"); do
	t0=$(date +%s.%N)
	bin/cnlab cluster up --name $name "$@" >/dev/null 2>&1
	t1=$(date +%s.%N)
	kc=/var/lib/cnlab/clusters/$name/kubeconfig
	img=$(bin/cnlab cluster status $name -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["agentImage"])')
	for p in a b; do
		$kubectl --kubeconfig $kc run $p --image "$img" --restart=Never --command -- sleep infinity >/dev/null
	done
	$kubectl --kubeconfig $kc wait --for=condition=Ready pod/a pod/b --timeout=60s >/dev/null
	sleep 2
	mem=$(rss_of_cluster)
	t2=$(date +%s.%N)
	bin/cnlab cluster down $name >/dev/null 2>&1
	t3=$(date +%s.%N)
	up=$(echo "$t1 - $t0" | bc)
	down=$(echo "$t3 - $t2" | bc)
	printf "rep %d: up %.2f s, down %.2f s, RSS %.0f MB\n" "$i" "$up" "$down" "$(echo "$mem / 1024" | bc)"
	ups+=("$up") downs+=("$down") mems+=("$(echo "$mem / 1024" | bc)")
done
stats() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "median %.2f (%.2f-%.2f)", m, a[1], a[NR]}'; }
echo "cluster up $*: $(stats "${ups[@]}") s"
echo "cluster down: $(stats "${downs[@]}") s"
echo "memory (RSS of every process, two pods): $(stats "${mems[@]}") MB"
