//! Writes the committed seed corpora under `corpus/<target>/` from the repository's fixtures:
//! `cargo run --example make_corpus` (in `fuzz/`). The same fixtures give the same files.
//!
//! - `gguf`, `model_load`: four tiny models (llama with F32 and with Q8_0/Q4_0/Q4_1 weights,
//!   bitnet-b1.58 with I2_S, bitnet with F32 and sub-norms), each with a vocabulary cut from
//!   the tiny fixtures' (its first tokens and the merges among them) and SmolLM2's chat
//!   template; `gguf` also gets a file with every metadata type, one with a tensor of every
//!   dtype, GGUF v2, a 64-byte alignment and truncated files.
//! - `tokenizer`: the texts of `fixtures/tokenizer/tokenizer_cases.json` under several
//!   selector bytes.
//! - `chat_template`: real templates with conversations, in the target's plain format.
//!
//! The `program` corpus is not written here: it is a `-merge=1` of a short fuzzing run (its
//! input is `arbitrary`'s encoding, which has no writer).

use std::fs;
use std::path::{Path, PathBuf};

use purebee_memory::gguf::{GgufFile, GgufWriter, MetaArray, MetaType, MetaValue};
use purebee_rng::SplitMix64;
use purebee_engine_ref::RefEngine;
use purebee_memory::DType;
use purebee_runtime::tokenizer::Tokenizer;
use purebee_runtime::{LogitsRows, Model};

/// Draws for reproducible weights, from the one SplitMix64 stream.
trait Draws {
    /// `n` random bytes.
    fn bytes(&mut self, n: usize) -> Vec<u8>;
    /// An f16 of magnitude 2^-5 .. 2^-4 with a random sign: a sane weight or block scale.
    fn f16(&mut self) -> [u8; 2];
}

impl Draws for SplitMix64 {
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.byte()).collect()
    }

    fn f16(&mut self) -> [u8; 2] {
        let r = self.next_u64();
        ((0x2800 | (r & 0x3ff) | ((r >> 10) & 1) << 15) as u16).to_le_bytes()
    }
}

/// `rows × cols` elements of `dtype`: random codes with sane scales.
fn weights(rng: &mut SplitMix64, dtype: DType, rows: usize, cols: usize) -> Vec<u8> {
    let n = dtype.tensor_bytes(rows, cols).expect("small tensor");
    let mut b = rng.bytes(n);
    let (block, scale_at) = match dtype {
        DType::F32 | DType::BF16 => {
            let values = (0..rows * cols).map(|_| (rng.next_u64() % 2001) as f32 / 10000.0 - 0.1);
            return match dtype {
                DType::F32 => values.flat_map(f32::to_le_bytes).collect(),
                _ => values.flat_map(|v| ((v.to_bits() >> 16) as u16).to_le_bytes()).collect(),
            };
        }
        DType::F16 => (2, 0),
        DType::Q4_0 | DType::Q4_1 | DType::Q8_0 => (dtype.block_bytes(), 0),
        DType::TQ1_0 | DType::TQ2_0 => (dtype.block_bytes(), dtype.block_bytes() - 2),
        DType::I2_S => {
            let trailer = b.len() - 32;
            for c in b[trailer..].chunks_mut(4) {
                c.copy_from_slice(&0.05f32.to_le_bytes());
            }
            return b;
        }
        _ => return b,
    };
    for chunk in b.chunks_mut(block) {
        chunk[scale_at..scale_at + 2].copy_from_slice(&rng.f16());
        if dtype == DType::Q4_1 {
            chunk[2..4].copy_from_slice(&rng.f16());
        }
    }
    b
}

struct Shape {
    arch: &'static str,
    weight: DType,
    embd: DType,
    output: Option<DType>,
    d: usize,
    layers: usize,
    heads: usize,
    kv_heads: usize,
    ff: usize,
    vocab: usize,
    pre: &'static str,
}

