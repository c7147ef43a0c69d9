#!/usr/bin/env python3
"""SVG bar charts of `purebee-rs bench` results next to llama.cpp and bitnet.cpp.

Python 3 standard library only. Reads JSON files, writes SVG files (docs/charts/ by default)
and prints the figures it charted as a table on stdout.

Each input file may hold one JSON object, a JSON array, or one object per line (JSON lines),
so several runs can be appended to one file (`>>`); in JSON lines, lines that do not begin
with `{` (a program's log lines) are skipped. Every object is recognised by its fields:

  purebee-rs bench ... --output json
      {"model", "engine", "arch", "n_prompt", "n_gen", "prefill": {...} | null,
       "decode": {...} | null, ...}; each phase has "tokens" and "tokens_per_s_median".
      Its prefill is test ppP (P = n_prompt); its decode is tgN (N = n_gen), or tgN@dP when a
      prefill of P tokens came first (bench's decode follows the prompt, at positions P, P+1,
      ...; llama-bench's tgN starts at position 0: compare with `bench -p 0 -n N`, or pass
      --ignore-depth).
  purebee-rs bench --npl 1,2,4 ... --output json
      {"model", "engine", "n_prompt", "n_gen", "ubatch", "batched": [{"npl",
       "prompt_tokens_per_s", "gen_tokens_per_s", "gen_tokens_per_s_per_sequence", ...}]}
  llama-bench -o json | -o jsonl (llama.cpp's, or bitnet.cpp's with @program=bitnet.cpp)
      records with "model_filename", "n_prompt", "n_gen", optional "n_depth", "samples_ts"
      or "avg_ts", "n_gpu_layers", "backends"; pp and tg records become ppP and tgN[@dD],
      their figure the median of samples_ts (else avg_ts); the engine is gpu when
      n_gpu_layers > 0 and the backend is not the CPU, else cpu.
  llama-batched-bench --output-format jsonl
      records with "pp", "tg", "pl", "speed_pp", "speed_tg"; they name no model, so give
      one: batched.jsonl@model=NAME.
  anchors: figures written by hand (from a table of docs/benchmarks.md, or a program whose
      output is not above), a list of objects or {"anchors": [...]}:
      {"program": "llama.cpp", "model": "b2b_tq2_0", "engine": "cpu", "test": "tg32",
       "tokens_per_s": 20.28}
      {"program": "llama.cpp", "model": "b2b_tq2_0", "engine": "cpu", "test": "batched",
       "npl": 4, "tokens_per_s": 27.6, "prompt_tokens_per_s": 49.4}
      "test" is ppP, tgN or tgN@dD as above, or "batched" (then "npl" is required and
      "tokens_per_s" is the aggregate generation tokens/s, S_TG). "engine" (cpu, gpu or
      ref) says which purebee-rs engine the figure stands next to; without it, next to
      every engine. A "program" of "purebee-rs" is allowed too (a figure of ours by hand).

Models are matched by name: a path's file name without `.gguf` (`/m/b2b_tq2_0.gguf` is
b2b_tq2_0), or the name given with FILE@model=NAME. FILE@program=NAME,engine=cpu sets the
program and engine of every record of a file the same way (keys: model, program, engine).
Several records of one program, model, engine and test (rounds of alternated runs) are
charted as their median.

Charts written (only those with data):
  decode.svg             tokens/s per model, engine and tgN test, purebee-rs beside each
                         comparison program, with the ratio purebee-rs / program
  prefill.svg            the same for the ppP tests
  batched-MODEL-ENGINE.svg   aggregate generation tokens/s (S_TG) per number of sequences
                         (npl), purebee-rs beside llama.cpp, with the ratio

Example:
  purebee-rs bench b2b_tq2_0.gguf --engine cpu -t 2 -p 0 -n 32 -r 3 --output json >> cpu.json
  llama-bench -m b2b_tq2_0.gguf -t 2 -p 0 -n 32 -r 3 -o jsonl >> llama.jsonl
  python3 scripts/bench-charts.py cpu.json llama.jsonl anchors.json \\
      --machine "2-vCPU Zen 4 VM, 2 threads" --out-dir docs/charts
"""

import argparse
import json
import math
import os
import re
import statistics
import sys
from xml.sax.saxutils import escape

PUREBEE = "purebee-rs"
COLORS = {PUREBEE: "#e0a100", "llama.cpp": "#4c78a8", "bitnet.cpp": "#54a24b"}
OTHER_COLORS = ["#b279a2", "#e45756", "#72b7b2", "#9d755d", "#bab0ac"]


