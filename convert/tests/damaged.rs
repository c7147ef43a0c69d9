//! A damaged or inconsistent checkpoint is a clear error naming the file and the tensor or
//! key, and leaves nothing at the output path; a sound one converts. The checkpoints are made
//! here, byte by byte: a tiny BitNet b1.58 (one layer, d = 256) with a GPT-2-style tokenizer.

use std::fs;
use std::path::{Path, PathBuf};

use purebee_convert::{convert, ConvertError, Options, OutType};
use serde_json::json;

const D: usize = 256;
const FF: usize = 512;
const VOCAB: usize = 300;

/// The tensors of a one-layer BitNet b1.58: (name, shape), as BF16.
fn tensors() -> Vec<(String, Vec<usize>)> {
    let l = |s: &str| format!("model.layers.0.{s}");
    vec![
        ("model.embed_tokens.weight".into(), vec![VOCAB, D]),
        (l("input_layernorm.weight"), vec![D]),
        (l("self_attn.q_proj.weight"), vec![D, D]),
        (l("self_attn.k_proj.weight"), vec![D / 2, D]),
        (l("self_attn.v_proj.weight"), vec![D / 2, D]),
        (l("self_attn.attn_sub_norm.weight"), vec![D]),
        (l("self_attn.o_proj.weight"), vec![D, D]),
        (l("post_attention_layernorm.weight"), vec![D]),
        (l("mlp.gate_proj.weight"), vec![FF, D]),
        (l("mlp.up_proj.weight"), vec![FF, D]),
        (l("mlp.ffn_sub_norm.weight"), vec![FF]),
        (l("mlp.down_proj.weight"), vec![D, FF]),
        ("model.norm.weight".into(), vec![D]),
    ]
}

/// A safetensors file of `tensors`, BF16 values from a fixed pattern.
fn safetensors(tensors: &[(String, Vec<usize>)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (i, (name, shape)) in tensors.iter().enumerate() {
        let n: usize = shape.iter().product();
        let start = data.len();
        for k in 0..n {
            let v = ((k * 7919 + i * 104729) % 2001) as f32 / 1000.0 - 1.0;
            data.extend(half::bf16::from_f32(v).to_le_bytes());
        }
        header.insert(name.clone(), json!({"dtype": "BF16", "shape": shape, "data_offsets": [start, data.len()]}));
    }
    let mut head = serde_json::to_vec(&serde_json::Value::Object(header)).expect("json");
    while !head.len().is_multiple_of(8) {
        head.push(b' ');
    }
    let mut file = (head.len() as u64).to_le_bytes().to_vec();
    file.extend(head);
    file.extend(data);
    file
}

/// A byte-level BPE vocabulary of VOCAB tokens: the 256 byte characters, merges, specials.
fn tokenizer_json() -> serde_json::Value {
    let bytes: Vec<char> = (0u8..=255).map(byte_char).collect();
    let mut vocab = serde_json::Map::new();
    for (i, c) in bytes.iter().enumerate() {
        vocab.insert(c.to_string(), json!(i));
    }
    let mut merges = Vec::new();
    for i in 0..(VOCAB - 256 - 2) {
        let (a, b) = (bytes[b'a' as usize + i % 26], bytes[b'a' as usize + (i / 26) % 26]);
        let merged = format!("{a}{b}");
        if vocab.contains_key(&merged) {
            continue;
        }
        vocab.insert(merged, json!(vocab.len()));
        merges.push(format!("{a} {b}"));
    }
    let n = vocab.len();
    json!({
        "added_tokens": [
            {"id": n, "content": "<|begin_of_text|>", "special": true},
            {"id": n + 1, "content": "<|end_of_text|>", "special": true},
        ],
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "vocab": vocab, "merges": merges},
    })
}

