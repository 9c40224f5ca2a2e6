#!/usr/bin/env python3
"""Run-to-run spread of repeated runs of one experiment (BENCHMARKS.md).

    python3 scripts/run-spread.py results/default-1 results/default-2 results/default-3

For every point and headline metric: the median of each run, the spread of
those medians ((max - min) / median of medians), and the within-run CV of
each run. Points are matched by their ID (the runs must be of the same
experiment file)."""
import json, statistics as st, sys

HEAD = {"tcp-stream": "throughput_gbps", "udp-stream": "throughput_gbps", "tcp-rr": "latency_p50_us",
        "udp-rr": "latency_p50_us", "tcp-crr": "transactions_per_s", "ping": "first_rtt_us"}
runs = [json.load(open(d + "/results.json")) for d in sys.argv[1:]]
print("| point | series | policies | workload | metric | " + " | ".join(f"run {i+1} median" for i in range(len(runs)))
      + " | spread of medians | within-run CVs |")
print("|---|---|---:|---|---|" + "---:|" * len(runs) + "---:|---|")
spreads = {}
for p in runs[0]["points"]:
    m = HEAD[p["workload"]["kind"]]
    meds, cvs = [], []
    for r in runs:
        q = next(q for q in r["points"] if q["id"] == p["id"])
        xs = [s["metrics"][m] for s in q["samples"] if m in s["metrics"]]
        meds.append(st.median(xs))
        cvs.append(st.stdev(xs) / st.mean(xs) * 100 if len(xs) > 1 else float("nan"))
    spread = (max(meds) - min(meds)) / st.median(meds) * 100
    spreads.setdefault(m, []).append(spread)
    print(f"| {p['id']} | {p['series']} | {p['params']['policies']} | {p['workload']['kind']} | {m} | "
          + " | ".join(f"{v:.3g}" for v in meds) + f" | {spread:.1f}% | " + ", ".join(f"{c:.1f}%" for c in cvs) + " |")
print()
for m, xs in spreads.items():
    print(f"{m}: spread of run medians, median over points {st.median(xs):.1f}% (range {min(xs):.1f}-{max(xs):.1f}%)")
