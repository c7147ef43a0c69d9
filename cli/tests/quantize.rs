//! `purebee-rs quantize IN OUT --embedding q8_0` end to end: on the committed tiny models
//! (F16 and F32 embeddings, tied LM head) the output reads back with the same version,
//! metadata, tensor order, names and dims, every tensor but `token_embd.weight` byte for byte,
//! and the embedding as Q8_0 within Q8_0's error and equal to the encoder's blocks; `run`
//! works on it; a Q8_0 embedding is copied as is; and every refusal (missing input, IN == OUT,
//! a ternary or Q4_0 embedding, rows not whole blocks, no embedding, a failed write) is a clear
//! error that leaves no output and no temporary file.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use purebee_memory::gguf::{GgufFile, GgufWriter};
use purebee_memory::quant::encode::encode_q8_0_row;
use purebee_memory::quant::{q8_0, QuantMatrix};
use purebee_memory::DType;

const BIN: &str = env!("CARGO_BIN_EXE_purebee-rs");
const EMBD: &str = "token_embd.weight";

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/bitnet-tiny").join(name)
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn purebee(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("the binary runs")
}

fn quantize(input: &Path, output: &Path) -> Output {
    purebee(&["quantize", s(input), s(output), "--embedding", "q8_0"])
}

/// Runs `quantize`, asserts success and returns its stdout.
fn quantize_ok(input: &Path, output: &Path) -> String {
    let o = quantize(input, output);
    assert!(o.status.success(), "quantize {}: {}", input.display(), String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).expect("utf-8 stdout")
}

/// Runs `quantize`, asserts that it fails without panicking, and returns its stderr.
fn quantize_err(input: &Path, output: &Path) -> String {
    let o = quantize(input, output);
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "quantize {} succeeded", input.display());
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

/// The names of the files in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("readable dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Checks everything `quantize` promises about `output`, rewritten from `input`; returns the
/// greatest `|x − y| / d` over the embedding (d = block amax / 127), for information.
fn check_rewrite(input: &Path, output: &Path) -> f64 {
    let a = GgufFile::open(input).expect("input");
    let b = GgufFile::open(output).expect("the output reads back");
    assert_eq!(b.version(), a.version());
    assert_eq!(b.alignment(), a.alignment());
    assert_eq!(b.metadata(), a.metadata(), "metadata: same entries, same order");
    assert_eq!(b.tensors().len(), a.tensors().len());
    for (ta, tb) in a.tensors().iter().zip(b.tensors()) {
        assert_eq!((&tb.name, &tb.ne), (&ta.name, &ta.ne), "tensor order, names and dims");
        assert_eq!(tb.offset % b.alignment(), 0, "{}", tb.name);
        if ta.name == EMBD {
            continue;
        }
        assert_eq!(tb.dtype, ta.dtype, "{}", ta.name);
        assert!(a.tensor_bytes(ta) == b.tensor_bytes(tb), "{}: bytes differ", ta.name);
    }

    let ea = a.tensor_info(EMBD).expect("embedding");
    let eb = b.tensor_info(EMBD).expect("embedding");
    assert_eq!(eb.dtype, DType::Q8_0);
    let (rows, cols) = (ea.shape.rows(), ea.shape.cols());
    assert_eq!(eb.n_bytes, rows * cols / 32 * 34);
    let src = QuantMatrix::new(ea.dtype, a.tensor_bytes(ea), rows, cols).expect("source");
    let dst = QuantMatrix::new(DType::Q8_0, b.tensor_bytes(eb), rows, cols).expect("Q8_0");
    let (mut x, mut y) = (vec![0f32; cols], vec![0f32; cols]);
    let mut worst = 0f64;
    for r in 0..rows {
        src.dequantize_row(r, &mut x).expect("row");
        dst.dequantize_row(r, &mut y).expect("row");
        let blocks = &b.tensor_bytes(eb)[r * cols / 32 * 34..(r + 1) * cols / 32 * 34];
        assert_eq!(blocks, encode_q8_0_row(&x).expect("whole blocks"), "row {r}: the encoder's blocks");
        for (k, ((xb, yb), block)) in x.chunks(32).zip(y.chunks(32)).zip(blocks.chunks(34)).enumerate() {
            let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = f64::from(amax / 127.0);
            let block: &[u8; 34] = block.try_into().expect("34 bytes");
            let d16 = f64::from(q8_0::scale(block));
            for (j, (&xv, &yv)) in xb.iter().zip(yb).enumerate() {
                let err = (f64::from(xv) - f64::from(yv)).abs();
                // Half a step of d, plus what storing d as f16 moves a code of at most 127.
                let q = f64::from(block[2 + j] as i8);
                let bound = d * (0.5 + 1e-5) + q.abs() * (d - d16).abs();
                assert!(err <= bound, "row {r} block {k} element {j}: {xv} -> {yv}, error {err} > {bound}");
                if d > 0.0 {
                    worst = worst.max(err / d);
                }
            }
        }
    }
    worst
}

