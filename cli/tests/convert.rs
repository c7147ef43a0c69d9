//! `purebee-rs convert` end to end on synthetic checkpoints made by
//! `tests/convert/make_checkpoint.py`, checked with `tests/convert/reference.py`:
//! - every ternary tensor is byte for byte what llama.cpp's pipeline (ternarize in f32, cast
//!   back to the checkpoint's dtype, gguf-py's quantizer) gives, for TQ1_0 and TQ2_0, and
//!   what the same values are in I2_S, F16, BF16 and F32, from master weights, from BitNet's
//!   packed release, and from a sharded checkpoint;
//! - an I2_S tensor dequantizes to its TQ2_0 twin's values up to the f16 rounding of TQ2_0's
//!   block scale;
//! - the converted model's logits equal the float64 reference's from the checkpoint, within
//!   fixtures/README.md's rules for ternary models (1e-3 up to the first int8 activation that
//!   rounds differently in f32 than in f64), and a float32 run of the reference everywhere;
//! - the carried tokenizer gives Hugging Face `tokenizers`' ids;
//! - `convert hf://OWNER/REPO` pulls only what it reads (from the hub crate's test server)
//!   and writes what converting the folder writes.
//!
//! `PUREBEE_CONVERT_PYTHON` names a python with tests/convert/requirements.txt
//! (`scripts/python-env.sh convert`; scripts/test.sh sets it). Without it the tests fail
//! saying so, unless `PUREBEE_SKIP_CONVERT=1`.

#[path = "../../hub/tests/common/server.rs"]
mod server;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use purebee_memory::gguf::GgufFile;
use purebee_memory::quant::QuantMatrix;
use purebee_memory::DType;

const BIN: &str = env!("CARGO_BIN_EXE_purebee-rs");
const TERNARY: [&str; 7] = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"];

fn python() -> Option<PathBuf> {
    match std::env::var_os("PUREBEE_CONVERT_PYTHON") {
        Some(p) => Some(PathBuf::from(p)),
        None if std::env::var("PUREBEE_SKIP_CONVERT").as_deref() == Ok("1") => {
            eprintln!("PUREBEE_SKIP_CONVERT=1: the converter's checks against the Python reference are NOT run");
            None
        }
        None => panic!(
            "PUREBEE_CONVERT_PYTHON is not set: run `export PUREBEE_CONVERT_PYTHON=$(scripts/python-env.sh convert)` \
             (or scripts/test.sh, which does), or set PUREBEE_SKIP_CONVERT=1 to skip these checks explicitly"
        ),
    }
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/convert").join(name)
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn ok(o: Output, what: &str) -> String {
    assert!(
        o.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).expect("utf-8")
}

fn py(python: &Path, args: &[&str]) -> String {
    ok(Command::new(python).args(args).output().expect("python runs"), &format!("python {args:?}"))
}

/// A checkpoint of `kind` in `dir/name` (extra arguments to make_checkpoint.py after).
fn make(python: &Path, dir: &Path, name: &str, kind: &str, extra: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let maker = script("make_checkpoint.py");
    let mut args = vec![s(&maker), s(&out), "--kind", kind];
    args.extend_from_slice(extra);
    py(python, &args);
    out
}

/// Converts `ckpt` to `outtype`; returns the output path.
fn convert(ckpt: &Path, outtype: &str) -> PathBuf {
    let out = ckpt.with_extension(format!("{outtype}.gguf"));
    let o = Command::new(BIN).args(["convert", s(ckpt), "--outtype", outtype, "--outfile", s(&out)]).output();
    ok(o.expect("the binary runs"), &format!("convert {} --outtype {outtype}", ckpt.display()));
    out
}

/// reference.py compare: every ternary tensor equal to the pipeline's bytes.
fn compare(python: &Path, ckpt: &Path, gguf: &Path, outtype: &str) {
    let report = py(python, &[s(&script("reference.py")), "compare", s(ckpt), s(gguf), "--outtype", outtype]);
    assert!(report.contains(" 0 differ"), "{outtype}: {report}");
}

/// Values of the ternary tensor `name` of `g`, dequantized.
fn values(g: &GgufFile, name: &str) -> Vec<f32> {
    let t = g.tensor_info(name).expect("the tensor");
    let m = QuantMatrix::new(t.dtype, g.tensor_bytes(t), t.shape.rows(), t.shape.cols()).expect("a matrix");
    let mut all = vec![0f32; t.shape.rows() * t.shape.cols()];
    for (r, row) in all.chunks_exact_mut(t.shape.cols()).enumerate() {
        m.dequantize_row(r, row).expect("dequantizes");
    }
    all
}

#[test]
fn bitnet_master_weights_convert_byte_for_byte_and_give_the_reference_logits() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let ckpt = make(&python, dir.path(), "bitnet", "bitnet-b1.58", &[]);
    let mut files = Vec::new();
    for outtype in ["tq1_0", "tq2_0", "i2_s", "f16", "bf16", "f32"] {
        let gguf = convert(&ckpt, outtype);
        compare(&python, &ckpt, &gguf, outtype);
        files.push((outtype, gguf));
    }

    // I2_S against its TQ2_0 twin: the same trits, the scale m in f32 against f16(m).
    let i2s = GgufFile::open(&files[2].1).expect("i2_s reads");
    let tq2 = GgufFile::open(&files[1].1).expect("tq2_0 reads");
    for name in TERNARY.iter().map(|t| format!("blk.0.{t}.weight")) {
        assert_eq!(i2s.tensor_info(&name).expect("i2_s tensor").dtype, DType::I2_S);
        let (a, b) = (values(&i2s, &name), values(&tq2, &name));
        let m = a.iter().fold(0f32, |m, v| m.max(v.abs()));
        let gap = (m - half::f16::from_f32(m).to_f32()).abs();
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!((x - y).abs() <= gap, "{name}[{i}]: I2_S {x}, TQ2_0 {y}, scale {m} (f16 gap {gap})");
            assert_eq!(x.signum() * f32::from(*x != 0.0), y.signum() * f32::from(*y != 0.0), "{name}[{i}]: trits");
        }
    }

    for (outtype, gguf) in files.iter().filter(|(t, _)| matches!(*t, "tq1_0" | "tq2_0" | "i2_s")) {
        ternary_logits_match(&python, dir.path(), &ckpt, gguf, outtype);
    }
}

