#!/usr/bin/env python3
# Summarises the pinning study (scripts/pinning/noise-*.yaml) as the
# markdown table of BENCHMARKS.md: per point and placement, the median
# and CV of each of the two runs. Reads /tmp/noise/out-PIN-RUN/.
import json,sys,statistics as st,os
rows={}
for v in ['none','cross','same']:
  for rnd in [1,2]:
    d=f'/tmp/noise/out-{v}-{rnd}'
    if not os.path.exists(d+'/results.json'): continue
    r=json.load(open(d+'/results.json'))
    for p in r['points']:
      m='throughput_gbps' if p['workload']['kind']=='tcp-stream' else 'latency_p50_us'
      xs=[s['metrics'][m] for s in p['samples']]
      if len(xs)<2: continue
      key=(p['params']['topology'],p['series'],p['workload']['kind'])
      rows.setdefault(key,{}).setdefault(v,[]).append((st.median(xs),st.stdev(xs)/st.mean(xs)*100))
print('| topology | series | workload | pin | run 1 median | run 2 median | run 1 CV | run 2 CV |')
print('|---|---|---|---|---:|---:|---:|---:|')
for k in sorted(rows):
  for v in ['none','cross','same']:
    if v not in rows[k]: continue
    xs=rows[k][v]
    meds=' | '.join('%.3g'%a for a,b in xs); cvs=' | '.join('%.1f%%'%b for a,b in xs)
    if len(xs)==1: meds+=' | —'; cvs+=' | —'
    print(f'| {k[0]} | {k[1]} | {k[2]} | {v} | {meds} | {cvs} |')
