"""The weight half of the reference: reading a Hugging Face checkpoint folder and turning its
ternary projections into the bytes a GGUF of each outtype should hold.

Pipeline of one ternary projection (what llama.cpp's conversion/bitnet.py does, in numpy):
  1. read the checkpoint tensor and widen it to float32 exactly (BF16: bits << 16; F16: astype);
  2. ternarize (below);
  3. round the float32 result back to the checkpoint's dtype (llama.cpp: result.type(dtype)):
     BF16 round-to-nearest-even on the bit pattern, F16 numpy astype; then widen to float32;
  4. gguf.quants.quantize(values, TQ1_0 / TQ2_0 / F16 / BF16 / F32) along the last axis (in),
     or I2_S (encode_i2_s; not in gguf-py).

Ternarization (BitnetModel.weight_quant; the Rust converter implements the same steps):
    w32    = float32 weights
    mean   = float32(np.mean(np.abs(w32), dtype=np.float64))
    scale  = max(mean, float32(1e-5))
    iscale = float32(1) / scale                      (in float32)
    t      = clip(round_half_even(w32 * iscale), -1, 1)   (the product in float32)
    result = float32(t / iscale)
llama.cpp computes the mean in float32 with torch's reduction order (weight.abs().mean()), not in
float64; the two agree except, rarely, in the last bit of the mean.
A small negative weight becomes -0.0 (round and clip keep the sign of zero, in numpy, torch and
IEEE arithmetic alike); the f16 / bf16 / f32 outtypes store that sign.

Packed checkpoints (microsoft/bitnet-b1.58-2B-4T: U8 `weight` [out/4, in] + `weight_scale`):
  unpack_ternary follows transformers' integrations/bitnet.py unpack_weights: value i of byte
  packed[r, c] is ((byte >> 2i) & 3) - 1 and lands at row i * (out/4) + r, column c.
  The real weight is ternary / weight_scale: BitLinear.forward divides the matmul output by
  (input_scale * weight_scale) in post_quant_process, and llama.cpp's dequant_bitnet
  (conversion/base.py) returns data / scale ("The scale is inverted").
  Values used here: float32(t / weight_scale) rounded to the checkpoint dtype (the dtype of
  weight_scale, BF16 in the 2B-4T) and widened back, with --packed-values checkpoint (default);
  --packed-values f32 keeps the float32 quotient. No second ternarization is applied. (llama.cpp
  would ternarize its float32 dequantized tensor again: the mean of |t / ws| is nnz/n / ws, so its
  output is t * (nnz/n) / ws, a different magnitude; we do not reproduce that.)
"""
import json
import os

import numpy as np

TERNARY_ARCHS = ("bitnet-b1.58", "bitnet")
ARCH_OF = {"BitNetForCausalLM": "bitnet-b1.58", "BitnetForCausalLM": "bitnet", "LlamaForCausalLM": "llama"}
# HF projection (under model.layers.{i}.) -> GGUF tensor (under blk.{i}.)
PROJ_GGUF = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}
_ST_DTYPES = {"BF16": "<u2", "F16": "<f2", "F32": "<f4", "F64": "<f8", "U8": "u1", "I8": "i1"}


# ---------------------------------------------------------------------------------------------
# Checkpoint folder
# ---------------------------------------------------------------------------------------------
class Checkpoint:
    """config.json plus every tensor of model.safetensors or of the shards an index names.
    Tensors stay memory-mapped until asked for."""

    def __init__(self, path):
        self.path = path
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            self.config = json.load(f)
        index = os.path.join(path, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index, encoding="utf-8") as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
        else:
            files = ["model.safetensors"]
        self.entries = {}            # name -> (dtype, shape, uint8 memmap of its bytes)
        for fn in files:
            self._read_header(os.path.join(path, fn))
        arch = self.config.get("architectures", ["?"])[0]
        if arch not in ARCH_OF:
            raise ValueError(f"{path}: architecture {arch!r} is not one of {sorted(ARCH_OF)}")
        self.arch = ARCH_OF[arch]

    def _read_header(self, fn):
        with open(fn, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n))
        mm = np.memmap(fn, dtype=np.uint8, mode="r")
        for name, e in header.items():
            if name == "__metadata__":
                continue
            a, b = e["data_offsets"]
            if name in self.entries:
                raise ValueError(f"{fn}: tensor {name} appears twice in the checkpoint")
            self.entries[name] = (e["dtype"], list(e["shape"]), mm[8 + n + a:8 + n + b])

    def has(self, name):
        return name in self.entries

    def dtype(self, name):
        return self.entries[name][0]

    def array(self, name):
        """The tensor in its own dtype (BF16 as uint16 bit patterns)."""
        dtype, shape, raw = self.entries[name]
        return np.asarray(raw).view(_ST_DTYPES[dtype]).reshape(shape)

    def f32(self, name):
        """The tensor widened to float32 exactly (BF16 / F16 / F32 only)."""
        dtype = self.dtype(name)
        a = self.array(name)
        if dtype == "BF16":
            return (a.astype(np.uint32) << 16).view(np.float32)
        if dtype in ("F16", "F32"):
            return a.astype(np.float32)
        raise ValueError(f"{name}: {dtype} is not a float type")


# ---------------------------------------------------------------------------------------------
# Numbers
# ---------------------------------------------------------------------------------------------
def ternarize(w32):
    """The ternarization above, float32 in, float32 out."""
    w32 = np.asarray(w32, dtype=np.float32)
    mean = np.float32(np.mean(np.abs(w32), dtype=np.float64))
    scale = max(mean, np.float32(1e-5))
    iscale = np.float32(1) / scale
    t = np.clip(np.round(w32 * iscale), -1, 1)
    return (t / iscale).astype(np.float32)


