//! Writes the committed seed corpora under `corpus/<target>/` from the repository's fixtures:
//! `cargo run --example make_corpus` (in `fuzz/`). The same fixtures give the same files.
//!
//! - `gguf`, `model_load`: four tiny models from `purebee-synth` (llama with F32 and with Q8_0/Q4_0/Q4_1 weights,
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

use std::borrow::Cow;
use std::fs;
use std::path::{Path, PathBuf};

use purebee_engine_ref::RefEngine;
use purebee_memory::gguf::{GgufFile, GgufWriter, MetaArray, MetaType, MetaValue};
use purebee_memory::DType;
use purebee_rng::SplitMix64;
use purebee_runtime::tokenizer::Tokenizer;
use purebee_runtime::{LogitsRows, Model};
use purebee_synth::{build, tensor_values, Arch, ModelShape, ModelSpec, PlannedTensor, Role, Vocabulary};

/// The tiny fixture's tokenizer cut to its first `n` tokens (and the merges among them),
/// with its chat template (SmolLM2's).
fn vocabulary(tiny: &GgufFile, n: usize, pre: &str) -> Vocabulary {
    let tokens = tiny.get_str_array("tokenizer.ggml.tokens").expect("tokens");
    let tokens = &tokens[..n];
    let types = tiny.get_i32_array("tokenizer.ggml.token_type").expect("types");
    let kept = |t: &str| tokens.contains(&t);
    let merges = tiny
        .get_str_array("tokenizer.ggml.merges")
        .expect("merges")
        .into_iter()
        .filter(|m| m.split_once(' ').is_some_and(|(l, r)| kept(l) && kept(r) && kept(&format!("{l}{r}"))))
        .map(str::to_string)
        .collect();
    Vocabulary {
        tokens: tokens.iter().map(|t| t.to_string()).collect(),
        types: types[..n].to_vec(),
        merges,
        pre: pre.to_string(),
        bos: 0,
        eos: 2,
        chat_template: Some(tiny.get_str("tokenizer.chat_template").expect("template").to_string()),
    }
}

/// A small model: (architecture, linear, embedding and untied head types, dim, layers,
/// heads, kv heads, ffn, vocabulary, pre-tokenizer).
type Small = (Arch, DType, DType, Option<DType>, usize, usize, usize, usize, usize, usize, &'static str);

fn model(tiny: &GgufFile, name: &'static str, s: Small, seed: u64) -> Vec<u8> {
    let (arch, weights, embedding, output, n_embd, n_layer, n_head, n_kv_head, n_ff, n_vocab, pre) = s;
    let shape = ModelShape {
        name: Cow::Borrowed(name),
        n_vocab,
        n_embd,
        n_layer,
        n_head,
        n_kv_head,
        n_ff,
        n_ctx: 64,
        rope_base: 10000.0,
        rms_eps: 1e-5,
    };
    let vocabulary = vocabulary(tiny, n_vocab, pre);
    let spec = ModelSpec { arch, shape, weights, embedding, output, vocabulary };
    build(&spec, seed).expect("a valid small model").to_bytes()
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
        let cols = dtype.block_len() as u64;
        let t = PlannedTensor { name: format!("t.{}", dtype.name()), dtype, ne: vec![cols, 2], role: Role::Linear };
        let bytes = tensor_values(&t, &mut rng).expect("whole blocks");
        w.add_tensor(&t.name, dtype, &t.ne, bytes).expect("tensor");
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

    let shapes: [(&str, Small); 4] = [
        ("llama_f32", (Arch::Llama, DType::F32, DType::F16, None, 8, 1, 2, 1, 16, 300, "smollm")),
        ("llama_q8_0", (Arch::Llama, DType::Q8_0, DType::Q4_0, Some(DType::Q4_1), 32, 2, 4, 2, 64, 300, "smollm")),
        ("b158_i2_s", (Arch::BitnetB158, DType::I2_S, DType::F16, None, 128, 1, 4, 2, 128, 64, "llama-bpe")),
        ("bitnet_f32", (Arch::Bitnet, DType::F32, DType::BF16, Some(DType::F16), 8, 1, 2, 2, 8, 48, "llama-bpe")),
    ];
    for (i, &(name, shape)) in shapes.iter().enumerate() {
        let bytes = model(&tiny, name, shape, i as u64);
        // Each model seed reaches the end of the `model_load` target: the forward step.
        let f = GgufFile::from_bytes(name, &bytes).expect("seed parses");
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
