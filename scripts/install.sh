#!/usr/bin/env bash
# Install what cnlab needs on Debian/Ubuntu, as root. Idempotent: packages
# already present are skipped, and nothing is downloaded when all are there.
#   sudo ./scripts/install.sh
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
	echo "install.sh: run as root (sudo ./scripts/install.sh)" >&2
	exit 1
fi

# Command -> Debian package. Tools cnlab and its tests run.
declare -A tools=(
	[ip]=iproute2 [iperf3]=iperf3 [iptables]=iptables [nft]=nftables
	[ipset]=ipset [ethtool]=ethtool [sockperf]=sockperf [ping]=iputils-ping
	[clang]=clang [llvm-strip]=llvm [bpftool]=bpftool [perf]=linux-perf
	[conntrack]=conntrack [python3]=python3 [make]=make [git]=git [tc]=iproute2
	[taskset]=util-linux [chromium]=chromium [ab]=apache2-utils
	[haproxy]=haproxy [tcpdump]=tcpdump
	[ovs-vswitchd]=openvswitch-switch [pgrep]=procps
	[containerd]=containerd [runc]=runc [busybox]=busybox-static [dash]=dash
	[nsenter]=util-linux [unshare]=util-linux
	[clang-19]=clang-19 [llc-19]=llvm-19
)
# Packages without a command of their own: headers for rebuilding the eBPF
# programs (go generate ./datapath/ebpf, checked by the tests).
# containernetworking-plugins: the bridge CNI of `cnlab cluster up`.
# haproxy: the L7 benchmark's reference proxy (experiment axis l7Proxy),
# run by cnlab in a lab host's namespace, never as the system's service.
# clang-19 and llvm-19: the real Cilium of `cnlab cluster up --cni cilium`
# compiles its datapath at run time with them (Debian 12's clang is 14).
extra=(libbpf-dev linux-libc-dev containernetworking-plugins)

# install_quiet PKG UNIT... installs a package for its programs only:
# each lab runs Open vSwitch daemons of its own (topology/ovs.go), each
# local cluster its own containerd (cluster/), so the system's services,
# which the packages start at once and at every boot, are not wanted. apt
# is told not to start services while it installs (a policy-rc.d, unless
# the machine has one of its own), then the services are disabled at boot
# and stopped, should a policy of the machine's have let them start. A
# package installed before this script ran is left as it is.
install_quiet() {
	local pkg=$1
	shift
	local units=("$@")
	local policy=/usr/sbin/policy-rc.d made=""
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\n# cnlab scripts/install.sh: no service starts while openvswitch-switch installs\nexit 101\n' >"$policy"
		chmod 0755 "$policy"
		made=1
		trap 'rm -f /usr/sbin/policy-rc.d' EXIT
	fi
	echo "install.sh: installing $pkg (its system service neither started nor enabled)"
	apt-get install -y -q --no-install-recommends "$pkg"
	if [ -n "$made" ]; then
		rm -f "$policy"
		trap - EXIT
	fi
	if [ -d /run/systemd/system ]; then
		systemctl disable --now "${units[@]}" >/dev/null 2>&1 || true
		return
	fi
	# No systemd running: its links (for a later boot with it) and the
	# SysV ones, and the daemons if they run.
	if command -v systemctl >/dev/null 2>&1; then
		systemctl disable "${units[@]}" >/dev/null 2>&1 || true
	fi
	if [ -e "/etc/init.d/$pkg" ]; then
		update-rc.d "$pkg" disable >/dev/null 2>&1 || true
		/etc/init.d/"$pkg" stop >/dev/null 2>&1 || true
	fi
}

missing=()
for cmd in "${!tools[@]}"; do
	command -v "$cmd" >/dev/null 2>&1 || missing+=("${tools[$cmd]}")
done
for pkg in "${extra[@]}"; do
	dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done

if [ "${#missing[@]}" -gt 0 ]; then
	mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	# Keep what this distribution has (linux-perf is Debian's name; Ubuntu
	# packages perf per kernel): the tests need iproute2, iptables,
	# nftables, iperf3, clang, llvm, libbpf-dev and bpftool, which both have.
	avail=()
	for pkg in "${missing[@]}"; do
		if apt-cache show "$pkg" >/dev/null 2>&1; then
			avail+=("$pkg")
		else
			echo "install.sh: $pkg is not packaged here; skipping it" >&2
		fi
	done
	# openvswitch-switch, containerd and haproxy go alone, their services
	# kept from starting.
	quiet=()
	for i in "${!avail[@]}"; do
		case "${avail[$i]}" in
		openvswitch-switch | containerd | haproxy)
			quiet+=("${avail[$i]}")
			unset 'avail[i]'
			;;
		esac
	done
	if [ "${#avail[@]}" -gt 0 ]; then
		echo "install.sh: installing ${avail[*]}"
		apt-get install -y -q --no-install-recommends "${avail[@]}"
	fi
	for pkg in "${quiet[@]}"; do
		case "$pkg" in
		openvswitch-switch) install_quiet "$pkg" openvswitch-switch.service ovs-vswitchd.service ovsdb-server.service ;;
		containerd) install_quiet "$pkg" containerd.service ;;
		haproxy) install_quiet "$pkg" haproxy.service ;;
		esac
	done
else
	echo "install.sh: system packages already present"
fi

# Go builds cnlab. Debian's golang is too old; the machines this project
# runs on come with a recent Go. A Go >= 1.21 fetches the toolchain go.mod
# asks for by itself.
if ! command -v go >/dev/null 2>&1; then
	echo "install.sh: Go is missing: install Go 1.26 or later (https://go.dev/doc/install), then run this again" >&2
	exit 1
fi
echo "install.sh: $(go version)"