def round_to_dtype(x32, dtype):
    """float32 -> the nearest value of dtype (BF16: round to nearest even on the bits; F16:
    numpy astype; F32: unchanged), widened back to float32."""
    x32 = np.ascontiguousarray(x32, dtype=np.float32)
    if dtype == "BF16":
        b = x32.view(np.uint32)
        b = (b + (np.uint32(0x7FFF) + ((b >> 16) & np.uint32(1)))) & np.uint32(0xFFFF0000)
        return b.view(np.float32)
    if dtype == "F16":
        return x32.astype(np.float16).astype(np.float32)
    if dtype == "F32":
        return x32
    raise ValueError(f"cannot round to {dtype}")


def unpack_ternary(packed):
    """transformers' unpack_weights: uint8 [out/4, in] -> int8 [out, in] in {-1, 0, +1}."""
    packed = np.asarray(packed, dtype=np.uint8)
    parts = [((packed >> np.uint8(2 * i)) & np.uint8(3)) for i in range(4)]   # rows i*(out/4) + r
    codes = np.concatenate(parts, axis=0)
    if (codes == 3).any():
        raise ValueError("a 2-bit field holds 3: not a ternary value")
    return codes.astype(np.int8) - 1


# ---------------------------------------------------------------------------------------------
# Ternary projections of a checkpoint
# ---------------------------------------------------------------------------------------------
def is_packed(ckpt, base):
    return ckpt.has(base + ".weight_scale")


def ternary_values(ckpt, base, packed_values="checkpoint"):
    """float32 [out, in]: the values the converter should store for projection `base` (an HF
    name without ".weight"), before the outtype's own encoding."""
    if is_packed(ckpt, base):
        if ckpt.dtype(base + ".weight") != "U8":
            raise ValueError(f"{base}.weight: {ckpt.dtype(base + '.weight')} next to a weight_scale, expected U8")
        t = unpack_ternary(ckpt.array(base + ".weight"))
        ws = ckpt.f32(base + ".weight_scale").reshape(-1)
        if ws.size != 1:
            raise ValueError(f"{base}.weight_scale has {ws.size} values, expected 1")
        v = (t.astype(np.float32) / ws[0]).astype(np.float32)
        if packed_values == "checkpoint":
            return round_to_dtype(v, ckpt.dtype(base + ".weight_scale"))
        if packed_values == "f32":
            return v
        raise ValueError(f"packed_values {packed_values!r}")
    w = ckpt.f32(base + ".weight")
    return round_to_dtype(ternarize(w), ckpt.dtype(base + ".weight"))


def ternary_projections(ckpt):
    """[(hf base name, gguf name)] of every ternary projection of a BitNet checkpoint."""
    if ckpt.arch not in TERNARY_ARCHS:
        return []
    out = []
    for i in range(int(ckpt.config["num_hidden_layers"])):
        for proj, g in PROJ_GGUF.items():
            out.append((f"model.layers.{i}.{proj}", f"blk.{i}.{g}.weight"))
    return out


# ---------------------------------------------------------------------------------------------
# Expected GGUF bytes
# ---------------------------------------------------------------------------------------------
GGML_TYPE_I2_S = 36
OUTTYPES = ("tq1_0", "tq2_0", "i2_s", "f16", "bf16", "f32")


def ggml_type_id(outtype):
    if outtype == "i2_s":
        return GGML_TYPE_I2_S
    from gguf import GGMLQuantizationType as QT
    return int({"tq1_0": QT.TQ1_0, "tq2_0": QT.TQ2_0, "f16": QT.F16, "bf16": QT.BF16, "f32": QT.F32}[outtype])


def encode_i2_s(values):
    """Microsoft bitnet.cpp I2_S (x86 layout, as tools/make_tiny_bitnet.py writes it): the
    flattened tensor in blocks of 128; byte j of a block holds elements j, 32+j, 64+j, 96+j at bit
    shifts 6, 4, 2, 0 as codes t + 1; then the per-tensor scale (max |value|) as f32, 8 times."""
    v = np.asarray(values, dtype=np.float32).reshape(-1)
    if v.size % 128:
        raise ValueError(f"I2_S needs a multiple of 128 elements, got {v.size}")
    scale = np.float32(np.abs(v).max()) if v.size else np.float32(0)
    if not np.all((v == 0) | (np.abs(v) == scale)):
        raise ValueError("I2_S needs ternary values with one magnitude")
    codes = (np.sign(v).astype(np.int8) + 1).astype(np.uint8).reshape(-1, 4, 32)
    packed = (codes[:, 0] << 6) | (codes[:, 1] << 4) | (codes[:, 2] << 2) | codes[:, 3]
    return np.concatenate([packed.reshape(-1), np.full(8, scale, dtype="<f4").view(np.uint8)])


def expected_bytes(values, outtype):
    """The tensor bytes (uint8, flat) for float32 values [out, in] stored as outtype."""
    if outtype == "i2_s":
        return encode_i2_s(values)
    import gguf
    q = gguf.quants.quantize(np.ascontiguousarray(values, dtype=np.float32),
                             gguf.GGMLQuantizationType(ggml_type_id(outtype)))
    return np.ascontiguousarray(q).view(np.uint8).reshape(-1)
