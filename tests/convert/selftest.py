#!/usr/bin/env python3
"""Self-test of make_checkpoint.py and reference.py, without the Rust converter.

    selftest.py [WORKDIR]        (default: a temporary folder, removed afterwards)

Checks, on mini checkpoints of every kind:
  - the generator is deterministic (same seed: same bytes; --shards 3: the same tensors plus an
    index whose total_size is right) and its files open with the safetensors and tokenizers
    libraries;
  - unpack_ternary reproduces transformers' unpack_weights docstring example and inverts the
    generator's pack_ternary; a packed checkpoint holds the ternarization of the generator's
    master weights, with weight_scale = bf16(iscale);
  - compare: a GGUF written with gguf-py's GGUFWriter from the reference's own bytes passes for
    every outtype; flipping one byte, dropping a tensor or writing another type fails;
  - logits: the checkpoint forward pass equals tools/ref_bitnet_numpy.py (bitnet-b1.58 and the
    1bitLLM kind, on a TQ2_0 GGUF of the same weights) and tools/llama_numpy.py (llama, on an F32
    GGUF with llama.cpp's q/k permutation).
Exit status 0 when everything holds.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "..", "tools")
sys.path.insert(0, HERE)
sys.path.insert(0, TOOLS)

import make_checkpoint as mk  # noqa: E402
from reference_forward import Forward  # noqa: E402
from reference_quant import (OUTTYPES, PROJ_GGUF, Checkpoint, expected_bytes, ternarize,  # noqa: E402
                             ternary_projections, ternary_values, unpack_ternary)

PY = sys.executable
KINDS = mk.KINDS
FAILURES = []


def check(cond, what):
    print(("  ok   " if cond else "  FAIL ") + what)
    if not cond:
        FAILURES.append(what)


def run(*args):
    return subprocess.run([PY, *args], capture_output=True, text=True)


def make(outdir, kind, *extra):
    r = run(os.path.join(HERE, "make_checkpoint.py"), outdir, "--kind", kind, *extra)
    if r.returncode:
        sys.exit(f"make_checkpoint failed:\n{r.stdout}{r.stderr}")
    return outdir


def folder_digest(path):
    h = hashlib.sha256()
    for fn in sorted(os.listdir(path)):
        h.update(fn.encode())
        with open(os.path.join(path, fn), "rb") as f:
            h.update(f.read())
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
def test_generator(work):
    print("generator")
    from safetensors import safe_open
    from tokenizers import Tokenizer
    for kind in KINDS:
        a = make(os.path.join(work, f"{kind}-a"), kind, "--seed", "3")
        b = make(os.path.join(work, f"{kind}-b"), kind, "--seed", "3")
        c = make(os.path.join(work, f"{kind}-c"), kind, "--seed", "4")
        s = make(os.path.join(work, f"{kind}-s"), kind, "--seed", "3", "--shards", "3")
        check(folder_digest(a) == folder_digest(b), f"{kind}: same seed, same bytes")
        check(folder_digest(a) != folder_digest(c), f"{kind}: another seed, other bytes")
        ca, cs = Checkpoint(a), Checkpoint(s)
        same = set(ca.entries) == set(cs.entries) and all(
            ca.dtype(n) == cs.dtype(n) and np.array_equal(ca.array(n), cs.array(n)) for n in ca.entries)
        idx = json.load(open(os.path.join(s, "model.safetensors.index.json")))
        files = sorted(f for f in os.listdir(s) if f.endswith(".safetensors"))
        total = sum(int(np.prod(cs.entries[n][1])) * mk.DTYPE_SIZE[cs.dtype(n)] for n in cs.entries)
        check(same and files == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
              and idx["metadata"]["total_size"] == total and set(idx["weight_map"]) == set(cs.entries),
              f"{kind}: 3 shards hold the same tensors, index total_size {total}")
        with safe_open(os.path.join(a, "model.safetensors"), "numpy") as f:
            keys = set(f.keys())
            shapes_ok = all(list(f.get_slice(n).get_shape()) == ca.entries[n][1] and
                            f.get_slice(n).get_dtype() == ca.dtype(n) for n in keys)
        check(keys == set(ca.entries) and shapes_ok, f"{kind}: the safetensors library reads the same header")
        tok = Tokenizer.from_file(os.path.join(a, "tokenizer.json"))
        cfg = ca.config
        text = "The river ran past 12 mills, déjà vu."
        check(tok.get_vocab_size() == cfg["vocab_size"] == ca.entries["model.embed_tokens.weight"][1][0]
              and tok.decode(tok.encode(text).ids, skip_special_tokens=True) == text,
              f"{kind}: tokenizer of {cfg['vocab_size']} tokens round-trips text")


def test_packing(work):
    print("packing")
    packed = np.array([[0b10100001, 0b00011000], [0b10010000, 0b00001010]], dtype=np.uint8)
    want = np.array([[0, -1], [-1, 1], [-1, 1], [-1, 1], [1, 0], [0, -1], [1, -1], [1, -1]])
    check(np.array_equal(unpack_ternary(packed), want), "unpack_ternary = transformers' docstring example")
    t = np.random.default_rng(1).integers(-1, 2, size=(64, 40)).astype(np.int8)
    check(np.array_equal(unpack_ternary(mk.pack_ternary(t)), t), "unpack_ternary(pack_ternary(t)) == t")
    w = np.random.default_rng(2).standard_normal((96, 256)).astype(np.float32) * np.float32(0.02)
    tg, isc = mk.ternarize(w)
    check(np.array_equal(ternarize(w), (tg.astype(np.float32) / isc).astype(np.float32)),
          "generator and reference ternarize alike")
    ck = Checkpoint(os.path.join(work, "bitnet-b1.58-packed-a"))
    ok = True
    for base, _ in ternary_projections(ck):
        shape = [ck.entries[base + ".weight"][1][0] * 4, ck.entries[base + ".weight"][1][1]]
        master = mk.rng_for(3, base + ".weight").standard_normal(shape, dtype=np.float32) * np.float32(mk.WEIGHT_STD)
        tm, ism = mk.ternarize(master)
        ws = ck.array(base + ".weight_scale")
        ok &= np.array_equal(unpack_ternary(ck.array(base + ".weight")), tm)
        ok &= ck.dtype(base + ".weight_scale") == "BF16" and int(ws[0]) == int(mk.f32_to_bf16_bits(np.array([ism]))[0])
    check(ok, "packed checkpoint = trits of the master weights, weight_scale = bf16(iscale)")


# ---------------------------------------------------------------------------------------------
def write_ternary_gguf(path, ckpt, outtype, mutate=None):
    """Only the ternary projections, as reference bytes; mutate(name, bytes) may alter them."""
    import gguf
    w = gguf.GGUFWriter(path, "bitnet-b1.58")
    for base, gname in ternary_projections(ckpt):
        v = ternary_values(ckpt, base)
        b = expected_bytes(v, outtype)
        if mutate:
            b = mutate(gname, b)
            if b is None:
                continue
        add_raw(w, gname, b, v.shape, outtype)
    finish(w)


def add_raw(w, name, b, shape, outtype):
    import gguf
    if outtype == "i2_s":   # ggml type 36 is unknown to gguf-py: int8 bytes with an explicit shape
        w.add_tensor(name, b.view(np.int8), raw_shape=tuple(shape), raw_dtype=36)
    elif outtype in ("f32", "f16"):
        w.add_tensor(name, b.view(np.float32 if outtype == "f32" else np.float16).reshape(shape))
    else:
        qt = {"tq1_0": gguf.GGMLQuantizationType.TQ1_0, "tq2_0": gguf.GGMLQuantizationType.TQ2_0,
              "bf16": gguf.GGMLQuantizationType.BF16}[outtype]
        w.add_tensor(name, b.reshape(shape[0], -1), raw_dtype=qt)


def finish(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def compare_rc(ckpt_dir, path, outtype):
    r = run(os.path.join(HERE, "reference.py"), "compare", ckpt_dir, path, "--outtype", outtype)
    return r.returncode, r.stdout + r.stderr


def test_compare(work):
    print("compare")
    for kind in ("bitnet-b1.58", "bitnet-b1.58-packed", "bitnet"):
        d = os.path.join(work, f"{kind}-a")
        ck = Checkpoint(d)
        for outtype in OUTTYPES:
            p = os.path.join(work, f"{kind}.{outtype}.gguf")
            write_ternary_gguf(p, ck, outtype)
            rc, out = compare_rc(d, p, outtype)
            check(rc == 0 and "compared 14 tensors: 14 match" in out, f"{kind} {outtype}: own GGUF passes")

            def flip(name, b):
                if name == "blk.1.ffn_up.weight":
                    b = b.copy()
                    b[37] ^= 0x04
                return b
            write_ternary_gguf(p, ck, outtype, flip)
            rc, out = compare_rc(d, p, outtype)
            check(rc == 1 and "first at byte 37" in out and "13 match, 1 differ" in out,
                  f"{kind} {outtype}: one flipped byte fails")
        write_ternary_gguf(p, ck, "tq2_0", lambda n, b: None if n == "blk.0.attn_k.weight" else b)
        rc, out = compare_rc(d, p, "tq2_0")
        check(rc == 1 and "missing" in out, f"{kind}: a missing tensor fails")
        write_ternary_gguf(p, ck, "tq1_0")
        rc, out = compare_rc(d, p, "tq2_0")
        check(rc == 1 and "ggml type 34" in out, f"{kind}: TQ1_0 tensors fail a tq2_0 comparison")
    rc, out = compare_rc(os.path.join(work, "llama-a"), p, "tq2_0")
    check(rc == 1 and "no ternary projections" in out, "llama: nothing to compare fails")


# ---------------------------------------------------------------------------------------------
def write_bitnet_gguf(path, ckpt, arch, embed, packed_values="checkpoint"):
    """A whole BitNet GGUF as tools/ref_bitnet_numpy.py reads it: TQ2_0 projections, F32 rest."""
    import gguf
    c = ckpt.config
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(c["num_hidden_layers"])
    w.add_embedding_length(c["hidden_size"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv(c["num_key_value_heads"])
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])
    w.add_rope_freq_base(c["rope_theta"])
    w.add_rope_dimension_count(c["hidden_size"] // c["num_attention_heads"])
    w.add_tensor("token_embd.weight", ckpt.f32(embed))
    w.add_tensor("output_norm.weight", ckpt.f32("model.norm.weight"))
    subs = {"attn_sub_norm": ("self_attn.attn_sub_norm", "self_attn.inner_attn_ln"),
            "ffn_sub_norm": ("mlp.ffn_sub_norm", "mlp.ffn_layernorm")}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w.add_tensor(f"blk.{i}.attn_norm.weight", ckpt.f32(p + "input_layernorm.weight"))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", ckpt.f32(p + "post_attention_layernorm.weight"))
        for g, names in subs.items():
            n = [x for x in names if ckpt.has(p + x + ".weight")][0]
            w.add_tensor(f"blk.{i}.{g}.weight", ckpt.f32(p + n + ".weight"))
        for proj, g in PROJ_GGUF.items():
            v = ternary_values(ckpt, p + proj, packed_values)
            add_raw(w, f"blk.{i}.{g}.weight", expected_bytes(v, "tq2_0"), v.shape, "tq2_0")
    finish(w)


def llama_permute(w, n_head):
    """llama.cpp's LlamaModel.permute: HF rotate_half rows -> interleaved pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_llama_gguf(path, ckpt):
    import gguf
    c = ckpt.config
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(c["num_hidden_layers"])
    w.add_embedding_length(c["hidden_size"])
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv(c["num_key_value_heads"])
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])
    w.add_rope_freq_base(c["rope_theta"])
    w.add_tensor("token_embd.weight", ckpt.f32("model.embed_tokens.weight"))
    w.add_tensor("output_norm.weight", ckpt.f32("model.norm.weight"))
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w.add_tensor(f"blk.{i}.attn_norm.weight", ckpt.f32(p + "input_layernorm.weight"))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", ckpt.f32(p + "post_attention_layernorm.weight"))
        for proj, g in PROJ_GGUF.items():
            a = ckpt.f32(p + proj + ".weight")
            if g == "attn_q":
                a = llama_permute(a, c["num_attention_heads"])
            if g == "attn_k":
                a = llama_permute(a, c["num_key_value_heads"])
            w.add_tensor(f"blk.{i}.{g}.weight", np.ascontiguousarray(a))
    finish(w)