/// The token sequence the logits are compared on (ids every synthetic vocabulary has).
const TOKENS: &str = "1,17,42,99,5,300,7";

/// Our logits of `gguf` on the CPU engine with F32 KV caches (as the references have them).
fn our_logits(dir: &Path, gguf: &Path, tag: &str) -> PathBuf {
    let ours = dir.join(format!("{tag}.npy"));
    let args = ["logits", s(gguf), "--tokens", TOKENS, "--engine", "cpu", "--cache-type-k", "f32"];
    let o = Command::new(BIN).args(args).args(["--cache-type-v", "f32", "--out", s(&ours)]).output();
    ok(o.expect("the binary runs"), &format!("logits of {}", gguf.display()));
    ours
}

/// The float64 reference's logits from the checkpoint.
fn reference_logits(python: &Path, dir: &Path, ckpt: &Path, tag: &str) -> PathBuf {
    let reference = dir.join(format!("{tag}.reference.npy"));
    py(python, &[s(&script("reference.py")), "logits", s(ckpt), "--tokens", TOKENS, "--out", s(&reference)]);
    reference
}

/// A ternary model's logits (CPU engine) against the float64 reference from the checkpoint,
/// by fixtures/README.md's rules: within 1e-3 up to the first int8 activation that rounds
/// differently in f32 than in f64 (the first row where tools/ref_bitnet_numpy.py's float32
/// run of the file leaves the float64 reference by more than 1e-3), and within 1e-5 of that
/// float32 run everywhere.
fn ternary_logits_match(python: &Path, dir: &Path, ckpt: &Path, gguf: &Path, tag: &str) {
    let ours = our_logits(dir, gguf, tag);
    let reference = reference_logits(python, dir, ckpt, tag);
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/ref_bitnet_numpy.py");
    let f32_run = dir.join(format!("{tag}.f32"));
    py(python, &[s(&tools), "run", s(gguf), "--prompt-ids", TOKENS, "--precision", "f32", "--out", s(&f32_run)]);
    let verdict = py(
        python,
        &[
            "-c",
            "import numpy as n, sys\n\
             ours, f64, f32 = (n.load(p) for p in sys.argv[1:4])\n\
             flips = [r for r in range(len(f64)) if abs(f32[r] - f64[r]).max() > 1e-3]\n\
             first = flips[0] if flips else len(f64)\n\
             print(first, abs(ours[:first] - f64[:first]).max() if first else 0.0, abs(ours - f32).max())",
            s(&ours),
            s(&reference),
            &format!("{}.prompt_logits.npy", s(&f32_run)),
        ],
    );
    let v: Vec<f64> = verdict.split_whitespace().map(|x| x.parse().expect("a number")).collect();
    let (first_flip, before, vs_f32) = (v[0], v[1], v[2]);
    assert!(first_flip >= 1.0, "{tag}: an int8 rounding flip at row 0 ({verdict})");
    assert!(before <= 1e-3, "{tag}: rows before the first flip ({first_flip}) differ by {before} > 1e-3");
    assert!(vs_f32 <= 1e-5, "{tag}: max |logit - float32 reference| = {vs_f32} > 1e-5");
}