/// GPT-2's printable character for byte `b`.
fn byte_char(b: u8) -> char {
    let printable = (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
    if printable {
        return char::from(b);
    }
    let shifted = (0u8..b)
        .filter(|&x| !((b'!'..=b'~').contains(&x) || (0xA1..=0xAC).contains(&x) || (0xAE..=0xFF).contains(&x)))
        .count();
    char::from_u32(256 + shifted as u32).expect("a char")
}

/// A sound checkpoint folder in `dir`.
fn checkpoint(dir: &Path) {
    let config = json!({
        "architectures": ["BitNetForCausalLM"], "hidden_act": "relu2", "hidden_size": D,
        "intermediate_size": FF, "num_hidden_layers": 1, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": VOCAB, "max_position_embeddings": 512,
        "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": true,
    });
    fs::write(dir.join("config.json"), config.to_string()).expect("write");
    fs::write(dir.join("model.safetensors"), safetensors(&tensors())).expect("write");
    fs::write(dir.join("tokenizer.json"), tokenizer_json().to_string()).expect("write");
    let tc = json!({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>", "add_bos_token": true});
    fs::write(dir.join("tokenizer_config.json"), tc.to_string()).expect("write");
}

fn options() -> Options {
    Options { outtype: OutType::Tq2_0, embedding: None, force_ternary: false, name: None }
}

/// Converts `dir` into a fresh output path; returns the path and the result.
fn run(dir: &Path) -> (PathBuf, Result<purebee_convert::Summary, ConvertError>) {
    let out = dir.join("out.gguf");
    let _ = fs::remove_file(&out);
    let r = convert(dir, &out, &options());
    (out, r)
}

/// Damages a sound checkpoint with `damage`, converts, and checks that the error says
/// each of `says` and that nothing was left at the output path (nor a temporary file).
fn refused(damage: impl FnOnce(&Path), says: &[&str]) {
    let dir = tempfile::tempdir().expect("tempdir");
    checkpoint(dir.path());
    damage(dir.path());
    let (out, r) = run(dir.path());
    let e = match r {
        Ok(_) => panic!("converted a damaged checkpoint (wanted an error saying {says:?})"),
        Err(e) => e.to_string(),
    };
    for s in says {
        assert!(e.contains(s), "error {e:?} does not say {s:?}");
    }
    assert!(!out.exists(), "{e}: an output file was left");
    let left: Vec<_> = fs::read_dir(dir.path()).expect("list").filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
    assert!(left.iter().all(|n| !n.to_string_lossy().contains("out.gguf")), "{e}: left {left:?}");
}

#[test]
fn a_sound_checkpoint_converts() {
    let dir = tempfile::tempdir().expect("tempdir");
    checkpoint(dir.path());
    let (out, r) = run(dir.path());
    let s = r.expect("converts");
    assert_eq!((s.arch, s.tensors, s.ternary), ("bitnet-b1.58", 13, 7));
    let g = purebee_memory::gguf::GgufFile::open(&out).expect("reads back");
    assert_eq!(g.get_str("general.architecture").expect("arch"), "bitnet-b1.58");
    assert_eq!(g.get_str("tokenizer.ggml.pre").expect("pre"), "gpt-2");
}

#[test]
fn a_truncated_file_names_the_tensor() {
    refused(
        |d| {
            let p = d.join("model.safetensors");
            let bytes = fs::read(&p).expect("read");
            fs::write(&p, &bytes[..bytes.len() - 100]).expect("write");
        },
        &["model.safetensors", "model.norm.weight", "truncated"],
    );
}

#[test]
fn a_huge_header_is_refused() {
    refused(
        |d| {
            let p = d.join("model.safetensors");
            let mut bytes = fs::read(&p).expect("read");
            bytes[..8].copy_from_slice(&(1u64 << 40).to_le_bytes());
            fs::write(&p, bytes).expect("write");
        },
        &["model.safetensors", "header claims"],
    );
}

#[test]
fn a_shape_against_the_config_names_the_tensor() {
    refused(
        |d| {
            let mut t = tensors();
            t[3].1 = vec![D, D];
            fs::write(d.join("model.safetensors"), safetensors(&t)).expect("write");
        },
        &["model.layers.0.self_attn.k_proj.weight", "config.json implies [128, 256]"],
    );
}

#[test]
fn a_missing_tensor_is_named() {
    refused(
        |d| {
            let mut t = tensors();
            t.retain(|(n, _)| !n.ends_with("ffn_sub_norm.weight"));
            fs::write(d.join("model.safetensors"), safetensors(&t)).expect("write");
        },
        &["model.layers.0.mlp.ffn_sub_norm.weight", "missing"],
    );
}

#[test]
fn an_unknown_tensor_is_named() {
    refused(
        |d| {
            let mut t = tensors();
            t.push(("model.layers.0.self_attn.q_norm.weight".into(), vec![D]));
            fs::write(d.join("model.safetensors"), safetensors(&t)).expect("write");
        },
        &["model.layers.0.self_attn.q_norm.weight", "not a tensor of bitnet-b1.58"],
    );
}

#[test]
fn a_missing_shard_is_named() {
    refused(
        |d| {
            fs::remove_file(d.join("model.safetensors")).expect("rm");
            let map: serde_json::Map<String, serde_json::Value> =
                tensors().into_iter().map(|(n, _)| (n, json!("model-00001-of-00002.safetensors"))).collect();
            let index = json!({"metadata": {}, "weight_map": map});
            fs::write(d.join("model.safetensors.index.json"), index.to_string()).expect("write");
        },
        &["model-00001-of-00002.safetensors", "missing"],
    );
}

#[test]
fn an_unknown_architecture_is_named() {
    refused(
        |d| {
            let p = d.join("config.json");
            let text = fs::read_to_string(&p).expect("read").replace("BitNetForCausalLM", "MistralForCausalLM");
            fs::write(p, text).expect("write");
        },
        &["config.json", "MistralForCausalLM", "not supported"],
    );
}

#[test]
fn a_tokenizer_it_cannot_carry_is_named() {
    refused(
        |d| {
            let p = d.join("tokenizer.json");
            let text = fs::read_to_string(&p).expect("read").replace("\"type\":\"BPE\"", "\"type\":\"Unigram\"");
            fs::write(p, text).expect("write");
        },
        &["tokenizer.json", "Unigram"],
    );
}
