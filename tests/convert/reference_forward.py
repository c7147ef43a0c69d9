"""The forward half of the reference: a float64 numpy forward pass of a Hugging Face checkpoint,
the same graph and arithmetic as tools/ref_bitnet_numpy.py (the project's reference for GGUF
files, --act-quant per-token), with the weights read from the checkpoint instead of a GGUF.

Graph (one decoder layer, repeated num_hidden_layers times; no biases):
    x = embed_tokens[ids]
    h = rmsnorm(x) * input_layernorm                 rmsnorm(v) = v / sqrt(mean(v^2) + eps)
    q, k, v = L(q_proj, h), L(k_proj, h), L(v_proj, h)
    q, k = rope(q), rope(k)                          HF layout (rotate_half): pairs (i, i + hd/2),
                                                     angle pos * theta^(-2i/hd)
    a = softmax(q k^T / sqrt(hd) + causal) v         GQA: query head h reads kv head h // (H / H_kv)
    a = rmsnorm(a) * attn sub-norm                   when the checkpoint has one (BitNet kinds)
    x = x + L(o_proj, a)
    h = rmsnorm(x) * post_attention_layernorm
    f = act(L(gate_proj, h)) * L(up_proj, h)         act: relu(.)^2 for hidden_act relu2, else silu
    f = rmsnorm(f) * ffn sub-norm                    when present
    x = x + L(down_proj, f)
    logits = (rmsnorm(x) * norm) @ head^T            head = lm_head, or embed_tokens when tied

L(W, x) for a ternary projection (BitNet architectures) is BITLINEAR with per-token int8
activations, exactly as ref_bitnet_numpy.py's per-token path on a TQ2_0 file:
    s = 127 / max(max_i |x_i|, 1e-5);  q = clip(round_half_even(x * s), -128, 127)
    y = (sum over 256-blocks b of (q_b @ T_b^T) * d_b) / s
where T = sign(W) in {-1, 0, 1} and d = fp16(max |W|) over each 256-element block of a row (the
scale TQ2_0 stores; rows that are not multiples of 256 use one float32 d per tensor, as I2_S).
W is reference_quant.ternary_values, so T * d is exactly what a tq2_0 GGUF decodes to (W itself
when W has a BF16 or F16 origin: their magnitudes are fp16 values).
rms_norm_eps and rope_theta are used as float32 values, as a GGUF stores them.
Every other weight (embeddings, norms, lm_head, all of llama's projections) is the checkpoint
value widened to float64, used in a plain float matmul.
"""
import numpy as np

from reference_quant import PROJ_GGUF, TERNARY_ARCHS, ternary_values

SUB_NORMS = {"attn": ("self_attn.attn_sub_norm", "self_attn.inner_attn_ln"),
             "ffn": ("mlp.ffn_sub_norm", "mlp.ffn_layernorm")}


