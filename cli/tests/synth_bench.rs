//! `purebee-rs synth` and `bench` end to end on the tiny shape: determinism per seed, the
//! tensor table and metadata as `inspect --json` reads them back, `run` and `bench` on the
//! synthetic file, and clear errors for bad flags and outputs.
//!
//! The expected tensors are derived from the tiny shape (dim 256, 4 layers, 8 heads / 2 kv
//! heads of 32, ffn 512, vocab 8192), not from the writer. No test asserts a timing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_purebee-rs");

const DIM: u64 = 256;
const KV_DIM: u64 = 64;
const FFN: u64 = 512;
const VOCAB: u64 = 8192;
const LAYERS: usize = 4;

/// (`--weights`, dtype name in `inspect`, `general.file_type`)
const FORMATS: [(&str, &str, u64); 3] = [("i2_s", "I2_S", 40), ("tq2_0", "TQ2_0", 37), ("tq1_0", "TQ1_0", 36)];

fn purebee(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("the binary runs")
}

fn ok(args: &[&str]) -> Output {
    let o = purebee(args);
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    o
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

/// Writes a tiny synthetic model and returns its path.
fn synth(dir: &Path, name: &str, weights: &str, seed: u64) -> PathBuf {
    let out = dir.join(name);
    let seed = seed.to_string();
    ok(&["synth", "--shape", "tiny", "--weights", weights, "--seed", &seed, "--out", s(&out)]);
    out
}

/// (name, type, ne) of every tensor of the tiny shape with linear weights of `linear`.
fn expected_tensors(linear: &str) -> Vec<(String, String, Vec<u64>)> {
    let t = |n: &str, ty: &str, ne: &[u64]| (n.to_string(), ty.to_string(), ne.to_vec());
    let mut out = vec![t("token_embd.weight", "F16", &[DIM, VOCAB])];
    for l in 0..LAYERS {
        let n = |s: &str| format!("blk.{l}.{s}.weight");
        out.extend([
            t(&n("attn_norm"), "F32", &[DIM]),
            t(&n("attn_q"), linear, &[DIM, DIM]),
            t(&n("attn_k"), linear, &[DIM, KV_DIM]),
            t(&n("attn_v"), linear, &[DIM, KV_DIM]),
            t(&n("attn_sub_norm"), "F32", &[DIM]),
            t(&n("attn_output"), linear, &[DIM, DIM]),
            t(&n("ffn_norm"), "F32", &[DIM]),
            t(&n("ffn_gate"), linear, &[DIM, FFN]),
            t(&n("ffn_up"), linear, &[DIM, FFN]),
            t(&n("ffn_sub_norm"), "F32", &[FFN]),
            t(&n("ffn_down"), linear, &[FFN, DIM]),
        ]);
    }
    out.push(t("output_norm.weight", "F32", &[DIM]));
    out
}

#[test]
fn the_same_seed_gives_the_same_bytes_and_another_seed_other_bytes() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (weights, _, _) in FORMATS {
        let a = std::fs::read(synth(dir.path(), &format!("{weights}_a.gguf"), weights, 5)).expect("a");
        let b = std::fs::read(synth(dir.path(), &format!("{weights}_b.gguf"), weights, 5)).expect("b");
        let c = std::fs::read(synth(dir.path(), &format!("{weights}_c.gguf"), weights, 6)).expect("c");
        assert!(a == b, "{weights}: seed 5 twice gave different files");
        assert_eq!(a.len(), c.len(), "{weights}: the layout does not depend on the seed");
        // Differ in the tensor data, not only in the seed key: count differing bytes.
        let differing = a.iter().zip(&c).filter(|(x, y)| x != y).count();
        assert!(differing > a.len() / 4, "{weights}: seeds 5 and 6 differ in only {differing} bytes");
    }
    // Nothing but the outputs is left in the directory (no temporary files).
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .collect();
    names.sort();
    assert_eq!(names.len(), 9, "{names:?}");
    assert!(names.iter().all(|n| n.ends_with(".gguf")), "{names:?}");
}

