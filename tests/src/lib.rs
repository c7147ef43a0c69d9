//! # purebee-tests: cross-crate tests
//!
//! Shared helpers for the tests under `tests/tests/`: where the committed fixtures are, and
//! a reader for the `.npy` golden logits. The tests themselves check what no single crate
//! can: real GGUF files through every layer, the architecture's invariants, and
//! differential tests of the GPU and CPU engines against the reference engine.
//!
//! It must not be a dependency of any other crate.

#![forbid(unsafe_code)]

pub mod bitnet_checks;
pub mod differential;
pub mod rng;
pub mod watched;

use std::path::PathBuf;

/// Every dtype a float-or-quantized weight (LINEAR) or table (EMBED) may have.
pub const WEIGHT_DTYPES: [purebee_memory::DType; 9] = {
    use purebee_memory::DType;
    [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q8_0,
        DType::TQ1_0,
        DType::TQ2_0,
        DType::I2_S,
    ]
};

/// The repository's `fixtures/` folder.
pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

/// A file of `fixtures/bitnet-tiny/`.
pub fn tiny(name: &str) -> PathBuf {
    fixtures_dir().join("bitnet-tiny").join(name)
}

/// The tiny BitNet models committed in `fixtures/bitnet-tiny`, without `.gguf`.
pub const TINY_MODELS: [&str; 7] = [
    "tiny_b158_i2_s",
    "tiny_b158_tq2_0",
    "tiny_b158_tq1_0",
    "tiny_b158_f32",
    "tiny_bitnet_tq2_0",
    "tiny_bitnet_f32",
    "tiny_bitnet_tq2_0_scaletensors",
];

/// A 2-D float32 `.npy` array (NPY 1.0, `<f4`, C order), as the fixtures ship them.
#[derive(Clone, Debug)]
pub struct Npy {
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Row-major values.
    pub data: Vec<f32>,
}

impl Npy {
    /// Row `r`.
    pub fn row(&self, r: usize) -> &[f32] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }
}

/// Reads a 2-D little-endian float32 `.npy` file; panics with the path on anything else
/// (test helper: the fixtures are known files).
pub fn read_npy(path: &std::path::Path) -> Npy {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(bytes.len() >= 10 && &bytes[..6] == b"\x93NUMPY", "{}: not an npy file", path.display());
    assert_eq!(bytes[6], 1, "{}: npy version {} (expected 1.0)", path.display(), bytes[6]);
    let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    let header = std::str::from_utf8(&bytes[10..10 + header_len]).expect("ascii header");
    assert!(header.contains("'descr': '<f4'"), "{}: dtype is not <f4: {header}", path.display());
    assert!(header.contains("'fortran_order': False"), "{}: not C order", path.display());
    let shape = header.split("'shape': (").nth(1).and_then(|s| s.split(')').next()).expect("shape in header");
    let dims: Vec<usize> =
        shape.split(',').filter(|s| !s.trim().is_empty()).map(|s| s.trim().parse().expect("dim")).collect();
    assert_eq!(dims.len(), 2, "{}: shape {dims:?} is not 2-D", path.display());
    let data: Vec<f32> =
        bytes[10 + header_len..].chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    assert_eq!(data.len(), dims[0] * dims[1], "{}: data length", path.display());
    Npy { rows: dims[0], cols: dims[1], data }
}

/// A golden logits file of a tiny model, `<model>.<case>.<source>.<kind>_logits.npy`.
///
/// Identical goldens are stored once (fixture README: the I2_S, TQ2_0 and TQ1_0 reference
/// logits are bitwise equal, and so are most of the `.scale`-tensor model's and the plain
/// TQ2_0 model's): a model without its own copy reads its twin's.
pub fn golden(model: &str, case: &str, source: &str, kind: &str) -> PathBuf {
    let own = tiny(&format!("{model}.{case}.{source}.{kind}_logits.npy"));
    if own.exists() {
        return own;
    }
    let twin = match model {
        "tiny_b158_tq2_0" | "tiny_b158_tq1_0" => "tiny_b158_i2_s",
        "tiny_bitnet_tq2_0_scaletensors" => "tiny_bitnet_tq2_0",
        _ => model,
    };
    tiny(&format!("{twin}.{case}.{source}.{kind}_logits.npy"))
}

/// The SmolLM2-135M-Instruct GGUF for the real-model checks (`purebee_testenv`).
pub fn smollm2_gguf() -> Option<PathBuf> {
    purebee_testenv::smollm2_gguf("the SmolLM2 checks")
}

/// The token ids under `key` (`prompt_token_ids`, `llamacpp_greedy_ids`, ...) of a tiny
/// fixture's case file `MODEL.CASE.json`.
pub fn case_ids(model: &str, case: &str, key: &str) -> Vec<u32> {
    let text = std::fs::read_to_string(tiny(&format!("{model}.{case}.json"))).expect("case json");
    let j: serde_json::Value = serde_json::from_str(&text).expect("valid json");
    j[key].as_array().expect(key).iter().map(|v| v.as_u64().expect("id") as u32).collect()
}

/// Greedy generation of `n` tokens that goes on past end-of-generation ids, as the fixtures'
/// llama.cpp runs did.
pub fn greedy_ignoring_eos(n: usize) -> purebee_runtime::GenerateOptions {
    purebee_runtime::GenerateOptions {
        max_new_tokens: n,
        ignore_eos: true,
        sampler: purebee_runtime::sampler::SamplerConfig { temperature: 0.0, ..Default::default() },
        stop: None,
        speculation: None,
    }
}