class TernaryWeight:
    """T * d: trits transposed [in, out] as float64, d [out, in/block] rounded to fp16 as TQ2_0
    stores it (or one float32 scalar)."""

    def __init__(self, values):
        v = np.asarray(values, dtype=np.float64)
        rows, cols = v.shape
        self.Tt = np.sign(v).T.copy()
        if cols % 256 == 0:
            self.block = 256
            d = np.abs(v).reshape(rows, cols // 256, 256).max(axis=2)
            self.d = d.astype(np.float16).astype(np.float64)
        else:
            self.block = None
            self.d = float(np.float32(np.abs(v).max()))

    def matmul(self, q):
        """q [n, in] (integers as float64) -> q @ W^T, block by block."""
        if self.block is None:
            return (q @ self.Tt) * self.d
        y = np.zeros((q.shape[0], self.Tt.shape[1]))
        for b in range(self.Tt.shape[0] // self.block):
            sl = slice(b * self.block, (b + 1) * self.block)
            y += (q[:, sl] @ self.Tt[sl, :]) * self.d[:, b][None, :]
        return y


class Forward:
    def __init__(self, ckpt, packed_values="checkpoint"):
        c = ckpt.config
        self.ckpt = ckpt
        self.D, self.L = int(c["hidden_size"]), int(c["num_hidden_layers"])
        self.H = int(c["num_attention_heads"])
        self.HKV = int(c.get("num_key_value_heads", self.H))
        self.hd = int(c.get("head_dim") or self.D // self.H)
        # GGUF stores both as float32; the forward pass uses those values
        self.eps = float(np.float32(c.get("rms_norm_eps", 1e-6)))
        self.base = float(np.float32(c.get("rope_theta", 10000.0)))
        self.act = "relu2" if c.get("hidden_act") == "relu2" else "silu"
        self.ternary = ckpt.arch in TERNARY_ARCHS
        self.packed_values = packed_values
        self.embed = self.f64("model.embed_tokens.weight")
        tied = c.get("tie_word_embeddings", False) or not ckpt.has("lm_head.weight")
        self.head = self.embed if tied else self.f64("lm_head.weight")
        self.V = self.head.shape[0]
        self.layers = [self.load_layer(i) for i in range(self.L)]
        self.norm = self.f64("model.norm.weight")

    def f64(self, name):
        return self.ckpt.f32(name).astype(np.float64)

    def load_layer(self, i):
        p = f"model.layers.{i}."
        lay = {"attn_norm": self.f64(p + "input_layernorm.weight"),
               "ffn_norm": self.f64(p + "post_attention_layernorm.weight")}
        for which, names in SUB_NORMS.items():
            found = [n for n in names if self.ckpt.has(p + n + ".weight")]
            lay[which + "_sub_norm"] = self.f64(p + found[0] + ".weight") if found else None
        for proj, g in PROJ_GGUF.items():
            if self.ternary:
                lay[g] = TernaryWeight(ternary_values(self.ckpt, p + proj, self.packed_values))
            else:
                lay[g] = self.f64(p + proj + ".weight")
        return lay

    @staticmethod
    def linear(w, x):
        if isinstance(w, TernaryWeight):
            amax = np.abs(x).max(axis=-1, keepdims=True)
            s = 127.0 / np.maximum(amax, 1e-5)
            q = np.clip(np.rint(x * s), -128, 127)
            return w.matmul(q) / s
        return x @ w.T

    def rmsnorm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x, pos):
        """rotate_half RoPE on x [n, heads, hd]: pairs (i, i + hd/2)."""
        half = self.hd // 2
        inv = self.base ** (-np.arange(half, dtype=np.float64) * 2.0 / self.hd)
        ang = pos[:, None].astype(np.float64) * inv[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x0, x1 = x[..., :half], x[..., half:]
        return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1)

    def attention(self, lay, h, pos, mask):
        n, H, HKV, hd = h.shape[0], self.H, self.HKV, self.hd
        q = self.rope(self.linear(lay["attn_q"], h).reshape(n, H, hd), pos)
        k = self.rope(self.linear(lay["attn_k"], h).reshape(n, HKV, hd), pos)
        v = self.linear(lay["attn_v"], h).reshape(n, HKV, hd)
        out = np.empty((n, H, hd))
        grp = H // HKV
        for hh in range(H):
            kh = hh // grp
            sc = (q[:, hh, :] @ k[:, kh, :].T) / np.sqrt(hd) + mask
            sc = np.exp(sc - sc.max(axis=1, keepdims=True))
            out[:, hh, :] = (sc / sc.sum(axis=1, keepdims=True)) @ v[:, kh, :]
        a = out.reshape(n, H * hd)
        if lay["attn_sub_norm"] is not None:
            a = self.rmsnorm(a, lay["attn_sub_norm"])
        return self.linear(lay["attn_output"], a)

    def ffn(self, lay, h):
        g, u = self.linear(lay["ffn_gate"], h), self.linear(lay["ffn_up"], h)
        g = np.maximum(g, 0) ** 2 if self.act == "relu2" else g / (1 + np.exp(-g))
        f = g * u
        if lay["ffn_sub_norm"] is not None:
            f = self.rmsnorm(f, lay["ffn_sub_norm"])
        return self.linear(lay["ffn_down"], f)

    def __call__(self, ids):
        """Logits [n, vocab] (float64) of every position of ids."""
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size == 0 or ids.min() < 0 or ids.max() >= self.embed.shape[0]:
            raise ValueError(f"token ids must be in [0, {self.embed.shape[0]}) and not empty")
        n = len(ids)
        pos = np.arange(n)
        mask = np.triu(np.full((n, n), -np.inf), 1)
        x = self.embed[ids]
        for lay in self.layers:
            x = x + self.attention(lay, self.rmsnorm(x, lay["attn_norm"]), pos, mask)
            x = x + self.ffn(lay, self.rmsnorm(x, lay["ffn_norm"]))
        return self.rmsnorm(x, self.norm) @ self.head.T
