#!/usr/bin/env python3
"""Write a synthetic Hugging Face checkpoint folder (safetensors, config, tokenizer).

    make_checkpoint.py OUTDIR --kind KIND [--seed N] [--shape mini|mid|2b] [--shards N]

The folder holds what a converter reads from a real Hugging Face download:
    config.json, generation_config.json, tokenizer.json, tokenizer_config.json,
    model.safetensors, or model-0000i-of-0000N.safetensors + model.safetensors.index.json.

Kinds (architecture, dtype, tensors):
  bitnet-b1.58         microsoft/bitnet-b1.58-2B-4T-bf16 style: BitNetForCausalLM, model_type
                       "bitnet", relu2, BF16, tied LM head (no lm_head.weight), the float master
                       weights of every projection, sub-norms self_attn.attn_sub_norm and
                       mlp.ffn_sub_norm (names from transformers' models/bitnet/modular_bitnet.py).
  bitnet-b1.58-packed  microsoft/bitnet-b1.58-2B-4T style: the same model with every projection
                       stored as transformers' BitLinear loads it (integrations/bitnet.py):
                         <proj>.weight        U8   [out/4, in]
                         <proj>.weight_scale  BF16 [1]
                       Byte b = packed[r, c] holds 4 ternary values; value i (i = 0..3) is
                       ((b >> 2i) & 3) - 1 and belongs to row i * (out/4) + r, column c
                       (pack_weights / unpack_weights). The real weight is
                           ternary / weight_scale
                       BitLinear.forward computes F.linear(x_q, unpacked) then
                       post_quant_process: out / (input_scale * weight_scale); llama.cpp's
                       dequant_bitnet (conversion/base.py) divides too ("The scale is inverted").
                       So weight_scale holds bf16(1 / absmean(w)): the ternarization's iscale.
                       (transformers' AutoBitLinear, linear_class "autobitlinear", multiplies
                       instead; config.json here says linear_class "bitlinear".)
  bitnet               1bitLLM/bitnet_b1_58-large style: BitnetForCausalLM, model_type "llama",
                       silu, F16, untied lm_head.weight, float master weights. 1bitLLM's
                       modeling_bitnet.py has RMS sub-norms too, under other names:
                       self_attn.inner_attn_ln [d] and mlp.ffn_layernorm [ff] (llama.cpp's
                       tensor_mapping maps them to attn_sub_norm / ffn_sub_norm); --no-sub-norms
                       leaves them out.
  llama                LlamaForCausalLM, silu, BF16, tied LM head, ordinary float weights.

Tensors (HF names, shapes [out, in]; per layer i):
  model.embed_tokens.weight [vocab, d]      model.norm.weight [d]      (lm_head.weight [vocab, d])
  model.layers.i.input_layernorm.weight [d] model.layers.i.post_attention_layernorm.weight [d]
  model.layers.i.self_attn.{q,k,v,o}_proj.weight [d,d] [kv,d] [kv,d] [d,d]   (kv = n_kv * head_dim)
  model.layers.i.mlp.{gate,up}_proj.weight [ff,d]   model.layers.i.mlp.down_proj.weight [d,ff]
  + the sub-norms named above (b1.58 kinds, and bitnet unless --no-sub-norms).

Values: every tensor is drawn from np.random.default_rng([seed, crc32(name)]), in float32:
projections and embeddings N(0, 0.02^2) (the master weights, not already ternary), norms
1 + 0.1 N(0, 1). BF16 is the float32 bit pattern rounded to nearest even; F16 is numpy's
astype(float16). The same seed gives the same files whatever --shards is.

Shapes: mini (default) d=256 ff=512, 2 layers, 4 heads, 2 kv heads, vocab = the tokenizer's
size; mid d=512 ff=1536, 4 layers, 8 heads, 2 kv heads; 2b the 2B-4T shapes (d=2560 ff=6912,
30 layers, 20 heads, 5 kv heads, vocab 128256; about 4.8 GB in BF16). Tensors are written one
at a time, large ones in row chunks, straight into the file: memory stays small at any shape.

Tokenizers (trained with the tokenizers library's BpeTrainer on the built-in text below,
deterministically):
  b1.58 kinds   Llama 3 style byte-level BPE: Split on Llama 3's regex, then ByteLevel
                (use_regex false); added special tokens <|begin_of_text|>, <|end_of_text|>,
                <|eot_id|>, <|start_header_id|>, <|end_header_id|> after the BPE vocab, then
                <|reserved_i|> tokens up to the shape's vocab size (2b: 128256 in all);
                tokenizer_config.json with add_bos_token true and a Llama 3 chat template.
  bitnet, llama SentencePiece-style BPE as Llama 2's tokenizer.json: byte_fallback, the "▁"
                normalizer (Prepend + Replace), <unk> <s> </s> at ids 0 1 2, <0x00>..<0xFF> at
                ids 3..258; add_bos_token true; a Llama 2 chat template for llama only.
"""
import argparse
import json
import os
import sys
import zlib

