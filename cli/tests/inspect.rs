//! `purebee-rs inspect` on the seven tiny fixtures (JSON and text) and on bad files.
//!
//! The expected tensors, types, dims and parameter counts are derived from the facts in
//! `fixtures/README.md` §1, not from the reader.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_purebee-rs");

const DIM: u64 = 256;
const KV_DIM: u64 = 64; // 2 kv heads × head_dim 32
const FFN: u64 = 512;
const VOCAB: u64 = 8192;
const LAYERS: usize = 4;

/// (file, architecture, linear weight type, token_embd type, general.file_type, scale tensors)
const FIXTURES: [(&str, &str, &str, &str, u64, bool); 7] = [
    ("tiny_b158_i2_s.gguf", "bitnet-b1.58", "I2_S", "F16", 40, false),
    ("tiny_b158_tq2_0.gguf", "bitnet-b1.58", "TQ2_0", "F16", 37, false),
    ("tiny_b158_tq1_0.gguf", "bitnet-b1.58", "TQ1_0", "F16", 36, false),
    ("tiny_b158_f32.gguf", "bitnet-b1.58", "F32", "F32", 0, false),
    ("tiny_bitnet_tq2_0.gguf", "bitnet", "TQ2_0", "F16", 37, false),
    ("tiny_bitnet_f32.gguf", "bitnet", "F32", "F32", 0, false),
    ("tiny_bitnet_tq2_0_scaletensors.gguf", "bitnet", "TQ2_0", "F16", 37, true),
];

fn fixture(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/bitnet-tiny").join(file)
}

fn inspect(path: &Path, json: bool) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.arg("inspect").arg(path);
    if json {
        cmd.arg("--json");
    }
    cmd.output().expect("the binary runs")
}

/// name → (type, ne) of every tensor of a fixture.
fn expected_tensors(linear: &str, embd: &str, scales: bool) -> BTreeMap<String, (String, Vec<u64>)> {
    let mut t = BTreeMap::new();
    t.insert("token_embd.weight".to_string(), (embd.to_string(), vec![DIM, VOCAB]));
    t.insert("output_norm.weight".to_string(), ("F32".to_string(), vec![DIM]));
    for i in 0..LAYERS {
        for (norm, n) in [("attn_norm", DIM), ("attn_sub_norm", DIM), ("ffn_norm", DIM), ("ffn_sub_norm", FFN)] {
            t.insert(format!("blk.{i}.{norm}.weight"), ("F32".to_string(), vec![n]));
        }
        for (name, ne) in [
            ("attn_q", [DIM, DIM]),
            ("attn_k", [DIM, KV_DIM]),
            ("attn_v", [DIM, KV_DIM]),
            ("attn_output", [DIM, DIM]),
            ("ffn_gate", [DIM, FFN]),
            ("ffn_up", [DIM, FFN]),
            ("ffn_down", [FFN, DIM]),
        ] {
            t.insert(format!("blk.{i}.{name}.weight"), (linear.to_string(), ne.to_vec()));
            if scales {
                t.insert(format!("blk.{i}.{name}.scale"), ("F32".to_string(), vec![1]));
            }
        }
    }
    t
}

fn bytes_of(ty: &str, n: u64) -> u64 {
    match ty {
        "F32" => 4 * n,
        "F16" => 2 * n,
        "TQ2_0" => n / 256 * 66,
        "TQ1_0" => n / 256 * 54,
        "I2_S" => n / 4 + 32,
        other => panic!("no fixture uses {other}"),
    }
}

fn u64_of(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a u64: {v}"))
}