class InputError(Exception):
    """A file or record this script cannot read; the message names it."""


def model_name(path):
    """A model's name from its path: the file name without `.gguf`."""
    base = os.path.basename(str(path).rstrip("/\\"))
    return base[:-5] if base.lower().endswith(".gguf") else base


def parse_spec(spec):
    """`FILE` or `FILE@key=value,...` into (file, overrides)."""
    path, overrides = spec, {}
    if "@" in spec and not os.path.exists(spec):
        path, _, rest = spec.rpartition("@")
        for item in rest.split(","):
            key, eq, value = item.partition("=")
            key = key.strip()
            if not eq or key not in ("model", "program", "engine") or not value.strip():
                raise InputError(f"{spec}: expected FILE@key=value[,key=value] with keys model, program, engine")
            overrides[key] = value.strip()
    return path, overrides


def read_objects(path):
    """Every JSON object of a file: one object, an array, or one per line."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise InputError(f"{path}: {e.strerror}") from e
    try:
        values = [json.loads(text)]
    except json.JSONDecodeError:
        values = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.lstrip().startswith("{"):
                try:
                    values.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise InputError(f"{path}:{n}: not JSON ({e.msg})") from e
        if not values:
            raise InputError(f"{path}: no JSON object found")
    objects = []
    for v in values:
        if isinstance(v, dict) and isinstance(v.get("anchors"), list):
            v = v["anchors"]
        for item in v if isinstance(v, list) else [v]:
            if not isinstance(item, dict):
                raise InputError(f"{path}: expected JSON objects, found {type(item).__name__}")
            objects.append(item)
    return objects


def number(obj, key, where):
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise InputError(f"{where}: field {key!r} must be a number, found {v!r}")
    return float(v)


def decode_test(n_gen, depth):
    return f"tg{n_gen}" + (f"@d{depth}" if depth else "")


def records_of(obj, overrides, where):
    """The figures one object holds: dicts with kind single|batched, program, model, engine,
    test (single) or npl (batched), tokens_per_s, and prompt_tokens_per_s (batched)."""
    program = overrides.get("program")
    out = []

    def add(**r):
        r.setdefault("program", program or PUREBEE)
        if "model" in overrides:
            r["model"] = overrides["model"]
        if "engine" in overrides:
            r["engine"] = overrides["engine"]
        r["where"] = where
        out.append(r)

    if isinstance(obj.get("batched"), list) and "engine" in obj:
        for row in obj["batched"]:
            add(kind="batched", model=model_name(obj.get("model", "?")), engine=obj["engine"],
                npl=int(number(row, "npl", where)), tokens_per_s=number(row, "gen_tokens_per_s", where),
                prompt_tokens_per_s=row.get("prompt_tokens_per_s"))
    elif "engine" in obj and ("decode" in obj or "prefill" in obj) and "n_prompt" in obj:
        model, engine = model_name(obj.get("model", "?")), obj["engine"]
        n_prompt = int(number(obj, "n_prompt", where))
        prefill, decode = obj.get("prefill"), obj.get("decode")
        if isinstance(prefill, dict):
            add(kind="single", model=model, engine=engine, test=f"pp{prefill.get('tokens', n_prompt)}",
                tokens_per_s=number(prefill, "tokens_per_s_median", where))
        if isinstance(decode, dict):
            add(kind="single", model=model, engine=engine,
                test=decode_test(decode.get("tokens", obj.get("n_gen")), n_prompt),
                tokens_per_s=number(decode, "tokens_per_s_median", where))
    elif ("samples_ts" in obj or "avg_ts" in obj) and "n_prompt" in obj and "n_gen" in obj:
        samples = obj.get("samples_ts")
        if isinstance(samples, list) and samples:
            tps = statistics.median(float(s) for s in samples)
        else:
            tps = number(obj, "avg_ts", where)
        n_prompt, n_gen = int(obj["n_prompt"]), int(obj["n_gen"])
        depth = int(obj.get("n_depth") or 0)
        if n_prompt > 0 and n_gen == 0:
            test = f"pp{n_prompt}" + (f"@d{depth}" if depth else "")
        elif n_gen > 0 and n_prompt == 0:
            test = decode_test(n_gen, depth)
        else:
            print(f"bench-charts: {where}: skipped a pp+tg record (pp{n_prompt}+tg{n_gen})", file=sys.stderr)
            return out
        backend = str(obj.get("backends", "")).strip().upper()
        engine = "gpu" if int(obj.get("n_gpu_layers") or 0) > 0 and backend not in ("", "CPU") else "cpu"
        program = program or "llama.cpp"
        add(kind="single", model=model_name(obj.get("model_filename", "?")), engine=engine, test=test,
            tokens_per_s=tps)
    elif "speed_tg" in obj and "pl" in obj:
        if "model" not in overrides:
            raise InputError(f"{where}: llama-batched-bench records name no model: pass FILE@model=NAME")
        program = program or "llama.cpp"
        add(kind="batched", model=overrides["model"], engine=overrides.get("engine"),
            npl=int(number(obj, "pl", where)), tokens_per_s=number(obj, "speed_tg", where),
            prompt_tokens_per_s=obj.get("speed_pp"))
    elif "tokens_per_s" in obj and "test" in obj:
        for key in ("program", "model"):
            if not isinstance(obj.get(key), str) or not obj[key]:
                raise InputError(f"{where}: an anchor needs a {key!r} string")
        program = obj["program"]
        engine = obj.get("engine")
        if obj["test"] == "batched":
            add(kind="batched", program=program, model=obj["model"], engine=engine,
                npl=int(number(obj, "npl", where)), tokens_per_s=number(obj, "tokens_per_s", where),
                prompt_tokens_per_s=obj.get("prompt_tokens_per_s"))
        elif re.fullmatch(r"(pp|tg)\d+(@d\d+)?", str(obj["test"])):
            add(kind="single", program=program, model=obj["model"], engine=engine, test=obj["test"],
                tokens_per_s=number(obj, "tokens_per_s", where))
        else:
            raise InputError(f"{where}: anchor test {obj['test']!r}: expected ppN, tgN, tgN@dD or batched")
    else:
        raise InputError(f"{where}: not a purebee-rs bench report, a llama-bench or llama-batched-bench "
                         f"record, or an anchor (keys: {', '.join(sorted(obj)[:8])})")
    return out


def load(specs, ignore_depth):
    records = []
    for spec in specs:
        path, overrides = parse_spec(spec)
        for i, obj in enumerate(read_objects(path), 1):
            records.extend(records_of(obj, overrides, f"{path} (object {i})"))
    if ignore_depth:
        for r in records:
            if r["kind"] == "single" and r["test"].startswith("tg"):
                r["test"] = r["test"].split("@")[0]
    return records


def median_of(values):
    return statistics.median(values) if values else None


def single_groups(records, phase):
    """[(model, engine, test, {program: median tokens/s})] for purebee-rs's tests of a phase
    ("tg" or "pp"), each with the comparison figures of the same model, engine and test."""
    ours = {}
    for r in records:
        if r["kind"] == "single" and r["program"] == PUREBEE and r["test"].startswith(phase):
            ours.setdefault((r["model"], r["engine"], r["test"]), []).append(r["tokens_per_s"])
    groups = []
    for (model, engine, test), values in sorted(ours.items()):
        figures = {PUREBEE: median_of(values)}
        others = {}
        for r in records:
            if (r["kind"] == "single" and r["program"] != PUREBEE and r["model"] == model
                    and r["test"] == test and r["engine"] in (None, engine)):
                others.setdefault(r["program"], []).append(r["tokens_per_s"])
        figures.update({p: median_of(v) for p, v in sorted(others.items())})
        groups.append((model, engine, test, figures))
    return groups


def batched_groups(records):
    """{(model, engine): {npl: {program: median aggregate tokens/s}}} for purebee-rs's batched
    runs, with the comparison figures at the same npl."""
    out = {}
    for r in records:
        if r["kind"] == "batched" and r["program"] == PUREBEE:
            out.setdefault((r["model"], r["engine"]), {}).setdefault(r["npl"], {}).setdefault(PUREBEE, []).append(
                r["tokens_per_s"])
    for r in records:
        if r["kind"] != "batched" or r["program"] == PUREBEE:
            continue
        for (model, engine), by_npl in out.items():
            if r["model"] == model and r["engine"] in (None, engine) and r["npl"] in by_npl:
                by_npl[r["npl"]].setdefault(r["program"], []).append(r["tokens_per_s"])
    return {k: {n: {p: median_of(v) for p, v in figs.items()} for n, figs in sorted(v.items())}
            for k, v in sorted(out.items())}


def color_of(program, order):
    if program in COLORS:
        return COLORS[program]
    return OTHER_COLORS[order.index(program) % len(OTHER_COLORS)]


def nice_max(v):
    """A round axis maximum at or above v, and its tick step."""
    if v <= 0:
        return 1.0, 0.25
    exp = 10 ** math.floor(math.log10(v))
    for m, ticks in ((1, 4), (1.2, 4), (1.5, 3), (2, 4), (2.5, 5), (3, 3), (4, 4), (5, 5), (6, 3), (8, 4), (10, 4)):
        if m * exp >= v:
            return m * exp, m * exp / ticks
    return 10 * exp, 2.5 * exp


def fmt(v):
    """A bar's value: three significant figures or more."""
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def fmt_tick(v):
    return f"{round(v, 6):,g}"