#[test]
fn inspect_reads_back_every_tensor_and_the_synthetic_keys() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (weights, linear, file_type) in FORMATS {
        let model = synth(dir.path(), "m.gguf", weights, 77);
        let o = ok(&["inspect", s(&model), "--json"]);
        let j: Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
        let got: Vec<(String, String, Vec<u64>)> = j["tensors"]
            .as_array()
            .expect("tensors")
            .iter()
            .map(|t| {
                let ne = t["ne"].as_array().expect("ne").iter().map(|d| d.as_u64().expect("dim")).collect();
                (t["name"].as_str().expect("name").into(), t["type"].as_str().expect("type").into(), ne)
            })
            .collect();
        assert_eq!(got, expected_tensors(linear), "{weights}");
        let meta = |k: &str| j["metadata"][k]["value"].clone();
        assert_eq!(j["architecture"], "bitnet-b1.58");
        assert_eq!(meta("general.synthetic"), Value::Bool(true), "{weights}");
        assert_eq!(j["metadata"]["synthetic.seed"]["type"], "u64");
        assert_eq!(meta("synthetic.seed"), 77);
        assert_eq!(meta("general.file_type"), file_type, "{weights}");
        assert_eq!(meta("bitnet-b1.58.embedding_length"), DIM);
        assert_eq!(meta("bitnet-b1.58.block_count"), LAYERS as u64);
        assert_eq!(meta("bitnet-b1.58.attention.head_count"), 8);
        assert_eq!(meta("bitnet-b1.58.attention.head_count_kv"), 2);
        assert_eq!(meta("bitnet-b1.58.feed_forward_length"), FFN);
        assert_eq!(meta("bitnet-b1.58.vocab_size"), VOCAB);
        assert_eq!(meta("bitnet-b1.58.rope.freq_base"), 500000.0);
        assert_eq!(meta("tokenizer.ggml.model"), "gpt2");
        assert_eq!(meta("tokenizer.ggml.pre"), "default");
        assert_eq!(j["metadata"]["tokenizer.ggml.tokens"]["len"], VOCAB);
        assert_eq!(j["metadata"]["tokenizer.ggml.merges"]["len"], 0);
        // The byte tokens in GPT-2's alphabet: byte 0 is U+0100, "!" is itself.
        let head = &j["metadata"]["tokenizer.ggml.tokens"]["head"];
        assert_eq!((head[0].as_str(), head[1].as_str()), (Some("\u{100}"), Some("\u{101}")));
    }
}

#[test]
fn the_synthetic_model_runs_from_ids_and_from_text() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (weights, _, _) in FORMATS {
        let model = synth(dir.path(), "m.gguf", weights, 3);
        let m = s(&model);
        let o = ok(&["run", m, "--tokens", "1,2,3", "-n", "4", "--temp", "0", "--engine", "ref", "--output", "json"]);
        let j: Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
        let generated = j["generated_ids"].as_array().expect("generated_ids");
        assert!(!generated.is_empty() && generated.len() <= 4, "{weights}: {generated:?}");
        assert!(generated.iter().all(|id| id.as_u64().is_some_and(|id| id < VOCAB)));
        // Text encodes to BOS and one token per byte.
        let o = ok(&["run", m, "-p", "Hi!", "-n", "2", "--temp", "0", "--engine", "ref", "--output", "json"]);
        let j: Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
        assert_eq!(j["prompt_ids"], serde_json::json!([256, 72, 105, 33]), "{weights}");
    }
}

#[test]
fn bench_prints_every_figure_as_json_and_a_table_as_text() {
    let dir = tempfile::tempdir().expect("temp dir");
    let model = synth(dir.path(), "m.gguf", "i2_s", 1);
    let m = s(&model);
    let o = ok(&["bench", m, "-p", "8", "-n", "4", "--repetitions", "2", "--engine", "ref", "--output", "json"]);
    let j: Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    assert_eq!(j["engine"], "ref");
    assert_eq!(j["model"], m);
    assert_eq!((j["n_prompt"].as_u64(), j["n_gen"].as_u64(), j["repetitions"].as_u64()), (Some(8), Some(4), Some(2)));
    assert_eq!(j["n_ctx"], 12);
    assert_eq!(j["shape"]["n_vocab"], VOCAB);
    assert_eq!(j["shape"]["n_layer"], LAYERS as u64);
    assert_eq!(j["shape"]["linear_type"], "I2_S");
    for (phase, tokens) in [("prefill", 8), ("decode", 4)] {
        let p = &j[phase];
        assert_eq!(p["tokens"], tokens, "{phase}");
        for key in ["tokens_per_s_median", "tokens_per_s_min", "tokens_per_s_max", "ms_per_token_median"] {
            assert!(p[key].as_f64().is_some_and(|v| v.is_finite() && v > 0.0), "{phase}.{key}: {}", p[key]);
        }
        let seconds = p["seconds"].as_array().expect("raw seconds");
        let rates = p["tokens_per_s"].as_array().expect("raw tokens/s");
        assert_eq!((seconds.len(), rates.len()), (2, 2), "{phase}");
        let (min, max) = (p["tokens_per_s_min"].as_f64().expect("min"), p["tokens_per_s_max"].as_f64().expect("max"));
        let median = p["tokens_per_s_median"].as_f64().expect("median");
        assert!(min <= median && median <= max, "{phase}: {min} {median} {max}");
    }
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("warm-up") && stderr.contains("repetition 2/2"), "{stderr}");

    // Only a decode phase: prefill is null.
    let o = ok(&["bench", m, "-p", "0", "-n", "2", "-r", "1", "--engine", "ref", "--output", "json"]);
    let j: Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    assert!(j["prefill"].is_null() && j["decode"]["tokens"] == 2);

    let o = ok(&["bench", m, "-p", "4", "-n", "2", "-r", "1", "--engine", "ref"]);
    let text = String::from_utf8(o.stdout).expect("utf-8");
    assert!(text.contains("engine:  ref") && text.contains("linear I2_S"), "{text}");
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("prefill") || l.starts_with("decode")).collect();
    assert_eq!(rows.len(), 2, "{text}");
}

