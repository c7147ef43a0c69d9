#!/usr/bin/env python3
"""Summarise run.sh's bench.txt (per model and round, ours vs llama.cpp, medians in t/s) or its
ab.txt (per model, each variant's decode and prefill in every round, and the median over
rounds). Both hold lines `<who> <model> <round> <json>`: `who` is `ours` or `llama` in
bench.txt, the variant's name in ab.txt."""
import json, statistics, sys
from collections import defaultdict


def records(path):
    """(who, model, round, parsed json) for every line that holds one."""
    for line in open(path):
        parts = line.split(' ', 3)
        if len(parts) < 4:
            continue
        try:
            yield parts[0], parts[1], parts[2], json.loads(parts[3])
        except ValueError:
            continue


def ours(j, phase):
    """purebee-rs bench --output json's median t/s of `phase` (prefill or decode), or None."""
    return (j.get(phase) or {}).get('tokens_per_s_median')


def f(x):
    return f'{x:9.1f}' if isinstance(x, (int, float)) else f'{"-":>9}'


def ab(path):
    runs = defaultdict(list)  # (model, variant) -> [(round, prefill, decode)]
    for who, model, rnd, j in records(path):
        runs[(model, who)].append((rnd, ours(j, 'prefill'), ours(j, 'decode')))
    print(f'{"model":14} {"variant":24} {"tg median":>9} {"pp median":>9}  tg / pp per round')
    for (m, b), rs in sorted(runs.items()):
        tg = statistics.median([r[2] for r in rs if r[2]] or [0])
        pp = statistics.median([r[1] for r in rs if r[1]] or [0])
        per = ', '.join(f'{r[2] or 0:.1f} / {r[1] or 0:.0f}' for r in sorted(rs))
        print(f'{m:14} {b:24} {tg:9.1f} {pp:9.1f}  {per}')


def bench(path):
    rows = defaultdict(dict)  # (model, round) -> {'ours_pp','ours_tg','llama_pp','llama_tg','disp','subm'}
    for who, model, rnd, j in records(path):
        r = rows[(model, rnd)]
        if who == 'ours':
            if j.get('prefill'):
                r['ours_pp'] = ours(j, 'prefill')
            if j.get('decode'):
                r['ours_tg'] = ours(j, 'decode')
                r['disp'] = j['decode'].get('dispatches_per_token')
                r['subm'] = j['decode'].get('submits_per_token')
        else:
            med = statistics.median(j.get('samples_ts') or [j['avg_ts']])
            r['llama_pp' if j['n_gen'] == 0 else 'llama_tg'] = med
    print(f'{"model":14} rd {"ours pp":>9} {"llama pp":>9} {"ours tg":>9} {"llama tg":>9} {"tg ratio":>9} disp/tok')
    for (m, rnd), r in sorted(rows.items()):
        ratio = r['ours_tg'] / r['llama_tg'] if 'ours_tg' in r and 'llama_tg' in r else None
        print(f'{m:14} {rnd:2} {f(r.get("ours_pp"))} {f(r.get("llama_pp"))} {f(r.get("ours_tg"))} '
              f'{f(r.get("llama_tg"))} {f(ratio) if ratio is None else f"{ratio:9.3f}"} {r.get("disp")} {r.get("subm")}')


(ab if sys.argv[1].endswith('ab.txt') else bench)(sys.argv[1])
