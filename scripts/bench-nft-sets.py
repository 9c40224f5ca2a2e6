#!/usr/bin/env python3
"""Measure nftables set update costs: add N elements to a concatenated set
(interval/pipapo or hash), then flush it. Runs in a throwaway network
namespace; needs root and nft. Used for BENCHMARKS.md.

    sudo python3 scripts/bench-nft-sets.py
"""
import subprocess
import time

NS = "cnlab-bench-nft"
KEY = "ipv4_addr . ipv4_addr . inet_proto . inet_service"


def nft(script):
    r = subprocess.run(["ip", "netns", "exec", NS, "nft", "-f", "-"], input=script.encode(), capture_output=True)
    if r.returncode:
        raise SystemExit("nft: " + r.stderr.decode()[:300])


def run(kind, n):
    flags = "flags interval; " if kind == "interval" else ""
    nft("add table inet t\ndelete table inet t\ntable inet t {\n"
        f"  set a {{ type {KEY}; {flags}}}\n"
        "  chain f { type filter hook forward priority filter; policy accept;\n"
        "    ip saddr . ip daddr . meta l4proto . th dport @a accept\n  }\n}\n")
    peer = "/32" if kind == "interval" else ""
    els = ", ".join(f"10.0.0.1 . 10.{i // 62500}.{(i // 250) % 250}.{i % 250 + 1}{peer} . 6 . {10000 + 2 * (i % 3000)}"
                    for i in range(n))
    t = time.time()
    nft(f"add element inet t a {{ {els} }}\n")
    add = time.time() - t
    t = time.time()
    nft("flush set inet t a\n")
    flush = time.time() - t
    return add, flush


def main():
    subprocess.run(["ip", "netns", "add", NS], check=True)
    try:
        print("| elements | interval set add | interval set flush | hash set add | hash set flush |")
        print("|---:|---:|---:|---:|---:|")
        for n in (1000, 10000, 30000):
            ia, ifl = run("interval", n)
            ha, hfl = run("hash", n)
            print(f"| {n:,} | {ia:.3f} s | {ifl:.3f} s | {ha:.3f} s | {hfl:.3f} s |")
    finally:
        subprocess.run(["ip", "netns", "del", NS])


if __name__ == "__main__":
    main()