def bar_chart(title, subtitle, groups, y_label, shared_scale=False, per_row=4):
    """An SVG of small multiples: one panel of vertical bars per group, each with its own
    scale (a 135M model and a 2B one differ by ten times) unless `shared_scale` (the batch
    sizes of one model, whose scaling is the point). groups: [(label_lines,
    {program: value}, note)]."""
    programs = []
    for _, figures, _ in groups:
        for p in figures:
            if p not in programs:
                programs.append(p)
    programs.sort(key=lambda p: (p != PUREBEE, p))
    bar_w, gap_in, axis_w, plot_h = 36, 6, 52, 190
    char_w = 6.6  # about one character of 12 px sans-serif
    panel_ws = []
    for lines, figures, note in groups:
        bars = len(figures) * bar_w + (len(figures) - 1) * gap_in
        text = max([len(line) for line in lines] + [len(note) * 0.92]) * char_w
        panel_ws.append(axis_w + max(bars + 24, text + 12, 120))
    rows = [list(range(i, min(i + per_row, len(groups)))) for i in range(0, len(groups), per_row)]
    n_lines = max(len(lines) for lines, _, _ in groups) + 1
    panel_h = 14 + plot_h + 10 + 15 * n_lines + 16
    left, top = 36, 82
    width = int(max(left + max(sum(panel_ws[i] for i in row) for row in rows) + 16,
                    left + len(title) * 10 + 16, left + len(subtitle) * char_w + 16))
    height = top + panel_h * len(rows)
    s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
         f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
         f'<rect width="{width}" height="{height}" fill="white"/>',
         f'<text x="{left}" y="24" font-size="16" font-weight="bold">{escape(title)}</text>']
    if subtitle:
        s.append(f'<text x="{left}" y="44" fill="#555">{escape(subtitle)}</text>')
    lx = left
    for p in programs:
        s.append(f'<rect x="{lx}" y="55" width="12" height="12" fill="{color_of(p, programs)}"/>')
        s.append(f'<text x="{lx + 16}" y="66">{escape(p)}</text>')
        lx += 30 + char_w * len(p)
    s.append(f'<text transform="translate(14,{top + panel_h * len(rows) / 2}) rotate(-90)" '
             f'text-anchor="middle" fill="#333">{escape(y_label)}</text>')
    for r, row in enumerate(rows):
        x0 = left
        for i in row:
            lines, figures, note = groups[i]
            pw = panel_ws[i]
            y_top = top + r * panel_h + 14
            y_base = y_top + plot_h
            peak = max(v for _, f, _ in groups for v in f.values()) if shared_scale else max(figures.values())
            ymax, step = nice_max(peak * 1.1)
            y = lambda v: y_base - plot_h * v / ymax  # noqa: E731
            tick = 0.0
            while tick <= ymax * (1 + 1e-9):
                ty = y(tick)
                s.append(f'<line x1="{x0 + axis_w}" y1="{ty:.1f}" x2="{x0 + pw - 10}" y2="{ty:.1f}" stroke="#e5e5e5"/>')
                s.append(f'<text x="{x0 + axis_w - 5}" y="{ty + 4:.1f}" text-anchor="end" fill="#555" '
                         f'font-size="11">{fmt_tick(tick)}</text>')
                tick += step
            s.append(f'<line x1="{x0 + axis_w}" y1="{y_base}" x2="{x0 + pw - 10}" y2="{y_base}" stroke="#333"/>')
            bars = len(figures) * bar_w + (len(figures) - 1) * gap_in
            bx = x0 + axis_w + (pw - 10 - axis_w - bars) / 2
            for p in programs:
                if p not in figures:
                    continue
                v = figures[p]
                s.append(f'<rect x="{bx:.1f}" y="{y(v):.1f}" width="{bar_w}" height="{y_base - y(v):.1f}" '
                         f'fill="{color_of(p, programs)}"><title>{escape(p)}: {v:.2f} tokens/s</title></rect>')
                s.append(f'<text x="{bx + bar_w / 2:.1f}" y="{y(v) - 4:.1f}" text-anchor="middle" '
                         f'font-size="10">{fmt(v)}</text>')
                bx += bar_w + gap_in
            cx = x0 + axis_w + (pw - 10 - axis_w) / 2
            for k, line in enumerate(lines):
                s.append(f'<text x="{cx:.1f}" y="{y_base + 18 + 15 * k}" text-anchor="middle">{escape(line)}</text>')
            if note:
                s.append(f'<text x="{cx:.1f}" y="{y_base + 18 + 15 * len(lines)}" text-anchor="middle" '
                         f'fill="#555" font-size="11">{escape(note)}</text>')
            x0 += pw
    s.append("</svg>")
    return "\n".join(s) + "\n"