import numpy as np

SHAPES = {
    "mini": dict(d=256, ff=512, layers=2, heads=4, kv_heads=2, vocab=None),
    "mid": dict(d=512, ff=1536, layers=4, heads=8, kv_heads=2, vocab=None),
    "2b": dict(d=2560, ff=6912, layers=30, heads=20, kv_heads=5, vocab=128256),
}
KINDS = ("bitnet-b1.58", "bitnet-b1.58-packed", "bitnet", "llama")
PROJS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
         "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
WEIGHT_STD = 0.02
CHUNK_ELEMS = 1 << 22            # rows per chunk = CHUNK_ELEMS // cols when streaming
DTYPE_SIZE = {"BF16": 2, "F16": 2, "F32": 4, "U8": 1}

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>",
                   "<|start_header_id|>", "<|end_header_id|>"]
LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
LLAMA2_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + message['content'] | trim + ' [/INST]' }}"
    "{% elif message['role'] == 'system' %}{{ '<<SYS>>\n' + message['content'] | trim + '\n<</SYS>>\n\n' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] | trim + ' ' + eos_token }}"
    "{% endif %}{% endfor %}")

CORPUS = """\
The river ran slowly past the old mill, and the miller's children counted the boats that went
down to the sea. In the morning they saw three, in the evening seven, and on a windy day in
March they counted twelve before the rain sent them home.
A small language model reads text as a list of numbers. Each number stands for a piece of a
word: a whole word when the word is common, a few letters when it is rare, and single bytes
when nothing else fits. The pieces are learned from text like this one, by joining the pairs
that appear together most often, again and again, until the list of pieces is long enough.
Weights that take only three values, minus one, zero and plus one, need less than two bits
each. A layer multiplies its input by such a matrix, adds the results, and scales the sum by
one number for the whole matrix. The input is rounded to small integers first, one scale for
each token, so the whole product is a sum of integers.
She asked whether the train would leave at 9:45 or at 10:15, and the clerk said it had left
already, at 9:30, because the timetable had changed on the 1st of June. "We're sorry," he
said, "but you'll find another one at noon; it's slower, and it stops at every station."
Numbers such as 3.14159, 2.71828 and 1.41421 appear in many books. Lists look like this:
apples, pears, plums; red, green, blue; north, south, east and west.
def add(a, b):
    return a + b
The quick brown fox jumps over the lazy dog. The lazy dog does not move; it sleeps in the sun
while the fox runs into the forest, where the trees are tall and the paths are narrow.
"""