/// Max |a - b| of two .npy files.
fn max_diff(python: &Path, a: &Path, b: &Path) -> f64 {
    let d = py(
        python,
        &["-c", "import numpy as n,sys; print(abs(n.load(sys.argv[1]) - n.load(sys.argv[2])).max())", s(a), s(b)],
    );
    d.trim().parse().expect("a number")
}

#[test]
fn a_1bitllm_model_converts_and_gives_the_reference_logits() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let ckpt = make(&python, dir.path(), "bitnet", "bitnet", &[]);
    for outtype in ["tq2_0", "i2_s"] {
        let gguf = convert(&ckpt, outtype);
        compare(&python, &ckpt, &gguf, outtype);
        let g = GgufFile::open(&gguf).expect("reads");
        assert_eq!(g.get_str("general.architecture").expect("arch"), "bitnet");
        assert_eq!(g.get_str("tokenizer.ggml.model").expect("model"), "llama");
        ternary_logits_match(&python, dir.path(), &ckpt, &gguf, outtype);
    }
}

#[test]
fn a_llama_model_converts_with_q_and_k_permuted_for_adjacent_pairs() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let ckpt = make(&python, dir.path(), "llama", "llama", &[]);
    // Its weights are not ternary: a ternary outtype leaves them F16 (BF16 values exactly).
    let gguf = convert(&ckpt, "tq2_0");
    let g = GgufFile::open(&gguf).expect("reads");
    assert_eq!(g.tensor_info("blk.0.attn_q.weight").expect("q").dtype, DType::F16);
    // Float weights, f32 activations: the fixture rule for float models, 1e-4. Unpermuted
    // Q/K under adjacent-pair RoPE would be off from row 1 on.
    let ours = our_logits(dir.path(), &gguf, "llama");
    let reference = reference_logits(&python, dir.path(), &ckpt, "llama");
    let d = max_diff(&python, &ours, &reference);
    assert!(d <= 1e-4, "llama: max |logit - reference| = {d} > 1e-4");
}

#[test]
fn packed_and_sharded_checkpoints_convert_exactly() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let packed = make(&python, dir.path(), "packed", "bitnet-b1.58-packed", &[]);
    for outtype in ["tq2_0", "tq1_0", "i2_s"] {
        let gguf = convert(&packed, outtype);
        compare(&python, &packed, &gguf, outtype);
    }
    // Three shards and one file hold the same tensors: the same output but for its name.
    let one = make(&python, &dir.path().join("a"), "m", "bitnet-b1.58", &["--seed", "3"]);
    let three = make(&python, &dir.path().join("b"), "m", "bitnet-b1.58", &["--seed", "3", "--shards", "3"]);
    assert!(three.join("model.safetensors.index.json").exists());
    let (x, y) = (convert(&one, "tq2_0"), convert(&three, "tq2_0"));
    assert_eq!(std::fs::read(&x).expect("read"), std::fs::read(&y).expect("read"), "sharded and single outputs differ");
}