/// The tokenizer keys of the tiny fixture cut to its first `n` tokens, and its template.
fn vocabulary(w: &mut GgufWriter, tiny: &GgufFile, n: usize, pre: &str) {
    let tokens = tiny.get_str_array("tokenizer.ggml.tokens").expect("tokens");
    let tokens = &tokens[..n];
    let types = tiny.get_i32_array("tokenizer.ggml.token_type").expect("types");
    let kept = |t: &str| tokens.contains(&t);
    let merges: Vec<&str> = tiny
        .get_str_array("tokenizer.ggml.merges")
        .expect("merges")
        .into_iter()
        .filter(|m| m.split_once(' ').is_some_and(|(l, r)| kept(l) && kept(r) && kept(&format!("{l}{r}"))))
        .collect();
    w.add_str("tokenizer.ggml.model", "gpt2").expect("key");
    w.add_str("tokenizer.ggml.pre", pre).expect("key");
    w.add_str_array("tokenizer.ggml.tokens", tokens.iter().copied()).expect("key");
    w.add("tokenizer.ggml.token_type", MetaArray::of_i32(types[..n].iter().copied())).expect("key");
    w.add_str_array("tokenizer.ggml.merges", merges).expect("key");
    w.add_u32("tokenizer.ggml.bos_token_id", 0).expect("key");
    w.add_u32("tokenizer.ggml.eos_token_id", 2).expect("key");
    w.add_bool("tokenizer.ggml.add_bos_token", true).expect("key");
    let template = tiny.get_str("tokenizer.chat_template").expect("template");
    w.add_str("tokenizer.chat_template", template).expect("key");
}

fn model(tiny: &GgufFile, s: &Shape, seed: u64) -> Vec<u8> {
    let mut rng = SplitMix64(seed);
    let mut w = GgufWriter::new();
    let a = s.arch;
    w.add_str("general.architecture", a).expect("key");
    for (k, v) in [
        ("context_length", 64),
        ("embedding_length", s.d),
        ("block_count", s.layers),
        ("feed_forward_length", s.ff),
        ("attention.head_count", s.heads),
        ("attention.head_count_kv", s.kv_heads),
        ("rope.dimension_count", s.d / s.heads),
        ("vocab_size", s.vocab),
    ] {
        w.add_u32(&format!("{a}.{k}"), v as u32).expect("key");
    }
    w.add_f32(&format!("{a}.attention.layer_norm_rms_epsilon"), 1e-5).expect("key");
    w.add_f32(&format!("{a}.rope.freq_base"), 10000.0).expect("key");
    vocabulary(&mut w, tiny, s.vocab, s.pre);

    let kv = s.d / s.heads * s.kv_heads;
    let mut tensor = |w: &mut GgufWriter, name: &str, dtype: DType, cols: usize, rows: usize| {
        let bytes = weights(&mut rng, dtype, rows, cols);
        w.add_tensor(name, dtype, &[cols as u64, rows as u64], bytes).expect("tensor");
    };
    let norm = |w: &mut GgufWriter, name: &str, n: usize| {
        w.add_f32_tensor(name, &[n as u64], &vec![1.0; n]).expect("tensor");
    };
    tensor(&mut w, "token_embd.weight", s.embd, s.d, s.vocab);
    let sub = a.starts_with("bitnet");
    for l in 0..s.layers {
        let n = |r: &str| format!("blk.{l}.{r}");
        norm(&mut w, &n("attn_norm.weight"), s.d);
        tensor(&mut w, &n("attn_q.weight"), s.weight, s.d, s.d);
        tensor(&mut w, &n("attn_k.weight"), s.weight, s.d, kv);
        tensor(&mut w, &n("attn_v.weight"), s.weight, s.d, kv);
        if sub {
            norm(&mut w, &n("attn_sub_norm.weight"), s.d);
        }
        tensor(&mut w, &n("attn_output.weight"), s.weight, s.d, s.d);
        norm(&mut w, &n("ffn_norm.weight"), s.d);
        tensor(&mut w, &n("ffn_gate.weight"), s.weight, s.d, s.ff);
        tensor(&mut w, &n("ffn_up.weight"), s.weight, s.d, s.ff);
        if sub {
            norm(&mut w, &n("ffn_sub_norm.weight"), s.ff);
        }
        tensor(&mut w, &n("ffn_down.weight"), s.weight, s.ff, s.d);
    }
    norm(&mut w, "output_norm.weight", s.d);
    if let Some(dtype) = s.output {
        tensor(&mut w, "output.weight", dtype, s.d, s.vocab);
    }
    w.to_bytes()
}