#[test]
fn json_lists_every_tensor_with_the_readme_type_and_dims() {
    // Per layer: q, o 256×256; k, v 256×64; gate, up, down 256×512; norms 3×256 + 512.
    let per_layer = 2 * DIM * DIM + 2 * DIM * KV_DIM + 3 * DIM * FFN + 3 * DIM + FFN;
    for (file, arch, linear, embd, file_type, scales) in FIXTURES {
        let path = fixture(file);
        let out = inspect(&path, true);
        assert!(out.status.success(), "{file}: {}", String::from_utf8_lossy(&out.stderr));
        let j: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");

        assert_eq!(j["file"], path.display().to_string());
        assert_eq!(j["version"], 3, "{file}");
        assert_eq!(j["architecture"], arch, "{file}");
        assert_eq!(j["alignment"], 32, "{file}");
        assert_eq!(u64_of(&j["data_offset"]) % 32, 0, "{file}");

        let m = &j["metadata"];
        assert_eq!(m["general.file_type"], serde_json::json!({"type": "u32", "value": file_type}), "{file}");
        assert_eq!(m[format!("{arch}.embedding_length")]["value"], 256, "{file}");
        assert_eq!(m[format!("{arch}.block_count")]["value"], 4, "{file}");
        assert_eq!(m[format!("{arch}.attention.head_count")]["value"], 8, "{file}");
        assert_eq!(m[format!("{arch}.attention.head_count_kv")]["value"], 2, "{file}");
        assert_eq!(m[format!("{arch}.feed_forward_length")]["value"], 512, "{file}");
        assert_eq!(
            m[format!("{arch}.rope.freq_base")],
            serde_json::json!({"type": "f32", "value": 500000.0}),
            "{file}"
        );
        assert_eq!(m["general.architecture"], serde_json::json!({"type": "string", "value": arch}), "{file}");
        let tokens = &m["tokenizer.ggml.tokens"];
        assert_eq!(tokens["type"], "array", "{file}");
        assert_eq!(tokens["elem_type"], "string", "{file}");
        assert_eq!(tokens["len"], 8192, "{file}");
        assert_eq!(tokens["head"].as_array().map(Vec::len), Some(8), "{file}");
        assert_eq!(tokens["head"][0], "<|endoftext|>", "{file}");
        assert_eq!(tokens["head"][2], "<|im_end|>", "{file}");

        let tensors = j["tensors"].as_array().expect("array");
        let got: BTreeMap<String, (String, Vec<u64>)> = tensors
            .iter()
            .map(|t| {
                let ne = t["ne"].as_array().expect("ne").iter().map(u64_of).collect();
                (t["name"].as_str().expect("name").to_string(), (t["type"].as_str().expect("type").to_string(), ne))
            })
            .collect();
        assert_eq!(got.len(), tensors.len(), "{file}: duplicate names");
        assert_eq!(got, expected_tensors(linear, embd, scales), "{file}");

        let mut total_bytes = 0;
        for t in tensors {
            let n: u64 = t["ne"].as_array().expect("ne").iter().map(u64_of).product();
            let b = u64_of(&t["bytes"]);
            assert_eq!(b, bytes_of(t["type"].as_str().expect("type"), n), "{file}: {}", t["name"]);
            assert_eq!(u64_of(&t["offset"]) % 32, 0, "{file}: {}", t["name"]);
            total_bytes += b;
        }
        let totals = &j["totals"];
        let n_scales = if scales { 7 * LAYERS as u64 } else { 0 };
        assert_eq!(u64_of(&totals["tensors"]), 46 + n_scales, "{file}");
        assert_eq!(u64_of(&totals["parameters"]), VOCAB * DIM + DIM + LAYERS as u64 * per_layer + n_scales, "{file}");
        assert_eq!(u64_of(&totals["bytes"]), total_bytes, "{file}");
        let linear_params = LAYERS as u64 * (2 * DIM * DIM + 2 * DIM * KV_DIM + 3 * DIM * FFN);
        if linear != "F32" {
            assert_eq!(u64_of(&totals["by_type"][linear]["parameters"]), linear_params, "{file}");
            assert_eq!(u64_of(&totals["by_type"][linear]["tensors"]), 7 * LAYERS as u64, "{file}");
        }
    }
}

#[test]
fn text_output_shows_header_metadata_tensors_and_totals() {
    for (file, arch, linear, _, _, scales) in FIXTURES {
        let path = fixture(file);
        let out = inspect(&path, false);
        assert!(out.status.success(), "{file}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(out.stderr.is_empty(), "{file}");
        let text = String::from_utf8(out.stdout).expect("UTF-8");
        for needle in [
            format!("file:          {}", path.display()),
            "GGUF version:  3".to_string(),
            format!("architecture:  {arch}"),
            "alignment:     32".to_string(),
            "data offset:".to_string(),
            format!("{arch}.embedding_length"),
            "array[string; 8192]".to_string(),
            "(8184 more)".to_string(),
            "ne (ggml order, ne0 first)".to_string(),
            format!("parameters:  {}", if scales { 4_330_780 } else { 4_330_752 }),
        ] {
            assert!(text.contains(&needle), "{file}: no '{needle}' in\n{text}");
        }
        let attn_k = text.lines().find(|l| l.trim_start().starts_with("blk.2.attn_k.weight ")).expect("attn_k row");
        let cols: Vec<&str> = attn_k.split_whitespace().collect();
        assert_eq!(&cols[..4], ["blk.2.attn_k.weight", linear, "[256,", "64]"], "{file}: {attn_k}");
    }
}

/// Runs inspect (text and JSON) on `path`, expects failure and an error naming the file.
fn expect_failure(path: &Path, also: &str) {
    for json in [false, true] {
        let out = inspect(path, json);
        assert!(!out.status.success(), "{} opened", path.display());
        assert!(out.stdout.is_empty(), "nothing on stdout");
        let err = String::from_utf8(out.stderr).expect("UTF-8");
        assert!(err.starts_with(&format!("error: {}: ", path.display())), "{err}");
        assert!(err.contains(also), "{err}");
    }
}

#[test]
fn bad_files_exit_non_zero_with_an_error_naming_the_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bytes = std::fs::read(fixture("tiny_b158_tq2_0.gguf")).expect("fixture");

    let truncated = dir.path().join("truncated.gguf");
    std::fs::write(&truncated, &bytes[..bytes.len() - 100]).expect("write");
    expect_failure(&truncated, "output_norm.weight");

    let header_cut = dir.path().join("header cut.gguf");
    std::fs::write(&header_cut, &bytes[..5000]).expect("write");
    expect_failure(&header_cut, "truncated");

    let mut wrong = bytes[..4096].to_vec();
    wrong[..4].copy_from_slice(b"GGML");
    let wrong_magic = dir.path().join("wrong_magic.gguf");
    std::fs::write(&wrong_magic, &wrong).expect("write");
    expect_failure(&wrong_magic, "not a GGUF file");

    expect_failure(&dir.path().join("missing.gguf"), "cannot read the file");
}

#[test]
fn usage_errors_exit_non_zero() {
    let out = Command::new(BIN).output().expect("runs");
    assert!(!out.status.success());
    let out = Command::new(BIN).args(["inspect"]).output().expect("runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("MODEL"));
    let out = Command::new(BIN).args(["inspect", "--help"]).output().expect("runs");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("--json"));
}