#[test]
fn the_carried_tokenizer_gives_the_tokenizers_library_ids() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    // Byte-level BPE (Llama 3's split), and SentencePiece-style BPE with byte fallback.
    for kind in ["bitnet-b1.58", "bitnet", "llama"] {
        let ckpt = make(&python, dir.path(), kind, kind, &[]);
        tokenizer_agrees(&python, &ckpt, &convert(&ckpt, "tq2_0"));
    }
}

/// Checkpoints that ship a SentencePiece `tokenizer.model` instead of a tokenizer.json (a
/// 1bitLLM-style BitNet and a Llama, trained by the `sentencepiece` library as Llama 2's:
/// BPE, byte fallback, identity normalization): the converted file tokenizes as
/// `sentencepiece` does.
#[test]
fn a_sentencepiece_tokenizer_model_is_carried() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    for kind in ["bitnet", "llama"] {
        let ckpt = make(&python, dir.path(), &format!("{kind}-spm"), kind, &["--sentencepiece-model"]);
        assert!(!ckpt.join("tokenizer.json").exists());
        let gguf = convert(&ckpt, "tq2_0");
        assert_eq!(GgufFile::open(&gguf).expect("reads").get_str("tokenizer.ggml.model").expect("model"), "llama");
        for text in
            ["Once upon a time, there was a tiny model.", "  two  spaces\nand 12345 digits!?", "héllo 🙂", " x", ""]
        {
            let want = py(
                &python,
                &[
                    "-c",
                    "import sys, sentencepiece as s; \
                     print(','.join(map(str, s.SentencePieceProcessor(model_file=sys.argv[1]).encode(sys.argv[2]))))",
                    s(&ckpt.join("tokenizer.model")),
                    text,
                ],
            );
            let o = Command::new(BIN)
                .args(["tokenize", s(&gguf), "--no-bos", "--no-parse-special", "-p", text])
                .output()
                .expect("runs");
            assert_eq!(ok(o, "tokenize").trim(), want.trim(), "{kind}: {text:?}");
        }
    }
}

/// A Llama checkpoint whose tokenizer.json is SmolLM2-135M-Instruct's vocabulary (rebuilt from
/// the SmolLM2 GGUF the real-model tests fetch): `smollm` is recognized, and the converted file
/// tokenizes as `tokenizers` does and as the SmolLM2 GGUF itself does, with its chat template.
#[test]
fn a_llama_checkpoint_with_smollm2_s_vocabulary_keeps_its_tokenizer() {
    let Some(python) = python() else { return };
    let Some(smollm2) = purebee_testenv::smollm2_gguf("the converter's SmolLM2-vocabulary check") else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let ckpt = make(&python, dir.path(), "smol", "llama", &["--tokenizer-from-gguf", s(&smollm2)]);
    let gguf = convert(&ckpt, "f16");
    let (ours, original) = (GgufFile::open(&gguf).expect("reads"), GgufFile::open(&smollm2).expect("reads"));
    assert_eq!(ours.get_str("tokenizer.ggml.pre").expect("pre"), "smollm");
    assert_eq!(
        ours.get_str("tokenizer.chat_template").expect("template"),
        original.get_str("tokenizer.chat_template").expect("template")
    );
    tokenizer_agrees(&python, &ckpt, &gguf);
    for text in ["Hello 12345 world!", "  spaced   out  ", "<|im_start|>user\nHi<|im_end|>"] {
        let ids = |m: &Path| {
            let o = Command::new(BIN).args(["tokenize", s(m), "--no-bos", "-p", text]).output().expect("runs");
            ok(o, "tokenize")
        };
        assert_eq!(ids(&gguf), ids(&smollm2), "{text:?}");
    }
}

