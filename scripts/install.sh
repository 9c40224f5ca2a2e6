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
	[taskset]=util-linux [chromium]=chromium
	[ovs-vswitchd]=openvswitch-switch [pgrep]=procps
)
# Packages without a command of their own: headers for rebuilding the eBPF
# programs (go generate ./datapath/ebpf, checked by the tests).
extra=(libbpf-dev linux-libc-dev)

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
	echo "install.sh: installing ${avail[*]}"
	apt-get install -y -q --no-install-recommends "${avail[@]}"
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
