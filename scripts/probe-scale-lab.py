#!/usr/bin/env python3
"""Write the probe-at-scale lab: N endpoints over two hosts joined by a
wire, in five Kubernetes namespaces, labelled so that
examples/policies/probe-scale.yaml denies about half of the ordered pairs
(BENCHMARKS.md, "Probe at scale").

    scripts/probe-scale-lab.py 100 probe-scale > examples/probe-scale.yaml
"""
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 100
name = sys.argv[2] if len(sys.argv) > 2 else "probe-scale"
tiers = ["front", "back", "back", "front", "batch"]
apps = ["web", "db", "cache", "batch"]
print(f"# {n} endpoints over two hosts joined by a wire, five namespaces.")
print(f"# Written by scripts/probe-scale-lab.py {n} {name}; policies in")
print("# examples/policies/probe-scale.yaml.")
print(f"name: {name}")
print("hosts:\n  - {name: flip, podCIDR: 10.0.192.0/22}\n  - {name: flap, podCIDR: 10.0.196.0/22}")
print("links:\n  - {between: [flip, flap], kind: wire}")
print("namespaces:")
for i, t in enumerate(tiers):
    print(f"  n{i}: {{labels: {{tier: {t}}}}}")
print("endpoints:")
for i in range(n):
    host = "flip" if i % 2 == 0 else "flap"
    print(f"  - {{name: e{i:03d}, namespace: n{i % 5}, host: {host}, labels: {{app: {apps[(i // 5) % 4]}}}}}")