/// Every metadata value type, nested arrays included, and no tensors.
fn all_metadata_types() -> Vec<u8> {
    let mut w = GgufWriter::new();
    let values: [(&str, MetaValue); 13] = [
        ("u8", MetaValue::U8(200)),
        ("i8", MetaValue::I8(-100)),
        ("u16", MetaValue::U16(60000)),
        ("i16", MetaValue::I16(-30000)),
        ("u32", MetaValue::U32(4_000_000_000)),
        ("i32", MetaValue::I32(-2_000_000_000)),
        ("f32", MetaValue::F32(0.5)),
        ("bool", MetaValue::Bool(true)),
        ("string", MetaValue::String("héllo".into())),
        ("u64", MetaValue::U64(u64::MAX)),
        ("i64", MetaValue::I64(i64::MIN)),
        ("f64", MetaValue::F64(-1e300)),
        (
            "array",
            MetaValue::Array(MetaArray::new(
                MetaType::Array,
                vec![MetaValue::Array(MetaArray::of_u32([1, 2])), MetaValue::Array(MetaArray::of_f32([]))],
            ).expect("one element type")),
        ),
    ];
    for (k, v) in values {
        w.add(&format!("test.{k}"), v).expect("key");
    }
    w.add("test.strings", MetaArray::of_strings(["a", "", "ü"])).expect("key");
    w.add_str("general.architecture", "llama").expect("key");
    w.to_bytes()
}

