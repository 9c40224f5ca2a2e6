#!/usr/bin/env python3
"""Why kube-proxy's nftables layout loads slowly at 10,000 Services: load
the same Services (N Services of 4 backends: a service chain, four
endpoint chains of two rules, one element of the service-ips verdict map)
in a throwaway network namespace with `nft -f`, balanced three ways, and
time one more Service added on top. Needs root and nft. Used for
BENCHMARKS.md ("Service proxies").

    python3 scripts/bench-nft-layouts.py [N]      # N defaults to 10000

Layouts:
  anon     kube-proxy's: numgen random mod 4 vmap { 0 : goto ep0, ... }
           (an anonymous verdict map per Service), one transaction
  chunked  the same in transactions of 500 Services (nft -i, one line each)
  cascade  no map: numgen random mod 4 0 goto ep0; ... mod 2 0 goto ep2;
           goto ep3 (iptables' statistic cascade), one transaction
  none     the chains and rules alone, each Service to its first endpoint
"""
import subprocess
import sys
import time

NS = "cnlab-bench-nftl"
N = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
HEAD = [
    "add table ip t", "delete table ip t", "add table ip t",
    "add map ip t service-ips { type ipv4_addr . inet_proto . inet_service : verdict; }",
    "add chain ip t nat-prerouting { type nat hook prerouting priority dstnat; policy accept; }",
    "add chain ip t services", "add chain ip t mark-for-masquerade",
    "add rule ip t nat-prerouting jump services",
    "add rule ip t services ip daddr . meta l4proto . th dport vmap @service-ips",
    "add rule ip t mark-for-masquerade meta mark set meta mark | 0x4000",
]


def service(s, layout):
    """The chains, rules and map element of Service s."""
    name = f"service-{s:05d}"
    chains, rules, eps = [f"add chain ip t {name}"], [], []
    for b in range(4):
        ep = f"endpoint-{s:05d}-{b}"
        eps.append(ep)
        chains.append(f"add chain ip t {ep}")
        ip = f"10.1.{b}.{2 + b}"
        rules += [f"add rule ip t {ep} ip saddr {ip} jump mark-for-masquerade",
                  f"add rule ip t {ep} meta l4proto tcp dnat to {ip}:8080"]
    if layout == "cascade":
        rules += [f"add rule ip t {name} numgen random mod {4 - i} 0 goto {eps[i]}" for i in range(3)]
        rules.append(f"add rule ip t {name} goto {eps[3]}")
    elif layout == "none":
        rules.append(f"add rule ip t {name} goto {eps[0]}")
    else:
        vmap = ", ".join(f"{i} : goto {e}" for i, e in enumerate(eps))
        rules.append(f"add rule ip t {name} numgen random mod 4 vmap {{ {vmap} }}")
    elem = f"10.{96 + s // 62500}.{s // 250 % 250}.{s % 250 + 1} . tcp . 80 : goto {name}"
    return chains, rules, elem


def script(services, layout):
    chains, rules, elems = [], [], []
    for s in services:
        c, r, e = service(s, layout)
        chains += c
        rules += r
        elems.append(e)
    return chains + rules + ["add element ip t service-ips { " + ", ".join(elems) + " }"]


def run(args, text):
    t = time.time()
    r = subprocess.run(["ip", "netns", "exec", NS] + args, input=text.encode(), capture_output=True)
    if r.returncode:
        raise SystemExit("nft: " + r.stderr.decode()[:300])
    return time.time() - t


def main():
    subprocess.run(["ip", "netns", "add", NS], check=True)
    try:
        for layout in ["none", "cascade", "chunked", "anon"]:
            if layout == "chunked":
                lines = ["; ".join(HEAD)]
                for c in range(0, N, 500):
                    lines.append("; ".join(script(range(c, min(N, c + 500)), "anon")))
                full = run(["nft", "-i"], "\n".join(lines) + "\n")
            else:
                full = run(["nft", "-f", "-"], "\n".join(HEAD + script(range(N), layout)) + "\n")
            one = run(["nft", "-f", "-"], "\n".join(script([N], "anon" if layout == "chunked" else layout)) + "\n")
            print(f"{layout:8} {N} Services of 4 backends: full load {full:7.2f} s, one more Service {one * 1000:6.0f} ms", flush=True)
    finally:
        subprocess.run(["ip", "netns", "del", NS])


if __name__ == "__main__":
    main()