/// `purebee-rs tokenize` on `gguf` gives `tokenizers`' ids for the checkpoint's tokenizer.json.
fn tokenizer_agrees(python: &Path, ckpt: &Path, gguf: &Path) {
    let texts = [
        "Once upon a time, there was a tiny model.",
        "  two  spaces\nand 12345 digits!?",
        "héllo wörld — ünïcode 🙂",
        "\ttabs\tand a trailing space ",
        "",
    ];
    for text in texts {
        let want = py(
            python,
            &[
                "-c",
                "import sys, json; from tokenizers import Tokenizer; \
                 t = Tokenizer.from_file(sys.argv[1]); print(json.dumps(t.encode(sys.argv[2], add_special_tokens=False).ids))",
                s(&ckpt.join("tokenizer.json")),
                text,
            ],
        );
        let o = Command::new(BIN)
            .args(["tokenize", s(gguf), "--no-bos", "--no-parse-special", "-p", text])
            .output()
            .expect("runs");
        let got = ok(o, "tokenize");
        let want: Vec<u32> = serde_json::from_str(want.trim()).expect("ids");
        let got: Vec<u32> = got
            .split(|c: char| !c.is_ascii_digit())
            .filter(|t| !t.is_empty())
            .map(|t| t.parse().expect("id"))
            .collect();
        assert_eq!(got, want, "{}: {text:?}", ckpt.display());
    }
}

#[test]
fn an_hf_repository_is_pulled_and_converts_like_its_folder() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let ckpt = make(&python, dir.path(), "r", "bitnet-b1.58", &["--shards", "2"]);
    let server = server::TestServer::start();
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let mut served = Vec::new();
    for entry in std::fs::read_dir(&ckpt).expect("list") {
        let path = entry.expect("entry").path();
        let file = path.file_name().and_then(|n| n.to_str()).expect("a name").to_string();
        server.hub_file("o/r", "main", &file, commit, std::fs::read(&path).expect("read"), None, vec![]);
        served.push(file);
    }
    let cache = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("pulled.gguf");
    let o = Command::new(BIN)
        .env("PUREBEE_CACHE", cache.path())
        .env("HF_ENDPOINT", server.url(""))
        .env_remove("HF_TOKEN")
        .env("HF_HUB_CACHE", cache.path().join("no-hf-cache"))
        .args(["convert", "hf://o/r", "--outtype", "tq2_0", "--outfile", s(&out)])
        .output()
        .expect("the binary runs");
    ok(o, "convert hf://o/r");
    let local = convert(&ckpt, "tq2_0");
    assert_eq!(
        std::fs::read(&out).expect("read"),
        std::fs::read(&local).expect("read"),
        "pulled and local outputs differ"
    );
    // Nothing but what the conversion reads was asked for: no model.safetensors, since the
    // repository has an index.
    let asked: Vec<String> =
        server.requests().into_iter().map(|r| r.path).filter(|p| p.starts_with("/o/r/resolve/")).collect();
    assert!(!asked.iter().any(|p| p.ends_with("/model.safetensors")), "{asked:?}");
    assert!(asked.iter().any(|p| p.ends_with("model-00002-of-00002.safetensors")), "{asked:?}");
}

/// Peak anonymous memory of a 2B-shaped conversion: at most its largest tensor plus 10 %
/// (mapped input pages are the page cache's, not counted). About 5 GB of disk and two
/// minutes, so not in the default run: `cargo test -p purebee-cli --test convert -- --ignored`.
#[test]
#[ignore]
fn a_2b_checkpoint_converts_in_at_most_its_largest_tensor_of_memory() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let ckpt = make(&python, dir.path(), "b2b", "bitnet-b1.58", &["--shape", "2b"]);
    // The largest tensor: the embedding, 128256 × 2560 BF16.
    let largest = 128_256u64 * 2560 * 2;
    let out = dir.path().join("b2b.gguf");
    let mut child = Command::new(BIN)
        .args(["convert", s(&ckpt), "--outtype", "i2_s", "--outfile", s(&out)])
        .spawn()
        .expect("the binary runs");
    let status = format!("/proc/{}/status", child.id());
    let mut peak_kb = 0u64;
    let exit = loop {
        if let Some(kb) = std::fs::read_to_string(&status).ok().and_then(|t| {
            t.lines().find(|l| l.starts_with("RssAnon:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        }) {
            peak_kb = peak_kb.max(kb);
        }
        if let Some(exit) = child.try_wait().expect("wait") {
            break exit;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    assert!(exit.success(), "convert failed");
    let bound = largest + largest / 10;
    eprintln!("peak RssAnon {} MiB, bound {} MiB", peak_kb >> 10, bound >> 20);
    assert!(peak_kb * 1024 <= bound, "peak RssAnon {peak_kb} kB > {bound} bytes");
}
