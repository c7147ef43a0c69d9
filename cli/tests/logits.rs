//! `purebee-rs logits` end to end: the `.npy` it writes holds llama.cpp's logits on an F32
//! fixture (within 1e-4, fixture README §3), in both modes; bad input exits non-zero.

use std::path::{Path, PathBuf};
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_purebee-rs"))
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/bitnet-tiny").join(name)
}

/// Reads a 2-D `<f4` npy: (rows, cols, data).
fn read_npy(path: &Path) -> (usize, usize, Vec<f32>) {
    let b = std::fs::read(path).expect("npy written");
    assert_eq!(&b[..8], b"\x93NUMPY\x01\x00");
    let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
    let header = std::str::from_utf8(&b[10..10 + hlen]).expect("ascii");
    assert!(header.contains("'descr': '<f4'") && header.contains("'fortran_order': False"), "{header}");
    let shape = header.split("'shape': (").nth(1).and_then(|s| s.split(')').next()).expect("shape");
    let dims: Vec<usize> =
        shape.split(',').filter(|s| !s.trim().is_empty()).map(|s| s.trim().parse().expect("dim")).collect();
    let data: Vec<f32> = b[10 + hlen..].chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    assert_eq!(data.len(), dims[0] * dims[1]);
    (dims[0], dims[1], data)
}

const P16: &str = "0,504,2365,6354,275,1324,544,6563,690,260,303,1437,105,2767,30,4027";

#[test]
fn prefill_and_decode_write_llama_cpp_logits() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_, _, want) = read_npy(&fixture("tiny_b158_f32.p16.llamacpp.prompt_logits.npy"));
    for mode in ["prefill", "decode"] {
        let out = dir.path().join(format!("{mode}.npy"));
        let status = bin()
            .args([
                "logits",
                fixture("tiny_b158_f32.gguf").to_str().expect("utf-8 path"),
                "--engine",
                "ref",
                // The 1e-4 bound is against F32 logits: F32 caches.
                "-ctk",
                "f32",
                "-ctv",
                "f32",
                "--mode",
                mode,
                "--tokens",
                P16,
                "--out",
            ])
            .arg(&out)
            .status()
            .expect("runs");
        assert!(status.success(), "{mode}: {status}");
        let (rows, cols, got) = read_npy(&out);
        assert_eq!((rows, cols), (16, 8192));
        let max = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(max <= 1e-4, "{mode}: max abs diff {max} > 1e-4");
    }
}

#[test]
fn bad_input_exits_non_zero_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("x.npy");
    let model = fixture("tiny_b158_i2_s.gguf");
    let cases: [(&[&str], &str); 3] = [
        (&["--tokens", "0,8192"], "token id 8192 is outside the vocabulary of 8192"),
        (&["--tokens", "0,1", "-c", "1"], "do not fit the context of 1"),
        (&["--tokens", "0,x"], "invalid value 'x'"),
    ];
    for (args, message) in cases {
        let o = bin()
            .arg("logits")
            .arg(&model)
            .args(["--engine", "ref"])
            .args(args)
            .arg("--out")
            .arg(&out)
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(message), "{args:?}: stderr {stderr}");
        assert!(!out.exists(), "{args:?}: a file was written");
    }
    let o =
        bin().args(["logits", "/nonexistent/model.gguf", "--tokens", "1", "--out"]).arg(&out).output().expect("runs");
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/model.gguf"));
}
