#!/bin/bash
# machine-state snapshot (what the brief asks to compare), excluding other clusters' namespaces content
echo "== ip netns"; ip netns list | sort
echo "== ip link"; ip -o link | awk '{print $2, $3}' | sed 's/@[^:]*//' | sort
echo "== nft"; nft list ruleset | md5sum
echo "== iptables-save host"; iptables-save 2>/dev/null | grep -v '^#' | sed 's/\[[0-9:]*\]//' | md5sum
echo "== /sys/fs/bpf"; ls -R /sys/fs/bpf | md5sum; ls /sys/fs/bpf
echo "== mounts cil"; mount | grep -i cil
echo "== /run/cilium /var/run/cilium /run/cilium/cgroupv2"; ls -d /run/cilium /var/run/cilium /var/lib/cilium /etc/cni/net.d/*cilium* 2>&1
echo "== sysctls"; for s in net/core/bpf_jit_enable kernel/unprivileged_bpf_disabled kernel/timer_migration net/core/fb_tunnels_only_for_init_net net/ipv4/ip_forward net/ipv4/conf/all/rp_filter net/ipv4/fib_multipath_use_neigh; do echo "$s=$(cat /proc/sys/$s)"; done
echo "== cgroup2 unified children"; ls /sys/fs/cgroup/unified | grep -v '^cgroup\.' 
echo "== bpftool cgroup root"; bpftool cgroup show /sys/fs/cgroup/unified 2>&1 | head
echo "== lsmod count"; lsmod | wc -l
echo "== /var/lib/cni/results"; ls /var/lib/cni/results 2>&1 | grep -c cilium