def test_logits(work):
    print("logits")
    import ref_bitnet_numpy as rbn
    ids = [1, 17, 42, 99, 5, 230, 64, 3, 150, 11]
    cases = (("bitnet-b1.58", "bitnet-b1.58", "checkpoint"), ("bitnet-b1.58-packed", "bitnet-b1.58", "checkpoint"),
             ("bitnet-b1.58-packed", "bitnet-b1.58", "f32"), ("bitnet", "bitnet", "checkpoint"))
    for kind, arch, pv in cases:
        d = os.path.join(work, f"{kind}-a")
        out = os.path.join(work, f"{kind}.logits.npy")
        r = run(os.path.join(HERE, "reference.py"), "logits", d, "--tokens", ",".join(map(str, ids)), "--out", out,
                "--packed-values", pv)
        ours = np.load(out) if r.returncode == 0 else None
        ck = Checkpoint(d)
        if kind == "bitnet":
            # ref_bitnet_numpy.py ties the LM head to token_embd: give both sides the lm_head
            # matrix as the embedding (the rest of the graph is what is checked).
            fw = Forward(ck)
            fw.embed = fw.head
            ours = fw(ids)
        p = os.path.join(work, f"{kind}.full.gguf")
        write_bitnet_gguf(p, ck, arch, "lm_head.weight" if kind == "bitnet" else "model.embed_tokens.weight", pv)
        theirs = rbn.Forward(rbn.Model(p), "per-token")(ids)
        ok = ours is not None and ours.dtype == np.float64 and ours.shape == (len(ids), ck.config["vocab_size"])
        diff = float(np.abs(ours - theirs).max()) if ok else float("nan")
        check(ok and diff == 0.0,
              f"{kind} ({pv} values): logits equal tools/ref_bitnet_numpy.py on a TQ2_0 GGUF exactly "
              f"(max |diff| {diff:.3g})")
    d = os.path.join(work, "llama-a")
    out = os.path.join(work, "llama.logits.npy")
    run(os.path.join(HERE, "reference.py"), "logits", d, "--tokens", ",".join(map(str, ids)), "--out", out)
    p = os.path.join(work, "llama.full.gguf")
    write_llama_gguf(p, Checkpoint(d))
    r = run(os.path.join(TOOLS, "llama_numpy.py"), p, "exact", ",".join(map(str, ids)), out + ".theirs.npy")
    ours, theirs = np.load(out), np.load(out + ".theirs.npy")
    diff = float(np.abs(ours - theirs).max())
    check(r.returncode == 0 and diff < 1e-5,
          f"llama: logits equal tools/llama_numpy.py (float32 output; max |diff| {diff:.3g})")


def main():
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    work = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="convert-selftest-")
    os.makedirs(work, exist_ok=True)
    try:
        test_generator(work)
        test_packing(work)
        test_compare(work)
        test_logits(work)
    finally:
        if len(sys.argv) <= 1:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{len(FAILURES)} failure(s)" if FAILURES else "all checks passed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