#[test]
fn no_mmap_reads_the_file_and_generates_the_same_tokens() {
    let dir = tempfile::tempdir().expect("temp dir");
    let model = synth(dir.path(), "m.gguf", "tq2_0", 5);
    let m = s(&model);
    let run = |extra: &[&str]| {
        let mut args = vec!["run", m, "--tokens", "1,2,3", "-n", "4", "--temp", "0", "--engine", "cpu", "-v"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--output", "json"]);
        let o = ok(&args);
        let j: Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
        (j["generated_ids"].clone(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let ((mapped, mapped_err), (read, read_err)) = (run(&[]), run(&["--no-mmap"]));
    assert_eq!(mapped, read);
    assert!(mapped_err.contains("purebee-rs: mapped "), "{mapped_err}");
    assert!(read_err.contains("purebee-rs: read "), "{read_err}");
}

#[test]
fn layers_changes_only_the_layer_count() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("deep.gguf");
    let o = ok(&["synth", "--shape", "tiny", "--layers", "7", "--out", s(&out)]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(": tiny-bitnet-b1.58-256x4-7-layers, 7 layers (I2_S), 79 tensors"),
        "{o:?}"
    );
    let o = ok(&["inspect", s(&out), "--json"]);
    let j: Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    assert_eq!(j["metadata"]["bitnet-b1.58.block_count"]["value"], 7);
    assert_eq!(j["metadata"]["bitnet-b1.58.embedding_length"]["value"], DIM);
    assert_eq!(j["metadata"]["general.name"]["value"], "synthetic-tiny-bitnet-b1.58-256x4-7-layers-i2_s-seed1234");
    let names: Vec<&str> =
        j["tensors"].as_array().expect("tensors").iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(names.contains(&"blk.6.ffn_down.weight") && !names.iter().any(|n| n.starts_with("blk.7.")), "{names:?}");
    let o = ok(&["run", s(&out), "--tokens", "1,2,3", "-n", "2", "--temp", "0", "--engine", "ref", "--output", "json"]);
    let j: Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    assert!(j["generated_ids"].as_array().is_some_and(|g| !g.is_empty()), "{j}");
}

#[test]
fn bad_flags_and_outputs_are_clear_errors() {
    let dir = tempfile::tempdir().expect("temp dir");
    let model = synth(dir.path(), "m.gguf", "i2_s", 1);
    let m = s(&model);
    let cases: [(Vec<&str>, &str); 5] = [
        (vec!["bench", m, "-p", "2", "-n", "1", "--repetitions", "0"], "--repetitions 0: must be at least 1"),
        (vec!["bench", m, "-p", "8", "-n", "4", "-c", "10"], "-c 10: the context must hold -p 8 plus -n 4 = 12"),
        (vec!["bench", m, "-p", "0", "-n", "0"], "-n 0: with -p 0 there is nothing to measure"),
        (vec!["synth", "--shape", "huge", "--out", "x.gguf"], "huge"),
        (
            vec!["synth", "--shape", "tiny", "--layers", "0", "--out", "x.gguf"],
            "'--layers <LAYERS>': 0 is not in 1..=1024",
        ),
    ];
    for (args, message) in cases {
        let o = purebee(&args);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    // An output in a directory that does not exist: an error naming --out, and nothing written.
    let out = dir.path().join("missing").join("m.gguf");
    let o = purebee(&["synth", "--shape", "tiny", "--out", s(&out)]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    let message =
        format!("--out {}: the directory {} does not exist", out.display(), dir.path().join("missing").display());
    assert!(!o.status.success() && stderr.contains(&message), "{stderr}");
    assert!(!dir.path().join("missing").exists());
    // An output that cannot replace what is there (a directory): the rename fails after the
    // temporary file was written, and the temporary file is removed.
    let sub = dir.path().join("sub");
    let taken = sub.join("taken.gguf");
    std::fs::create_dir_all(&taken).expect("mkdir");
    let o = purebee(&["synth", "--shape", "tiny", "--out", s(&taken)]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && stderr.contains(&format!("--out {}: ", taken.display())), "{stderr}");
    let names: Vec<_> = std::fs::read_dir(&sub).expect("list").map(|e| e.expect("entry").file_name()).collect();
    assert_eq!(names, vec![std::ffi::OsString::from("taken.gguf")]);
    let o = purebee(&["bench", "/nonexistent.gguf", "--engine", "ref"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("/nonexistent.gguf"));
}
