#!/usr/bin/env python3
"""Reference for `purebee-rs convert`: what a GGUF converted from a Hugging Face checkpoint
should hold, and the logits the checkpoint should produce.

  reference.py compare CHECKPOINT_DIR OUT.gguf --outtype tq1_0|tq2_0|i2_s|f16|bf16|f32
      For every ternary projection of a BitNet checkpoint (q, k, v, o, gate, up, down of every
      layer), computes the bytes llama.cpp's pipeline gives (reference_quant.py) and compares
      them with the tensor of the same GGUF name (blk.{i}.attn_q.weight, attn_k, attn_v,
      attn_output, ffn_gate, ffn_up, ffn_down) in OUT.gguf: its ggml type, its shape
      (ne = [in, out]) and every byte. Prints one line per tensor (OK, or the first differing
      byte), then a summary. Exit status 0 when all match and at least one was compared, 1
      otherwise. GGUF files are read with gguf-py's GGUFReader; i2_s files (ggml type 36, which
      gguf-py does not know) with tools/ref_bitnet_numpy.py's reader.

  reference.py logits CHECKPOINT_DIR --tokens 1,2,3 --out logits.npy
      The float64 forward pass of reference_forward.py; saves the logits of every position as
      .npy float64 [n_tokens, vocab] and prints the argmax of each position.

  --packed-values checkpoint|f32 (both commands; packed checkpoints only): the value of a
      packed projection is t / weight_scale in float32 (f32, the default: what the converter
      stores) or that rounded to the checkpoint dtype (checkpoint). See reference_quant.py.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from reference_forward import Forward  # noqa: E402
from reference_quant import (OUTTYPES, Checkpoint, expected_bytes, ggml_type_id, is_packed,  # noqa: E402
                             ternary_projections, ternary_values)

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools")


def gguf_tensors(path, outtype):
    """name -> (ggml type id, ne list, uint8 array of the tensor's bytes)."""
    if outtype == "i2_s":
        sys.path.insert(0, TOOLS)
        from ref_bitnet_numpy import read_gguf
        return read_gguf(path)[1]
    from gguf import GGUFReader
    r = GGUFReader(path)
    return {t.name: (int(t.tensor_type), [int(x) for x in t.shape], np.asarray(t.data).view(np.uint8).reshape(-1))
            for t in r.tensors}


def compare_one(ckpt, base, gname, tensors, outtype, packed_values):
    """-> (ok, message) for one projection."""
    values = ternary_values(ckpt, base, packed_values)
    if gname not in tensors:
        return False, "missing from the GGUF"
    tid, ne, got = tensors[gname]
    want_ne = [values.shape[1], values.shape[0]]
    if tid != ggml_type_id(outtype):
        return False, f"ggml type {tid}, expected {ggml_type_id(outtype)} ({outtype})"
    if ne != want_ne:
        return False, f"ne {ne}, expected {want_ne}"
    want = expected_bytes(values, outtype)
    if got.size != want.size:
        return False, f"{got.size} bytes, expected {want.size}"
    diff = np.flatnonzero(got != want)
    if diff.size:
        o = int(diff[0])
        return False, (f"mismatch: {diff.size} of {want.size} bytes differ, first at byte {o} "
                       f"(got 0x{int(got[o]):02x}, expected 0x{int(want[o]):02x})")
    return True, f"OK ({want.size} bytes)"


def cmd_compare(a):
    ckpt = Checkpoint(a.checkpoint)
    projs = ternary_projections(ckpt)
    if not projs:
        print(f"{a.checkpoint}: architecture {ckpt.arch} has no ternary projections to compare")
        return 1
    tensors = gguf_tensors(a.gguf, a.outtype)
    packed = is_packed(ckpt, projs[0][0])
    print(f"{a.checkpoint} ({ckpt.arch}{', packed' if packed else ''}) vs {a.gguf} as {a.outtype}")
    bad = 0
    for base, gname in projs:
        ok, msg = compare_one(ckpt, base, gname, tensors, a.outtype, a.packed_values)
        bad += not ok
        print(f"  {gname:28s} {msg}")
    print(f"compared {len(projs)} tensors: {len(projs) - bad} match, {bad} differ")
    return 0 if bad == 0 else 1


def cmd_logits(a):
    ids = [int(t) for t in a.tokens.replace(" ", "").split(",") if t]
    fw = Forward(Checkpoint(a.checkpoint), a.packed_values)
    logits = fw(ids)
    np.save(a.out, logits.astype(np.float64))
    print(f"{a.out}: logits {list(logits.shape)} float64; argmax per position {logits.argmax(axis=1).tolist()}")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("compare", help="compare a converted GGUF's ternary tensors byte for byte")
    p.add_argument("checkpoint")
    p.add_argument("gguf")
    p.add_argument("--outtype", required=True, choices=OUTTYPES)
    p.set_defaults(fn=cmd_compare)
    p = sub.add_parser("logits", help="float64 logits of a checkpoint")
    p.add_argument("checkpoint")
    p.add_argument("--tokens", required=True, help="comma-separated token ids (include BOS yourself)")
    p.add_argument("--out", required=True, help="output .npy")
    p.set_defaults(fn=cmd_logits)
    for p in sub.choices.values():
        p.add_argument("--packed-values", default="f32", choices=["checkpoint", "f32"],
                       help="packed checkpoints: round t / weight_scale to the checkpoint dtype (default) or not")
    a = ap.parse_args(argv)
    return a.fn(a)


if __name__ == "__main__":
    sys.exit(main())