#[test]
fn f16_embedding_becomes_q8_0_and_everything_else_is_kept() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = fixture("tiny_b158_i2_s.gguf");
    let output = dir.path().join("q8.gguf");
    let stdout = quantize_ok(&input, &output);
    // 8192 rows of 256: F16 4 MiB, Q8_0 8192 · 8 · 34 bytes.
    let len = std::fs::metadata(&output).expect("output").len();
    let want = format!(
        "token_embd.weight (also the tied LM head): F16 → Q8_0, 4194304 → 2228224 bytes; wrote {}: {len} bytes",
        output.display()
    );
    assert!(stdout.starts_with(&want), "{stdout}");
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let worst = check_rewrite(&input, &output);
    assert!(worst <= 0.6, "{worst}");
    assert_eq!(listing(dir.path()), ["q8.gguf"], "no temporary file left");

    // A Q8_0 embedding is copied as is: the same file again, byte for byte.
    let again = dir.path().join("q8_again.gguf");
    let stdout = quantize_ok(&output, &again);
    assert!(stdout.contains("Q8_0 → Q8_0 (already Q8_0, copied as is), 2228224 → 2228224 bytes"), "{stdout}");
    assert!(std::fs::read(&output).expect("first") == std::fs::read(&again).expect("second"));

    // An existing output is replaced.
    let stdout = quantize_ok(&input, &again);
    assert!(stdout.contains("F16 → Q8_0"), "{stdout}");
    assert!(std::fs::read(&output).expect("first") == std::fs::read(&again).expect("replaced"));
}

#[test]
fn f32_embedding_becomes_q8_0_and_the_model_still_runs() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = fixture("tiny_b158_f32.gguf");
    let output = dir.path().join("q8.gguf");
    let stdout = quantize_ok(&input, &output);
    assert!(stdout.contains("F32 → Q8_0, 8388608 → 2228224 bytes"), "{stdout}");
    check_rewrite(&input, &output);

    let run = |model: &Path| {
        let o = purebee(&[
            "run",
            s(model),
            "-p",
            "Once upon a time",
            "-n",
            "8",
            "--temp",
            "0",
            "--engine",
            "ref",
            "--output",
            "json",
        ]);
        assert!(o.status.success(), "run {}: {}", model.display(), String::from_utf8_lossy(&o.stderr));
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
        let ids: Vec<u64> =
            j["generated_ids"].as_array().expect("generated_ids").iter().map(|v| v.as_u64().expect("id")).collect();
        (j["prompt_ids"].clone(), ids)
    };
    let (prompt, generated) = run(&output);
    assert_eq!(generated.len(), 8);
    let (prompt_f32, _) = run(&input);
    assert_eq!(prompt, prompt_f32, "the tokenizer metadata is unchanged");
}

#[test]
fn missing_input_and_same_paths_are_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("missing.gguf");
    let output = dir.path().join("out.gguf");
    let stderr = quantize_err(&missing, &output);
    assert!(stderr.contains(s(&missing)) && stderr.contains("cannot read the file"), "{stderr}");
    assert!(listing(dir.path()).is_empty(), "{:?}", listing(dir.path()));

    // IN == OUT, spelled the same or not: refused before anything is written.
    let model = dir.path().join("model.gguf");
    std::fs::copy(fixture("tiny_b158_tq2_0.gguf"), &model).expect("copy");
    let before = std::fs::read(&model).expect("model");
    for out in [model.clone(), dir.path().join(".").join("model.gguf")] {
        let stderr = quantize_err(&model, &out);
        assert!(stderr.contains("the output is the input file"), "{stderr}");
        assert!(std::fs::read(&model).expect("model") == before, "the input is untouched");
        assert_eq!(listing(dir.path()), ["model.gguf"]);
    }

    // A directory is not an output file.
    let stderr = quantize_err(&model, dir.path());
    assert!(stderr.contains("must be a file path"), "{stderr}");
    // A missing directory: the temporary file cannot be created; nothing is left.
    let stderr = quantize_err(&model, &dir.path().join("no/such/dir/out.gguf"));
    assert!(stderr.contains("cannot create the temporary file"), "{stderr}");
    assert_eq!(listing(dir.path()), ["model.gguf"]);

    // --embedding takes only the values it knows.
    let o = purebee(&["quantize", s(&model), s(&output), "--embedding", "q4_0"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("q8_0"));
}

