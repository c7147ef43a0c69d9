#!/usr/bin/env python3
"""A numpy Llama forward pass over a GGUF's exact weights, for measuring how far llama.cpp's
logits are from exact arithmetic (docs/accuracy.md). Not part of the engine or its tests.

  exact: f64 activations and weights decoded exactly (what LINEAR specifies).
  q8:    llama.cpp's CPU rounding of the activations entering block-quantized dot products:
         per 32 values, d = amax/127 (f32), q = round-half-even(x · 127/amax), fp16 d, and for
         Q4_1 the block sum s = fp16(d · Σq); Q4_1 · Q8_1 = Σ d_w·d_a·Σ(q_w q_a) + m_w·s,
         Q8_0 · Q8_0 = Σ d_w·d_a·Σ(q_w q_a), summed in f32.

Usage: python3 tools/llama_numpy.py MODEL.gguf exact|q8 ID,ID,... OUT.npy   (needs numpy, gguf==0.19.0)
"""
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def f16(a):
    return np.asarray(a, np.float32).astype(np.float16).astype(np.float32)


def quantize_activations(x):
    x = np.asarray(x, np.float32).reshape(x.shape[0], -1, 32)
    amax = np.abs(x).max(-1)
    d = (amax / np.float32(127)).astype(np.float32)
    inv = np.where(amax != 0, np.float32(127) / np.where(amax != 0, amax, 1), 0).astype(np.float32)
    q = np.rint((x * inv[..., None]).astype(np.float32)).astype(np.int32)
    return q, f16(d), f16(d * q.sum(-1).astype(np.float32))


def raw_blocks(t):
    """(kind, codes [rows, blocks, 32], d, m) of a Q4_1 or Q8_0 tensor."""
    raw = np.asarray(t.data, np.uint8)
    kind = t.tensor_type.name
    size = {"Q4_1": 20, "Q8_0": 34}[kind]
    raw = raw.reshape(raw.shape[0], -1, size)
    d = raw[:, :, 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    if kind == "Q8_0":
        return kind, raw[:, :, 2:].copy().view(np.int8).astype(np.int32), d, None
    m = raw[:, :, 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
    qs = raw[:, :, 4:]
    return kind, np.concatenate([qs & 15, qs >> 4], axis=-1).astype(np.int32), d, m


def q8_matmul(blocks, x):
    kind, wq, wd, wm = blocks
    aq, ad, asum = quantize_activations(x)
    out = np.zeros((x.shape[0], wq.shape[0]), np.float32)
    for r in range(x.shape[0]):
        terms = wd * ad[r][None, :] * np.einsum("bk,rbk->rb", aq[r], wq, optimize=True).astype(np.float32)
        if kind == "Q4_1":
            terms = terms + wm * asum[r][None, :]
        out[r] = terms.astype(np.float32).sum(-1, dtype=np.float32)
    return out.astype(np.float64)


def main():
    path, mode, ids, out_path = sys.argv[1], sys.argv[2], [int(v) for v in sys.argv[3].split(",")], sys.argv[4]
    reader = GGUFReader(path)
    tensors = {t.name: t for t in reader.tensors}

    def meta(key):
        return reader.fields[key].contents()

    n_layer, n_head = meta("llama.block_count"), meta("llama.attention.head_count")
    n_kv, dim = meta("llama.attention.head_count_kv"), meta("llama.embedding_length")
    base, eps = meta("llama.rope.freq_base"), meta("llama.attention.layer_norm_rms_epsilon")
    hd = dim // n_head
    dense, blocks = {}, {}

    def weight(name):
        if name not in dense:
            t = tensors[name]
            shape = [int(v) for v in reversed(t.shape)]
            dense[name] = np.asarray(dequantize(t.data, t.tensor_type), np.float64).reshape(shape)
        return dense[name]

    def linear(name, x):
        if mode == "q8" and tensors[name].tensor_type.name in ("Q4_1", "Q8_0"):
            if name not in blocks:
                blocks[name] = raw_blocks(tensors[name])
            return q8_matmul(blocks[name], x)
        return x @ weight(name).T

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    def rope(x, pos):  # normal RoPE: adjacent pairs
        th = pos[:, None] * base ** (-2.0 * np.arange(hd // 2) / hd)
        c, s = np.cos(th)[:, None, :], np.sin(th)[:, None, :]
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = a * c - b * s, a * s + b * c
        return out

    n = len(ids)
    pos = np.arange(n, dtype=np.float64)
    x = weight("token_embd.weight")[ids]
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for layer in range(n_layer):
        p = f"blk.{layer}."
        h = rms(x, weight(p + "attn_norm.weight"))
        q = rope(linear(p + "attn_q.weight", h).reshape(n, n_head, hd), pos)
        k = rope(linear(p + "attn_k.weight", h).reshape(n, n_kv, hd), pos)
        v = linear(p + "attn_v.weight", h).reshape(n, n_kv, hd)
        att = np.zeros((n, n_head, hd))
        for head in range(n_head):
            kv = head // (n_head // n_kv)
            s = q[:, head] @ k[:, kv].T / np.sqrt(hd) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            att[:, head] = (s / s.sum(-1, keepdims=True)) @ v[:, kv]
        x = x + linear(p + "attn_output.weight", att.reshape(n, -1))
        h = rms(x, weight(p + "ffn_norm.weight"))
        g, u = linear(p + "ffn_gate.weight", h), linear(p + "ffn_up.weight", h)
        x = x + linear(p + "ffn_down.weight", g / (1 + np.exp(-g)) * u)
    head = "output.weight" if "output.weight" in tensors else "token_embd.weight"
    np.save(out_path, linear(head, rms(x, weight("output_norm.weight"))).astype(np.float32))


if __name__ == "__main__":
    main()
