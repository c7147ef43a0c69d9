#!/usr/bin/env python3
"""Summarise .dev/device.sh's bench.txt: per model and round, ours vs llama.cpp, medians in t/s."""
import json, statistics, sys
from collections import defaultdict

rows = defaultdict(dict)  # (model, round) -> {'ours_pp','ours_tg','llama_pp','llama_tg', 'disp'}
for line in open(sys.argv[1]):
    parts = line.split(' ', 3)
    if len(parts) < 4:
        continue
    who, model, rnd, js = parts
    try:
        j = json.loads(js)
    except ValueError:
        continue
    r = rows[(model, rnd)]
    if who == 'ours':
        if j.get('prefill'):
            r['ours_pp'] = j['prefill']['tokens_per_s_median']
        if j.get('decode'):
            r['ours_tg'] = j['decode']['tokens_per_s_median']
            r['disp'] = j['decode'].get('dispatches_per_token')
            r['subm'] = j['decode'].get('submits_per_token')
    else:
        med = statistics.median(j.get('samples_ts') or [j['avg_ts']])
        r['llama_pp' if j['n_gen'] == 0 else 'llama_tg'] = med

def f(x):
    return f'{x:9.1f}' if isinstance(x, (int, float)) else f'{"-":>9}'

print(f'{"model":14} rd {"ours pp":>9} {"llama pp":>9} {"ours tg":>9} {"llama tg":>9} {"tg ratio":>9} disp/tok')
for (m, rnd), r in sorted(rows.items()):
    ratio = r['ours_tg'] / r['llama_tg'] if 'ours_tg' in r and 'llama_tg' in r else None
    print(f'{m:14} {rnd:2} {f(r.get("ours_pp"))} {f(r.get("llama_pp"))} {f(r.get("ours_tg"))} {f(r.get("llama_tg"))} '
          f'{f(ratio) if ratio is None else f"{ratio:9.3f}"} {r.get("disp")} {r.get("subm")}')