/// The embedding of [`small_model`]: its dtype and row length, or none.
type Embedding = Option<(DType, u64)>;

/// A small GGUF with metadata, a norm and an embedding of `dtype` with rows of `ne0`.
fn small_model(path: &Path, embd: Embedding) {
    let mut w = GgufWriter::new();
    w.add_str("general.architecture", "llama").expect("key");
    w.add_u32("llama.embedding_length", 256).expect("key");
    w.add_f32_tensor("output_norm.weight", &[4], &[1.0; 4]).expect("tensor");
    if let Some((dtype, ne0)) = embd {
        let bytes = dtype.tensor_bytes(4, ne0 as usize).expect("small");
        w.add_tensor(EMBD, dtype, &[ne0, 4], vec![0u8; bytes]).expect("tensor");
    }
    w.write_file(path).expect("written");
}

#[test]
fn embeddings_that_cannot_become_q8_0_are_refused_and_nothing_is_left() {
    let dir = tempfile::tempdir().expect("temp dir");
    let output = dir.path().join("out.gguf");
    let cases: [(&str, Embedding, &[&str]); 5] = [
        (
            "tq2_0.gguf",
            Some((DType::TQ2_0, 256)),
            &["tensor 'token_embd.weight' is TQ2_0", "cannot be quantized to Q8_0"],
        ),
        ("i2_s.gguf", Some((DType::I2_S, 256)), &["tensor 'token_embd.weight' is I2_S"]),
        ("q4_0.gguf", Some((DType::Q4_0, 64)), &["tensor 'token_embd.weight' is Q4_0"]),
        ("rows48.gguf", Some((DType::F32, 48)), &["rows of 48 values, not a multiple of Q8_0's block of 32"]),
        ("none.gguf", None, &["no tensor named 'token_embd.weight'"]),
    ];
    for (name, embd, messages) in cases {
        let input = dir.path().join(name);
        small_model(&input, embd);
        let stderr = quantize_err(&input, &output);
        assert!(stderr.contains(s(&input)), "{name}: names the file: {stderr}");
        for m in messages {
            assert!(stderr.contains(m), "{name}: {stderr}");
        }
        assert!(!output.exists(), "{name}");
    }
    let mut expected: Vec<String> = cases.iter().map(|c| c.0.to_string()).collect();
    expected.sort();
    assert_eq!(listing(dir.path()), expected);

    // The smallest valid case works: rows of 32 F32 values.
    let input = dir.path().join("rows32.gguf");
    small_model(&input, Some((DType::F32, 32)));
    quantize_ok(&input, &output);
    check_rewrite(&input, &output);
}

/// A write that fails halfway (the file size limit, with SIGXFSZ ignored so that the write
/// returns EFBIG): the error names the output, the temporary file is removed and an existing
/// output is left as it was.
#[cfg(unix)]
#[test]
fn a_failed_write_leaves_no_partial_file_and_the_old_output() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = fixture("tiny_b158_i2_s.gguf");
    let output = dir.path().join("out.gguf");
    std::fs::write(&output, b"the previous output").expect("old output");
    // ulimit -f counts 512-byte blocks: 64 KiB, far less than the 3 MB output.
    let script =
        format!("trap '' XFSZ; ulimit -f 128; exec '{BIN}' quantize '{}' '{}' --embedding q8_0", s(&input), s(&output));
    let o = Command::new("sh").args(["-c", &script]).output().expect("sh runs");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "the write should have failed: {stderr}");
    assert!(stderr.starts_with("error: ") && stderr.contains(s(&output)), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(std::fs::read(&output).expect("old output"), b"the previous output");
    assert_eq!(listing(dir.path()), ["out.gguf"], "no temporary file left");
}