/// One small tensor of every storable dtype.
fn all_dtypes() -> Vec<u8> {
    let mut rng = SplitMix64(7);
    let mut w = GgufWriter::new();
    for dtype in purebee_memory::ALL_DTYPES.into_iter().filter(|d| d.gguf_type_id().is_some()) {
        let cols = dtype.block_len();
        let bytes = weights(&mut rng, dtype, 2, cols);
        w.add_tensor(&format!("t.{}", dtype.name()), dtype, &[cols as u64, 2], bytes).expect("tensor");
    }
    w.add_tensor("t.3d", DType::F32, &[2, 1, 3], vec![0; 24]).expect("tensor");
    w.to_bytes()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    fs::create_dir_all(dir).expect("corpus dir");
    fs::write(dir.join(name), bytes).expect("corpus file");
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let corpus = root.join("corpus");
    let tiny = GgufFile::open(purebee_fuzz::tiny_fixture()).expect("tiny fixture");

    let shapes = [
        ("llama_f32", Shape { arch: "llama", weight: DType::F32, embd: DType::F16, output: None, d: 8, layers: 1, heads: 2, kv_heads: 1, ff: 16, vocab: 300, pre: "smollm" }),
        ("llama_q8_0", Shape { arch: "llama", weight: DType::Q8_0, embd: DType::Q4_0, output: Some(DType::Q4_1), d: 32, layers: 2, heads: 4, kv_heads: 2, ff: 64, vocab: 300, pre: "smollm" }),
        ("b158_i2_s", Shape { arch: "bitnet-b1.58", weight: DType::I2_S, embd: DType::F16, output: None, d: 128, layers: 1, heads: 4, kv_heads: 2, ff: 128, vocab: 64, pre: "llama-bpe" }),
        ("bitnet_f32", Shape { arch: "bitnet", weight: DType::F32, embd: DType::BF16, output: Some(DType::F16), d: 8, layers: 1, heads: 2, kv_heads: 2, ff: 8, vocab: 48, pre: "llama-bpe" }),
    ];
    for (i, (name, shape)) in shapes.iter().enumerate() {
        let bytes = model(&tiny, shape, i as u64);
        // Each model seed reaches the end of the `model_load` target: the forward step.
        let f = GgufFile::from_bytes(*name, &bytes).expect("seed parses");
        let mut m = Model::load(RefEngine::new(), &f).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut s = m.new_session(4).unwrap_or_else(|e| panic!("{name}: {e}"));
        let logits = m.forward(&mut s, &[0, 1], 0, LogitsRows::All).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(logits.iter().all(|v| v.is_finite()), "{name}: logits not finite");
        Tokenizer::from_gguf(&f).unwrap_or_else(|e| panic!("{name}: {e}"));
        write(&corpus.join("model_load"), &format!("{name}.gguf"), &bytes);
        write(&corpus.join("gguf"), &format!("{name}.gguf"), &bytes);
        if i == 0 {
            write(&corpus.join("gguf"), "truncated_header.gguf", &bytes[..40]);
            write(&corpus.join("gguf"), "truncated_data.gguf", &bytes[..f.data_offset() as usize + 10]);
            let mut v2 = bytes.clone();
            v2[4] = 2;
            write(&corpus.join("gguf"), "llama_f32_v2.gguf", &v2);
        }
    }
    write(&corpus.join("gguf"), "all_metadata_types.gguf", &all_metadata_types());
    write(&corpus.join("gguf"), "all_dtypes.gguf", &all_dtypes());
    let mut aligned = GgufWriter::new();
    aligned.add_u32("general.alignment", 64).expect("key");
    aligned.add_tensor("x", DType::F16, &[4], vec![0x3c; 8]).expect("tensor");
    write(&corpus.join("gguf"), "alignment_64.gguf", &aligned.to_bytes());

    let cases: serde_json::Value = serde_json::from_slice(
        &fs::read(purebee_fuzz::fixtures_dir().join("tokenizer/tokenizer_cases.json")).expect("tokenizer cases"),
    )
    .expect("json");
    let texts: Vec<&str> = cases["cases"].as_array().expect("cases").iter().filter_map(|c| c["text"].as_str()).collect();
    let mut texts = texts;
    texts.sort_unstable();
    texts.dedup();
    for (i, text) in texts.iter().enumerate() {
        // Vocabulary i modulo their count (the target takes selector >> 2), every flag pair.
        let selector = ((i as u8) << 2) | (i as u8 & 3);
        write(&corpus.join("tokenizer"), &format!("case{i:02}"), &[&[selector], text.as_bytes()].concat());
    }

    let smollm2 = tiny.get_str("tokenizer.chat_template").expect("template");
    let conversations: [&[&str]; 4] = [
        &["user", "What is the capital of France?"],
        &["system", "Be brief.", "user", "Hi", "assistant", " Hello! ", "user", "And Germany?"],
        &["assistant", "first", "assistant", "second"],
        &[],
    ];
    let chat = corpus.join("chat_template");
    for template in 0..3u8 {
        for (c, conv) in conversations.iter().enumerate() {
            let mode = template << 2 | (c as u8 & 1);
            write(&chat, &format!("real{template}_{c}"), &[&[mode], conv.join("\0").as_bytes()].concat());
        }
    }
    let random_sources = [
        smollm2,
        "{% macro m(x) %}{{ x | upper }}{% endmacro %}{% for msg in messages %}{{ m(msg.content) }}{{ loop.index }}{% endfor %}",
        "{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}{{ messages | length }}",
        "{{ messages[0]['content'].split(' ') | join('-') }}{% if add_generation_prompt %}{{ bos_token ~ eos_token }}{% endif %}",
    ];
    for (i, source) in random_sources.iter().enumerate() {
        let fields = [source, "user", "hello there", "assistant", "hi"].join("\0");
        write(&chat, &format!("random{i}"), &[&[2u8 | (i as u8 & 1)], fields.as_bytes()].concat());
    }
    println!("corpora written under {}", corpus.display());
}
