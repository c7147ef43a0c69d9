#!/usr/bin/env python3
"""Summarise run.sh's bench.txt (per model and round, ours vs llama.cpp, medians in t/s) or its
ab.txt (lines `<binary> <model> <round> <json>`: per model, each binary's decode and prefill
in every round, and the median over rounds)."""
import json, statistics, sys
from collections import defaultdict

def ab(path):
    runs = defaultdict(list)  # (model, binary) -> [(round, prefill, decode)]
    for line in open(path):
        parts = line.split(' ', 3)
        if len(parts) < 4:
            continue
        try:
            j = json.loads(parts[3])
        except ValueError:
            continue
        pp = (j.get('prefill') or {}).get('tokens_per_s_median')
        tg = (j.get('decode') or {}).get('tokens_per_s_median')
        runs[(parts[1], parts[0])].append((parts[2], pp, tg))
    print(f'{"model":14} {"binary":16} {"tg median":>9} {"pp median":>9}  tg / pp per round')
    for (m, b), rs in sorted(runs.items()):
        tg = statistics.median([r[2] for r in rs if r[2]] or [0])
        pp = statistics.median([r[1] for r in rs if r[1]] or [0])
        per = ', '.join(f'{r[2] or 0:.1f} / {r[1] or 0:.0f}' for r in sorted(rs))
        print(f'{m:14} {b:16} {tg:9.1f} {pp:9.1f}  {per}')


if sys.argv[1].endswith('ab.txt'):
    ab(sys.argv[1])
    sys.exit(0)

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