def ratio_note(figures):
    ours = figures.get(PUREBEE)
    parts = [f"{ours / v:.2f}× {p}" for p, v in figures.items() if p != PUREBEE and v and ours]
    return ", ".join(parts)


def safe(name):
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="bench-charts.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", metavar="FILE[@key=value,...]",
                    help="JSON files: purebee-rs bench reports, llama-bench or llama-batched-bench records, anchors")
    ap.add_argument("--out-dir", default="docs/charts", help="where the SVG files go (default: docs/charts)")
    ap.add_argument("--machine", default="", help="a subtitle naming the machine and threads")
    ap.add_argument("--ignore-depth", action="store_true",
                    help="match tgN tests whatever position the decode started at (tgN@dP as tgN)")
    args = ap.parse_args(argv)
    try:
        records = load(args.inputs, args.ignore_depth)
    except InputError as e:
        print(f"bench-charts: {e}", file=sys.stderr)
        return 1
    if not any(r["program"] == PUREBEE for r in records):
        print("bench-charts: no purebee-rs figures in the input: nothing to chart", file=sys.stderr)
        return 1
    os.makedirs(args.out_dir, exist_ok=True)
    written = []
    print(f"{'chart':<10} {'model':<28} {'engine':<6} {'test':<12} {'program':<12} {'tokens/s':>10} {'ratio':>7}")
    for phase, name, what in (("tg", "decode", "Decode"), ("pp", "prefill", "Prefill")):
        groups = single_groups(records, phase)
        if not groups:
            continue
        for model, engine, test, figures in groups:
            for p, v in figures.items():
                ratio = "" if p == PUREBEE or not v else f"{figures[PUREBEE] / v:.2f}"
                print(f"{name:<10} {model:<28} {engine or '-':<6} {test:<12} {p:<12} {v:>10.2f} {ratio:>7}")
        chart = [([model, f"{engine} · {test}"], figures, ratio_note(figures)) for model, engine, test, figures in groups]
        svg = bar_chart(f"{what} tokens/s (median)", args.machine, chart, "tokens/s")
        written.append(os.path.join(args.out_dir, f"{name}.svg"))
        with open(written[-1], "w", encoding="utf-8") as f:
            f.write(svg)
    for (model, engine), by_npl in batched_groups(records).items():
        for npl, figures in by_npl.items():
            for p, v in figures.items():
                ratio = "" if p == PUREBEE or not v else f"{figures[PUREBEE] / v:.2f}"
                print(f"{'batched':<10} {model:<28} {engine or '-':<6} {'npl ' + str(npl):<12} {p:<12} {v:>10.2f} {ratio:>7}")
        chart = [([f"{npl} sequence" + ("s" if npl > 1 else "")], figures, ratio_note(figures))
                 for npl, figures in by_npl.items()]
        subtitle = f"{model} on the {engine} engine" + (f"; {args.machine}" if args.machine else "")
        svg = bar_chart("Several sequences at once: aggregate generation tokens/s", subtitle, chart,
                        "tokens/s (all sequences)", shared_scale=True, per_row=8)
        written.append(os.path.join(args.out_dir, f"batched-{safe(model)}-{safe(engine)}.svg"))
        with open(written[-1], "w", encoding="utf-8") as f:
            f.write(svg)
    for w in written:
        print(f"bench-charts: wrote {w}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