# ---------------------------------------------------------------------------------------------
# Numbers
# ---------------------------------------------------------------------------------------------
def rng_for(seed, name):
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def f32_to_bf16_bits(x):
    """float32 array -> uint16 bfloat16 bit patterns, round to nearest even (no NaNs here)."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((b + (np.uint32(0x7FFF) + ((b >> 16) & np.uint32(1)))) >> 16).astype(np.uint16)


def encode(x, dtype):
    """float32 array -> little-endian bytes of dtype BF16 / F16 / F32."""
    if dtype == "BF16":
        return f32_to_bf16_bits(x).astype("<u2").tobytes()
    if dtype == "F16":
        return x.astype("<f2").tobytes()
    if dtype == "F32":
        return x.astype("<f4").tobytes()
    raise ValueError(dtype)


def ternarize(w32):
    """The converter's ternarization (tests/convert/README.md): -> (trits int8, iscale float32)."""
    mean = np.float32(np.mean(np.abs(w32), dtype=np.float64))
    scale = max(mean, np.float32(1e-5))
    iscale = np.float32(1) / scale
    t = np.clip(np.round(w32 * iscale), -1, 1)
    return t.astype(np.int8), iscale


def pack_ternary(t):
    """transformers' pack_weights: int8 [out, in] in {-1,0,1} -> uint8 [out/4, in];
    row i * (out/4) + r goes into bits 2i..2i+1 of packed row r, as value + 1."""
    out = t.shape[0]
    if out % 4:
        raise ValueError(f"packed rows need out % 4 == 0, got {out}")
    q = (t.astype(np.int16) + 1).astype(np.uint8).reshape(4, out // 4, t.shape[1])
    return (q[0] | (q[1] << 2) | (q[2] << 4) | (q[3] << 6)).astype(np.uint8)


# ---------------------------------------------------------------------------------------------
# The tensor plan: (name, dtype, shape, writer); writer(f) writes the tensor's bytes to f.
# ---------------------------------------------------------------------------------------------
def normal_writer(seed, name, shape, dtype, std=WEIGHT_STD):
    """Streams N(0, std^2) in row chunks: the whole tensor is never in memory."""
    rows, cols = (shape[0], int(np.prod(shape[1:]))) if len(shape) > 1 else (1, shape[0])
    step = max(1, CHUNK_ELEMS // cols)

    def write(f):
        g = rng_for(seed, name)
        for r0 in range(0, rows, step):
            n = min(step, rows - r0)
            chunk = g.standard_normal((n, cols), dtype=np.float32) * np.float32(std)
            f.write(encode(chunk, dtype))
    return write


def norm_writer(seed, name, n, dtype):
    def write(f):
        g = rng_for(seed, name)
        f.write(encode(np.float32(1) + np.float32(0.1) * g.standard_normal(n, dtype=np.float32), dtype))
    return write


def packed_writers(seed, name, shape, scale_dtype):
    """(weight writer, weight_scale writer) of one packed projection; both draw the same master
    weights (a projection is at most ff x d floats, small enough to hold)."""
    iscale = []                  # filled by write_weight, which the plan runs first

    def trits_and_iscale():
        w = rng_for(seed, name).standard_normal(shape, dtype=np.float32) * np.float32(WEIGHT_STD)
        return ternarize(w)

    def write_weight(f):
        t, s = trits_and_iscale()
        iscale[:] = [s]
        f.write(pack_ternary(t).tobytes())

    def write_scale(f):
        s = iscale[0] if iscale else trits_and_iscale()[1]
        f.write(encode(np.array([s], dtype=np.float32), scale_dtype))
    return write_weight, write_scale


def plan(kind, shp, vocab, seed, sub_norms):
    d, ff, L = shp["d"], shp["ff"], shp["layers"]
    hd = d // shp["heads"]
    kv = shp["kv_heads"] * hd
    dtype = {"bitnet-b1.58": "BF16", "bitnet-b1.58-packed": "BF16", "bitnet": "F16", "llama": "BF16"}[kind]
    shapes = {"self_attn.q_proj": [d, d], "self_attn.k_proj": [kv, d], "self_attn.v_proj": [kv, d],
              "self_attn.o_proj": [d, d], "mlp.gate_proj": [ff, d], "mlp.up_proj": [ff, d],
              "mlp.down_proj": [d, ff]}
    sub = {"bitnet-b1.58": ("self_attn.attn_sub_norm", "mlp.ffn_sub_norm"),
           "bitnet-b1.58-packed": ("self_attn.attn_sub_norm", "mlp.ffn_sub_norm"),
           "bitnet": ("self_attn.inner_attn_ln", "mlp.ffn_layernorm") if sub_norms else None,
           "llama": None}[kind]
    out = []

    def norm(name, n):
        out.append((name, dtype, [n], norm_writer(seed, name, n, dtype)))

    out.append(("model.embed_tokens.weight", dtype, [vocab, d],
                normal_writer(seed, "model.embed_tokens.weight", [vocab, d], dtype)))
    for i in range(L):
        p = f"model.layers.{i}."
        norm(p + "input_layernorm.weight", d)
        for proj in PROJS:
            name = p + proj + ".weight"
            if proj == "self_attn.o_proj" and sub:
                norm(p + sub[0] + ".weight", d)
            if proj == "mlp.down_proj" and sub:
                norm(p + sub[1] + ".weight", ff)
            if kind == "bitnet-b1.58-packed":
                ww, ws = packed_writers(seed, name, shapes[proj], dtype)
                out.append((name, "U8", [shapes[proj][0] // 4, shapes[proj][1]], ww))
                out.append((p + proj + ".weight_scale", dtype, [1], ws))
            else:
                out.append((name, dtype, shapes[proj], normal_writer(seed, name, shapes[proj], dtype)))
            if proj == "self_attn.o_proj":
                norm(p + "post_attention_layernorm.weight", d)
    norm("model.norm.weight", d)
    if kind == "bitnet":
        out.append(("lm_head.weight", dtype, [vocab, d], normal_writer(seed, "lm_head.weight", [vocab, d], dtype)))
    return out


# ---------------------------------------------------------------------------------------------
# Safetensors, written by hand (header first, then each tensor streamed)
# ---------------------------------------------------------------------------------------------
def nbytes(dtype, shape):
    return DTYPE_SIZE[dtype] * int(np.prod(shape))


def write_safetensors(path, tensors):
    header, off = {}, 0
    for name, dtype, shape, _ in tensors:
        n = nbytes(dtype, shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        start = f.tell()
        for name, dtype, shape, writer in tensors:
            writer(f)
            want = start + header[name]["data_offsets"][1]
            if f.tell() != want:
                raise RuntimeError(f"{name}: wrote up to byte {f.tell()}, header says {want}")


def split_shards(tensors, n):
    """n contiguous groups of tensors, each about total/n bytes (none empty)."""
    if n > len(tensors):
        raise ValueError(f"{n} shards for {len(tensors)} tensors")
    total = sum(nbytes(t[1], t[2]) for t in tensors)
    shards, cur, acc = [], [], 0
    for i, t in enumerate(tensors):
        cur.append(t)
        acc += nbytes(t[1], t[2])
        left_tensors, left_shards = len(tensors) - i - 1, n - len(shards) - 1
        if left_shards and (acc >= total * (len(shards) + 1) / n or left_tensors == left_shards):
            shards.append(cur)
            cur = []
    shards.append(cur)
    return shards


def write_weights(outdir, tensors, n_shards):
    if n_shards <= 1:
        write_safetensors(os.path.join(outdir, "model.safetensors"), tensors)
        return
    weight_map, total = {}, 0
    for k, group in enumerate(split_shards(tensors, n_shards)):
        fname = f"model-{k + 1:05d}-of-{n_shards:05d}.safetensors"
        write_safetensors(os.path.join(outdir, fname), group)
        for name, dtype, shape, _ in group:
            weight_map[name] = fname
            total += nbytes(dtype, shape)
    dump_json(os.path.join(outdir, "model.safetensors.index.json"),
              {"metadata": {"total_size": total}, "weight_map": weight_map})


# ---------------------------------------------------------------------------------------------
# Tokenizers
# ---------------------------------------------------------------------------------------------
def corpus_lines():
    return CORPUS.splitlines()


def byte_level_tokenizer(vocab_total):
    """Llama 3 style byte-level BPE; -> (Tokenizer, {special: id}). vocab_total: pad the added
    tokens with <|reserved_i|> up to this size (None: no padding)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, min_frequency=2, show_progress=False, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus_lines(), trainer)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in LLAMA3_SPECIALS])
    if vocab_total is not None:
        n = vocab_total - tok.get_vocab_size()
        if n < 0:
            raise ValueError(f"tokenizer already has {tok.get_vocab_size()} > {vocab_total} tokens")
        tok.add_special_tokens([AddedToken(f"<|reserved_{i}|>", special=True, normalized=False) for i in range(n)])
    ids = {s: tok.token_to_id(s) for s in LLAMA3_SPECIALS}
    bos = ids["<|begin_of_text|>"]
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    return tok, ids


def sentencepiece_tokenizer():
    """Llama 2 style BPE with byte fallback: <unk> <s> </s> = 0 1 2, <0x00>..<0xFF> = 3..258, then
    the trained pieces (single characters first, then merges, in the trainer's order)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    # Training splits at "▁" so that no merge crosses a word boundary, as SentencePiece does.
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    trainer = trainers.BpeTrainer(vocab_size=320, min_frequency=2, show_progress=False,
                                  special_tokens=["<unk>", "<s>", "</s>"])
    tok.train_from_iterator(corpus_lines(), trainer)
    j = json.loads(tok.to_str())
    trained = sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1])
    assert [t for t, _ in trained[:3]] == ["<unk>", "<s>", "</s>"], trained[:3]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = 3 + b
    for t, _ in trained[3:]:
        vocab[t] = len(vocab)
    j["model"]["vocab"] = vocab
    for a in j["added_tokens"]:
        a["id"] = vocab[a["content"]]
        a["normalized"] = False
    j["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
    j["pre_tokenizer"] = None
    j["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
        {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    tok = Tokenizer.from_str(json.dumps(j, ensure_ascii=False))
    return tok, {"<unk>": 0, "<s>": 1, "</s>": 2}


def train_sentencepiece_model(outdir):
    """A SentencePiece BPE model with byte fallback, trained with the `sentencepiece` library
    on the built-in corpus, written as tokenizer.model (what older Llama 2 family checkpoints
    ship instead of a tokenizer.json); returns its vocabulary size."""
    import io
    import sentencepiece as spm
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus_lines()), model_writer=model, model_type="bpe", vocab_size=400,
        byte_fallback=True, character_coverage=1.0, num_threads=1, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        normalization_rule_name="identity", remove_extra_whitespaces=False, minloglevel=2)  # as Llama 2
    with open(os.path.join(outdir, "tokenizer.model"), "wb") as f:
        f.write(model.getvalue())
    return spm.SentencePieceProcessor(model_proto=model.getvalue()).get_piece_size()


def added_tokens_decoder(tok):
    return {str(i): {"content": t.content, "lstrip": t.lstrip, "normalized": t.normalized, "rstrip": t.rstrip,
                     "single_word": t.single_word, "special": t.special}
            for i, t in sorted(tok.get_added_tokens_decoder().items())}


# ---------------------------------------------------------------------------------------------
# Config files
# ---------------------------------------------------------------------------------------------
def dump_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def model_config(kind, shp, vocab, bos, eos):
    c = {"hidden_size": shp["d"], "intermediate_size": shp["ff"], "num_hidden_layers": shp["layers"],
         "num_attention_heads": shp["heads"], "num_key_value_heads": shp["kv_heads"],
         "rms_norm_eps": 1e-05, "initializer_range": WEIGHT_STD, "vocab_size": vocab,
         "bos_token_id": bos, "eos_token_id": eos, "attention_bias": False, "use_cache": True}
    if kind.startswith("bitnet-b1.58"):
        c.update({"architectures": ["BitNetForCausalLM"], "model_type": "bitnet", "hidden_act": "relu2",
                  "max_position_embeddings": 4096, "rope_theta": 500000.0, "tie_word_embeddings": True,
                  "torch_dtype": "bfloat16"})
        if kind.endswith("packed"):
            c["quantization_config"] = {"quant_method": "bitnet", "linear_class": "bitlinear",
                                        "quantization_mode": "offline"}
    elif kind == "bitnet":
        c.update({"architectures": ["BitnetForCausalLM"], "model_type": "llama", "hidden_act": "silu",
                  "max_position_embeddings": 2048, "rope_theta": 10000.0, "tie_word_embeddings": False,
                  "torch_dtype": "float16", "input_bits": 8, "weight_bits": 1})
    else:
        c.update({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
                  "max_position_embeddings": 2048, "rope_theta": 10000.0, "tie_word_embeddings": True,
                  "torch_dtype": "bfloat16"})
    return dict(sorted(c.items()))


def tokenizer_from_gguf(path):
    """A byte-level BPE tokenizer.json rebuilt from a GGUF's vocabulary (tokens, merges, token
    types), with SmolLM's pre-tokenizer (each digit apart, then GPT-2's split): what
    SmolLM2-135M-Instruct ships, from the file the tests already fetch. Returns the tokenizer,
    its BOS and EOS ids and its chat template."""
    from gguf import GGUFReader
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    r = GGUFReader(path)

    def field(key):
        f = r.fields[key]
        if f.types and f.types[0] == gguf_array_type():
            return [f.parts[i].tobytes().decode("utf-8") if f.types[-1] == gguf_string_type()
                    else int(f.parts[i][0]) for i in f.data]
        part = f.parts[f.data[0]]
        return part.tobytes().decode("utf-8") if f.types[0] == gguf_string_type() else int(part[0])

    tokens, types, merges = field("tokenizer.ggml.tokens"), field("tokenizer.ggml.token_type"), field("tokenizer.ggml.merges")
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[tuple(m.split(" ", 1)) for m in merges]))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty == 3])
    return tok, field("tokenizer.ggml.bos_token_id"), field("tokenizer.ggml.eos_token_id"), field("tokenizer.chat_template")


def gguf_array_type():
    from gguf import GGUFValueType
    return GGUFValueType.ARRAY


def gguf_string_type():
    from gguf import GGUFValueType
    return GGUFValueType.STRING


def write_tokenizer_and_configs(outdir, kind, shp, tokenizer_gguf=None, sentencepiece_model=False):
    """Writes the tokenizer and JSON files; returns the vocab size."""
    if sentencepiece_model:
        vocab = train_sentencepiece_model(outdir)
        tcfg = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
                "unk_token": "<unk>", "legacy": True, "tokenizer_class": "LlamaTokenizer"}
        dump_json(os.path.join(outdir, "tokenizer_config.json"), tcfg)
        dump_json(os.path.join(outdir, "generation_config.json"), {"bos_token_id": 1, "eos_token_id": 2})
        dump_json(os.path.join(outdir, "config.json"), model_config(kind, shp, vocab, 1, 2))
        return vocab
    if tokenizer_gguf:
        tok, bos, eos, template = tokenizer_from_gguf(tokenizer_gguf)
        tcfg = {"add_bos_token": False, "add_eos_token": False, "bos_token": tok.id_to_token(bos),
                "eos_token": tok.id_to_token(eos), "chat_template": template, "model_max_length": 2048,
                "tokenizer_class": "GPT2Tokenizer"}
        gen = {"bos_token_id": bos, "eos_token_id": eos, "do_sample": False}
    elif kind.startswith("bitnet-b1.58"):
        tok, ids = byte_level_tokenizer(shp["vocab"])
        bos, eos, eot = ids["<|begin_of_text|>"], ids["<|end_of_text|>"], ids["<|eot_id|>"]
        tcfg = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<|begin_of_text|>",
                "eos_token": "<|eot_id|>", "chat_template": LLAMA3_TEMPLATE, "clean_up_tokenization_spaces": True,
                "model_max_length": 4096, "tokenizer_class": "PreTrainedTokenizerFast",
                "model_input_names": ["input_ids", "attention_mask"]}
        gen = {"bos_token_id": bos, "eos_token_id": [eos, eot], "do_sample": False}
    else:
        tok, ids = sentencepiece_tokenizer()
        if shp["vocab"] is not None:
            from tokenizers import AddedToken
            n = shp["vocab"] - tok.get_vocab_size()
            tok.add_special_tokens([AddedToken(f"<|reserved_{i}|>", special=True, normalized=False) for i in range(n)])
        bos, eos = 1, 2
        tcfg = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
                "unk_token": "<unk>", "clean_up_tokenization_spaces": False, "legacy": False,
                "model_max_length": 2048, "tokenizer_class": "LlamaTokenizer", "pad_token": None,
                "sp_model_kwargs": {}}
        if kind == "llama":
            tcfg["chat_template"] = LLAMA2_TEMPLATE
        gen = {"bos_token_id": bos, "eos_token_id": eos, "do_sample": False}
    vocab = tok.get_vocab_size()
    if shp["vocab"] is not None and vocab != shp["vocab"]:
        raise RuntimeError(f"tokenizer has {vocab} tokens, the shape wants {shp['vocab']}")
    tcfg["added_tokens_decoder"] = added_tokens_decoder(tok)
    with open(os.path.join(outdir, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(json.loads(tok.to_str()), indent=2, ensure_ascii=False) + "\n")
    dump_json(os.path.join(outdir, "tokenizer_config.json"), dict(sorted(tcfg.items())))
    dump_json(os.path.join(outdir, "generation_config.json"), gen)
    dump_json(os.path.join(outdir, "config.json"), model_config(kind, shp, vocab, bos, eos))
    return vocab


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("outdir")
    ap.add_argument("--kind", required=True, choices=KINDS)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shape", default="mini", choices=sorted(SHAPES))
    ap.add_argument("--shards", type=int, default=1, help="N > 1: model-0000i-of-0000N.safetensors + index")
    ap.add_argument("--no-sub-norms", action="store_true", help="bitnet kind: leave out inner_attn_ln / ffn_layernorm")
    ap.add_argument("--tokenizer-from-gguf", metavar="GGUF",
                    help="llama kind: the byte-level BPE of this GGUF (SmolLM2's) instead of a trained one")
    ap.add_argument("--sentencepiece-model", action="store_true",
                    help="bitnet and llama kinds: a trained SentencePiece tokenizer.model instead of a tokenizer.json")
    a = ap.parse_args(argv)
    if a.sentencepiece_model and a.kind not in ("bitnet", "llama"):
        ap.error("--sentencepiece-model applies to the bitnet and llama kinds")
    if a.tokenizer_from_gguf and a.kind != "llama":
        ap.error("--tokenizer-from-gguf applies to --kind llama only")
    if a.no_sub_norms and a.kind != "bitnet":
        ap.error("--no-sub-norms applies to --kind bitnet only")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.makedirs(a.outdir, exist_ok=True)
    shp = SHAPES[a.shape]
    vocab = write_tokenizer_and_configs(a.outdir, a.kind, shp, a.tokenizer_from_gguf, a.sentencepiece_model)
    tensors = plan(a.kind, shp, vocab, a.seed, not a.no_sub_norms)
    write_weights(a.outdir, tensors, a.shards)
    total = sum(nbytes(t[1], t[2]) for t in tensors)
    print(f"{a.outdir}: {a.kind} {a.shape} seed {a.seed}, vocab {vocab}, {len(tensors)} tensors, "
          f"{total} bytes in {max(1, a.shards)} file(s)")


if __name__ == "__main__":
    sys.exit(main())
