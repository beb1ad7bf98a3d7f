"""An experiment's script, kept with its page (not a tool): each round's stub CPU per request
(main thread and other threads) as a ratio to native's in the same round, and the median of
the ratios, from a ``live_split.py`` log. From the repository root:

    python3 results/planned_split/ratios.py LOG
"""
import re, statistics as st, collections, sys
rows=collections.defaultdict(dict)
for line in open(sys.argv[1]):
    m=re.match(r"round (\d+) (\S+): (\d+) req/s, ([\d.]+) requests a call.*main thread ([\d.]+) \(inside execute\(\) ([\d.]+), outside ([\d.]+)\), other threads ([\d.]+)",line)
    if m:
        r,name,rate,per,main,ins,out,oth=m.groups()
        rows[int(r)][name.rstrip(':')]=(float(main)+float(oth),float(ins),int(rate),float(per))
ratios=collections.defaultdict(list)
for r,d in sorted(rows.items()):
    nat=d['emulated_native'][0]
    line=f"round {r}: native {nat:.1f} us ({d['emulated_native'][2]} req/s)"
    for k in sorted(x for x in d if x!='emulated_native'):
        ratios[k].append(d[k][0]/nat); line+=f" | {k} {d[k][0]:.1f} ({d[k][0]/nat:.2f}x, {d[k][2]} req/s, {d[k][3]:.1f}/call)"
    print(line)
for k,v in ratios.items(): print(k,"median of round ratios",round(st.median(v),3), [round(x,2) for x in v])
