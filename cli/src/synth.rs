//! `purebee-rs synth`: writes a synthetic BitNet b1.58 model, for benchmarks and tests that
//! need a model of a real shape without downloading one.
//!
//! `--shape bitnet-2b` is BitNet-b1.58-2B-4T's shape (docs/formats.md § BitNet
//! b1.58), `--shape tiny` the committed tiny fixtures' ([`ModelShape`]). The file has
//! the fixtures' tensor names, order and metadata keys (architecture `bitnet-b1.58`), plus
//! `general.synthetic = true` and `synthetic.seed`:
//!
//! - `token_embd.weight`: F16 `[dim, vocab]`, tied (no `output.weight`), values N(0, 0.25²)
//!   rounded to f16;
//! - the norms (`attn_norm`, `attn_sub_norm`, `ffn_norm`, `ffn_sub_norm`, `output_norm`): F32,
//!   `1 + 0.1·N(0, 1)`;
//! - every linear weight: I2_S, TQ2_0 or TQ1_0 (`--weights`), trits −1/0/+1 with probabilities
//!   0.3/0.4/0.3 and one per-tensor scale `s = (0.9 + 0.2·U) / sqrt(0.6·n_in)` rounded to f16
//!   (so I2_S's f32 scale and the TQ blocks' f16 `d` hold the same value exactly). With inputs of
//!   unit RMS (every linear follows an RMSNorm), outputs then have a standard deviation near 1,
//!   so attention scores and logits are spread as in a trained model, not degenerate;
//! - a `gpt2` tokenizer of `vocab` tokens ([`vocabulary`]): the 256 byte tokens in GPT-2's
//!   byte-level alphabet (id = byte value), BOS and EOS control tokens, then filler tokens
//!   `<synthetic_ID>`; no merges, pre-tokenizer `default`. Text therefore encodes to one token
//!   per byte.
//!
//! **Determinism.** Every tensor draws from its own [`SplitMix64`] stream seeded from
//! `(seed, tensor index)`. Normal values are Irwin–Hall sums of twelve 21-bit uniforms (mean 0,
//! variance 1, tails cut at ±6), computed exactly in f64, and the scale needs only a correctly
//! rounded `sqrt`: no libm transcendental is involved, so a seed gives the same bytes on every
//! platform and build.
//!
//! **Writing.** [`purebee_memory::gguf::GgufWriter`] holds the tensors in memory (about
//! 1.18 GB for the 2B shape, once: each tensor's bytes move into the writer) and streams them
//! to a temporary file beside `--out`, which is renamed onto `--out` only once it is complete
//! and synced; on failure the temporary file is removed, so no half-written model is left.

use std::borrow::Cow;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, ValueEnum};
use half::f16;
use purebee_hub::{write_atomically, AtomicWriteError};
use purebee_memory::gguf::{GgufWriteError, GgufWriter, MetaArray, MetaValue};
use purebee_memory::quant::encode::{encode_i2_s, encode_tq1_0_row, encode_tq2_0_row, EncodeError};
use purebee_memory::DType;
use purebee_rng::SplitMix64;
use purebee_runtime::tokenizer::bytes::byte_to_char;

use crate::CliError;

/// The architecture name written to `general.architecture`.
pub const ARCH: &str = "bitnet-b1.58";

/// Which shape to synthesise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ShapeChoice {
    /// BitNet-b1.58-2B-4T: vocab 128256, dim 2560, 30 layers, 20/5 heads, ffn 6912.
    #[value(name = "bitnet-2b")]
    Bitnet2b,
    /// The tiny fixtures' shape: vocab 8192, dim 256, 4 layers, 8/2 heads, ffn 512.
    Tiny,
}

impl ShapeChoice {
    /// The shape's hyper-parameters.
    pub fn shape(self) -> &'static ModelShape {
        match self {
            ShapeChoice::Bitnet2b => &BITNET_2B,
            ShapeChoice::Tiny => &TINY,
        }
    }
}

/// The storage type of the linear weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum WeightFormat {
    /// bitnet.cpp's I2_S (2 bits per weight, one f32 scale per tensor).
    #[value(name = "i2_s")]
    I2S,
    /// ggml's TQ2_0 (2 bits per weight, an f16 scale per 256).
    #[value(name = "tq2_0")]
    Tq2_0,
    /// ggml's TQ1_0 (1.6875 bits per weight, an f16 scale per 256).
    #[value(name = "tq1_0")]
    Tq1_0,
}

impl WeightFormat {
    /// The dtype of the linear weights.
    pub fn dtype(self) -> DType {
        match self {
            WeightFormat::I2S => DType::I2_S,
            WeightFormat::Tq2_0 => DType::TQ2_0,
            WeightFormat::Tq1_0 => DType::TQ1_0,
        }
    }

    /// The `--weights` spelling.
    pub fn name(self) -> &'static str {
        match self {
            WeightFormat::I2S => "i2_s",
            WeightFormat::Tq2_0 => "tq2_0",
            WeightFormat::Tq1_0 => "tq1_0",
        }
    }

    /// `general.file_type` (llama.cpp's `llama_ftype`: 36 TQ1_0, 37 TQ2_0; bitnet.cpp's 40
    /// I2_S), as the fixtures have it.
    pub fn file_type(self) -> u32 {
        match self {
            WeightFormat::I2S => 40,
            WeightFormat::Tq1_0 => 36,
            WeightFormat::Tq2_0 => 37,
        }
    }
}

/// The hyper-parameters of a synthetic model.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelShape {
    /// A short name for `general.name` (owned when `--layers` changed the shape).
    pub name: Cow<'static, str>,
    /// Tokens in the vocabulary (rows of `token_embd`).
    pub n_vocab: usize,
    /// `embedding_length`.
    pub n_embd: usize,
    /// `block_count`.
    pub n_layer: usize,
    /// `attention.head_count`.
    pub n_head: usize,
    /// `attention.head_count_kv`.
    pub n_kv_head: usize,
    /// `feed_forward_length`.
    pub n_ff: usize,
    /// `context_length`.
    pub n_ctx: usize,
    /// `rope.freq_base`.
    pub rope_base: f32,
    /// `attention.layer_norm_rms_epsilon`.
    pub rms_eps: f32,
}

impl ModelShape {
    /// `n_embd / n_head`.
    pub fn head_dim(&self) -> usize {
        self.n_embd / self.n_head
    }

    /// `n_kv_head · head_dim`: the output width of `attn_k` and `attn_v`.
    pub fn kv_width(&self) -> usize {
        self.n_kv_head * self.head_dim()
    }
}

/// BitNet-b1.58-2B-4T (docs/formats.md § BitNet b1.58).
pub const BITNET_2B: ModelShape = ModelShape {
    name: Cow::Borrowed("bitnet-b1.58-2B-4T-shape"),
    n_vocab: 128_256,
    n_embd: 2560,
    n_layer: 30,
    n_head: 20,
    n_kv_head: 5,
    n_ff: 6912,
    n_ctx: 4096,
    rope_base: 500_000.0,
    rms_eps: 1e-5,
};

/// The committed tiny fixtures (`fixtures/bitnet-tiny`).
pub const TINY: ModelShape = ModelShape {
    name: Cow::Borrowed("tiny-bitnet-b1.58-256x4"),
    n_vocab: 8192,
    n_embd: 256,
    n_layer: 4,
    n_head: 8,
    n_kv_head: 2,
    n_ff: 512,
    n_ctx: 4096,
    rope_base: 500_000.0,
    rms_eps: 1e-5,
};

/// What a planned tensor holds, and so how its values are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The F16 token embedding, N(0, 0.25²).
    Embedding,
    /// An F32 norm weight, `1 + 0.1·N(0, 1)`.
    Norm,
    /// A ternary linear weight with one per-tensor scale.
    Linear,
}

/// One tensor of a synthetic model, before its values are drawn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedTensor {
    /// The GGUF tensor name.
    pub name: String,
    /// Its storage type.
    pub dtype: DType,
    /// Its dims in ggml order (`ne0`, the row length, first).
    pub ne: Vec<u64>,
    /// What it holds.
    pub role: Role,
}

impl PlannedTensor {
    /// Elements per row (`ne0`).
    pub fn cols(&self) -> usize {
        self.ne.first().map_or(1, |&c| c as usize)
    }

    /// Number of rows (the product of the other dims).
    pub fn rows(&self) -> usize {
        self.ne.iter().skip(1).map(|&d| d as usize).product()
    }

    /// Number of elements.
    pub fn n_elements(&self) -> usize {
        self.rows() * self.cols()
    }

    /// Its size in the file, without alignment padding (`None` if not addressable).
    pub fn n_bytes(&self) -> Option<usize> {
        self.dtype.tensor_bytes(self.rows(), self.cols())
    }
}

/// The tensors of a synthetic model of `shape` with linear weights of `weights`, in the
/// fixtures' order: `token_embd`, then per layer `attn_norm`, `attn_q`, `attn_k`, `attn_v`,
/// `attn_sub_norm`, `attn_output`, `ffn_norm`, `ffn_gate`, `ffn_up`, `ffn_sub_norm`,
/// `ffn_down`, then `output_norm`.
pub fn plan(shape: &ModelShape, weights: WeightFormat) -> Vec<PlannedTensor> {
    let (d, kv, ff) = (shape.n_embd as u64, shape.kv_width() as u64, shape.n_ff as u64);
    let t = |name: String, dtype: DType, ne: &[u64], role: Role| PlannedTensor { name, dtype, ne: ne.to_vec(), role };
    let norm = |name: String, n: u64| t(name, DType::F32, &[n], Role::Norm);
    let linear = |name: String, n_in: u64, n_out: u64| t(name, weights.dtype(), &[n_in, n_out], Role::Linear);
    let mut out = vec![t("token_embd.weight".into(), DType::F16, &[d, shape.n_vocab as u64], Role::Embedding)];
    for l in 0..shape.n_layer {
        let name = |s: &str| format!("blk.{l}.{s}.weight");
        out.extend([
            norm(name("attn_norm"), d),
            linear(name("attn_q"), d, d),
            linear(name("attn_k"), d, kv),
            linear(name("attn_v"), d, kv),
            norm(name("attn_sub_norm"), d),
            linear(name("attn_output"), d, d),
            norm(name("ffn_norm"), d),
            linear(name("ffn_gate"), d, ff),
            linear(name("ffn_up"), d, ff),
            norm(name("ffn_sub_norm"), ff),
            linear(name("ffn_down"), ff, d),
        ]);
    }
    out.push(norm("output_norm.weight".into(), d));
    out
}

// ---- The tokenizer ----------------------------------------------------------------------------

/// `tokenizer.ggml.token_type` of a normal token.
const TOKEN_NORMAL: i32 = 1;
/// `tokenizer.ggml.token_type` of a control token.
const TOKEN_CONTROL: i32 = 3;
/// The BOS token's id and text.
pub const BOS: (u32, &str) = (256, "<|begin_of_text|>");
/// The EOS token's id and text.
pub const EOS: (u32, &str) = (257, "<|end_of_text|>");

/// The synthetic vocabulary: token texts and `token_type`s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vocabulary {
    /// Token texts, id = index.
    pub tokens: Vec<String>,
    /// Their `tokenizer.ggml.token_type` values.
    pub types: Vec<i32>,
}

/// `n_vocab` tokens (at least 258): ids 0..=255 are the byte tokens, normal, spelled in GPT-2's
/// byte-level alphabet (id = byte value, so `Ġ` is id 32); 256 is BOS and 257 EOS (control);
/// every other id is the normal token `<synthetic_ID>`.
pub fn vocabulary(n_vocab: usize) -> Vocabulary {
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_to_char(b).to_string()).collect();
    let mut types = vec![TOKEN_NORMAL; 256];
    for (_, text) in [BOS, EOS] {
        tokens.push(text.to_string());
        types.push(TOKEN_CONTROL);
    }
    for id in tokens.len()..n_vocab {
        tokens.push(format!("<synthetic_{id}>"));
        types.push(TOKEN_NORMAL);
    }
    Vocabulary { tokens, types }
}

// ---- Random values ----------------------------------------------------------------------------

/// Draws of the synthetic weights' distributions, from the one SplitMix64 stream.
pub trait SynthDraws {
    /// An approximately standard normal value (see the implementation).
    fn normal(&mut self) -> f64;
    /// `n` trits with P(−1) = 0.3, P(0) = 0.4, P(+1) = 0.3.
    fn trits(&mut self, n: usize) -> Vec<i8>;
}

impl SynthDraws for SplitMix64 {
    /// An approximately standard normal value: the Irwin–Hall sum of twelve uniforms minus 6
    /// (mean 0, variance 1, |z| < 6). Each uniform is `(k + 0.5) / 2^21` for a 21-bit `k`,
    /// three per 64-bit draw, so the sum is exact in f64 and the result is the same on every
    /// platform.
    fn normal(&mut self) -> f64 {
        const MASK: u64 = (1 << 21) - 1;
        let mut sum = 0u64;
        for _ in 0..4 {
            let r = self.next_u64();
            sum += (r & MASK) + ((r >> 21) & MASK) + ((r >> 42) & MASK);
        }
        (sum as f64 + 6.0) / f64::from(1u32 << 21) - 6.0
    }

    /// `n` trits with P(−1) = 0.3, P(0) = 0.4, P(+1) = 0.3: each is a uniform decimal digit
    /// (0..=2 → −1, 3..=6 → 0, 7..=9 → +1), eight digits per 64-bit draw taken as the leading
    /// decimal digits of `r / 2^64` (bias below 10^8 / 2^64).
    fn trits(&mut self, n: usize) -> Vec<i8> {
        const TRIT_OF_DIGIT: [i8; 10] = [-1, -1, -1, 0, 0, 0, 0, 1, 1, 1];
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let mut r = self.next_u64();
            for _ in 0..(n - out.len()).min(8) {
                let wide = u128::from(r) * 10;
                out.push(TRIT_OF_DIGIT[(wide >> 64) as usize]);
                r = wide as u64;
            }
        }
        out
    }
}

/// The per-tensor scale of a linear weight with `n_in` inputs: `(0.9 + 0.2·U) / sqrt(0.6·n_in)`
/// rounded to f16 (0.6 is the fraction of nonzero trits).
fn linear_scale(rng: &mut SplitMix64, n_in: usize) -> f16 {
    f16::from_f64((0.9 + 0.2 * rng.uniform()) / (0.6 * n_in as f64).sqrt())
}

/// The bytes of a planned tensor, drawn from `rng`.
fn tensor_bytes(t: &PlannedTensor, rng: &mut SplitMix64) -> Result<Vec<u8>, SynthError> {
    let n = t.n_elements();
    match t.role {
        Role::Embedding => {
            let mut bytes = Vec::with_capacity(2 * n);
            for _ in 0..n {
                bytes.extend_from_slice(&f16::from_f64(0.25 * rng.normal()).to_le_bytes());
            }
            Ok(bytes)
        }
        Role::Norm => Ok((0..n).flat_map(|_| ((1.0 + 0.1 * rng.normal()) as f32).to_le_bytes()).collect()),
        Role::Linear => {
            let d = linear_scale(rng, t.cols());
            let trits = rng.trits(n);
            let encoded = match t.dtype {
                DType::TQ2_0 => encode_tq2_0_row(&trits, d),
                DType::TQ1_0 => encode_tq1_0_row(&trits, d),
                DType::I2_S => encode_i2_s(&trits, d.to_f32()),
                dtype => return Err(SynthError::NotTernary { tensor: t.name.clone(), dtype }),
            };
            encoded.map_err(|source| SynthError::Encode { tensor: t.name.clone(), source })
        }
    }
}

// ---- The command ------------------------------------------------------------------------------

/// Arguments of `synth`.
#[derive(Debug, Args)]
pub struct SynthArgs {
    /// The model shape.
    #[arg(long, value_enum)]
    pub shape: ShapeChoice,
    /// The storage type of the linear weights.
    #[arg(long, value_enum, default_value = "i2_s")]
    pub weights: WeightFormat,
    /// The seed of every random value; the same seed gives the same file, byte for byte.
    #[arg(long, default_value_t = 1234)]
    pub seed: u64,
    /// The GGUF file to write (replaced if it exists).
    #[arg(long)]
    pub out: PathBuf,
    /// The number of layers instead of the shape's own. The tiny shape at the 2B's 30
    /// layers has the 2B's dispatches per token with almost none of its work: what an
    /// engine costs per dispatch, apart from the bytes.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub layers: Option<u32>,
}

/// What went wrong writing a synthetic model.
#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    /// The encoder refused a tensor's trits (a bug of the plan: the shapes are whole blocks).
    #[error("encoding tensor '{tensor}': {source}")]
    Encode {
        /// The tensor.
        tensor: String,
        /// The encoder's error.
        source: EncodeError,
    },
    /// A linear weight planned with a non-ternary dtype (a bug of the plan).
    #[error("tensor '{tensor}': {dtype} is not a ternary type")]
    NotTernary {
        /// The tensor.
        tensor: String,
        /// Its planned dtype.
        dtype: DType,
    },
    /// The writer refused an entry or a tensor (a bug of the plan or the metadata).
    #[error("building the GGUF file: {0}")]
    Build(#[from] GgufWriteError),
    /// Writing or renaming the output failed.
    #[error("--out {path}: {reason}")]
    Write {
        /// The `--out` file.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
}

/// Builds the whole synthetic model in a [`GgufWriter`].
pub fn build(shape: &ModelShape, weights: WeightFormat, seed: u64) -> Result<GgufWriter, SynthError> {
    let mut w = GgufWriter::new();
    let k = |key: &str| format!("{ARCH}.{key}");
    let u32_of = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    w.add_str("general.architecture", ARCH)?;
    w.add_str("general.name", &format!("synthetic-{}-{}-seed{seed}", shape.name, weights.name()))?;
    w.add_str("general.type", "model")?;
    w.add_u32(&k("context_length"), u32_of(shape.n_ctx))?;
    w.add_u32(&k("embedding_length"), u32_of(shape.n_embd))?;
    w.add_u32(&k("block_count"), u32_of(shape.n_layer))?;
    w.add_u32(&k("feed_forward_length"), u32_of(shape.n_ff))?;
    w.add_u32(&k("attention.head_count"), u32_of(shape.n_head))?;
    w.add_u32(&k("attention.head_count_kv"), u32_of(shape.n_kv_head))?;
    w.add_u32(&k("rope.dimension_count"), u32_of(shape.head_dim()))?;
    w.add_f32(&k("rope.freq_base"), shape.rope_base)?;
    w.add_f32(&k("attention.layer_norm_rms_epsilon"), shape.rms_eps)?;
    w.add_str(&k("rope.scaling.type"), "linear")?;
    w.add_f32(&k("rope.scaling.factor"), 1.0)?;
    w.add_u32(&k("vocab_size"), u32_of(shape.n_vocab))?;
    w.add_u32("general.file_type", weights.file_type())?;
    w.add_bool("general.synthetic", true)?;
    w.add("synthetic.seed", MetaValue::U64(seed))?;
    w.add_bool("synthetic.scale_tensors", false)?;

    let vocab = vocabulary(shape.n_vocab);
    w.add_str("tokenizer.ggml.model", "gpt2")?;
    w.add_str("tokenizer.ggml.pre", "default")?;
    w.add_str_array("tokenizer.ggml.tokens", vocab.tokens)?;
    w.add("tokenizer.ggml.token_type", MetaArray::of_i32(vocab.types))?;
    w.add_str_array("tokenizer.ggml.merges", Vec::<String>::new())?;
    w.add_u32("tokenizer.ggml.bos_token_id", BOS.0)?;
    w.add_u32("tokenizer.ggml.eos_token_id", EOS.0)?;
    w.add_u32("tokenizer.ggml.unknown_token_id", BOS.0)?;
    w.add_u32("tokenizer.ggml.padding_token_id", EOS.0)?;
    w.add_bool("tokenizer.ggml.add_bos_token", true)?;
    w.add_bool("tokenizer.ggml.add_eos_token", false)?;

    for (index, t) in plan(shape, weights).iter().enumerate() {
        let mut rng = SplitMix64::stream(seed, index as u64);
        let bytes = tensor_bytes(t, &mut rng)?;
        w.add_tensor(&t.name, t.dtype, &t.ne, bytes)?;
    }
    Ok(w)
}

/// Writes `w` to `out` through a temporary file renamed onto it; returns the file's length.
fn write_model(w: &GgufWriter, out: &Path) -> Result<u64, SynthError> {
    let fail = |reason: String| SynthError::Write { path: out.to_path_buf(), reason };
    if out.file_name().is_none() {
        return Err(fail("is not a file name".to_string()));
    }
    write_atomically(out, |file| {
        let mut buffered = std::io::BufWriter::new(&mut *file);
        w.write_to(&mut buffered).and_then(|()| buffered.flush()).map_err(|e| fail(e.to_string()))?;
        drop(buffered);
        file.metadata().map(|m| m.len()).map_err(|e| fail(e.to_string()))
    })
}

impl From<AtomicWriteError> for SynthError {
    fn from(e: AtomicWriteError) -> SynthError {
        SynthError::Write { path: e.path, reason: format!("cannot {}: {}", e.action, e.source) }
    }
}

/// A byte count for people: exact, then in MiB or GiB.
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (mib, gib) = (self.0 as f64 / f64::from(1u32 << 20), self.0 as f64 / f64::from(1u32 << 30));
        if gib >= 1.0 {
            write!(f, "{} bytes ({gib:.2} GiB)", self.0)
        } else {
            write!(f, "{} bytes ({mib:.2} MiB)", self.0)
        }
    }
}

/// Runs `synth`: builds the model and writes it, with a summary on `out`.
pub fn run(args: &SynthArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let mut shape = args.shape.shape().clone();
    if let Some(layers) = args.layers {
        shape.n_layer = layers as usize;
        shape.name = Cow::Owned(format!("{}-{layers}-layers", shape.name));
    }
    let shape = &shape;
    // Fail before building (seconds for the 2B shape) when the output cannot be written.
    let dir = match args.out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        let reason = format!("the directory {} does not exist", dir.display());
        return Err(SynthError::Write { path: args.out.clone(), reason }.into());
    }
    let start = Instant::now();
    let w = build(shape, args.weights, args.seed)?;
    let file_len = write_model(&w, &args.out)?;
    let planned = plan(shape, args.weights);
    let parameters: usize = planned.iter().map(PlannedTensor::n_elements).sum();
    let tensor_bytes: usize = planned.iter().filter_map(PlannedTensor::n_bytes).sum();
    writeln!(
        out,
        "wrote {}: {}, {} layers ({}), {} tensors, {parameters} parameters, {tensor_bytes} bytes of tensor data, file {}, seed {}, in {:.1} s",
        args.out.display(),
        shape.name,
        shape.n_layer,
        args.weights.dtype(),
        planned.len(),
        Bytes(file_len),
        args.seed,
        start.elapsed().as_secs_f64()
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use purebee_memory::gguf::GgufFile;
    use purebee_runtime::tokenizer::Tokenizer;
    use purebee_runtime::ModelConfig;

    use super::*;

    /// Sums of the planned tensors: (tensor count, parameters, bytes) per dtype.
    fn totals(tensors: &[PlannedTensor], dtype: DType) -> (usize, usize, usize) {
        let of = tensors.iter().filter(|t| t.dtype == dtype);
        (of.clone().count(), of.clone().map(|t| t.n_elements()).sum(), of.map(|t| t.n_bytes().expect("small")).sum())
    }

    #[test]
    fn bitnet_2b_plan_has_the_2b_4t_shapes_and_sizes() {
        let s = &BITNET_2B;
        assert_eq!((s.n_vocab, s.n_embd, s.n_layer, s.n_head, s.n_kv_head), (128_256, 2560, 30, 20, 5));
        assert_eq!((s.head_dim(), s.kv_width(), s.n_ff, s.n_ctx), (128, 640, 6912, 4096));
        assert_eq!((s.rope_base, s.rms_eps), (500_000.0, 1e-5));
        let p = plan(s, WeightFormat::I2S);
        assert_eq!(p.len(), 1 + 30 * 11 + 1);
        let ne = |name: &str| p.iter().find(|t| t.name == name).map(|t| (t.dtype, t.ne.clone()));
        assert_eq!(ne("token_embd.weight"), Some((DType::F16, vec![2560, 128_256])));
        assert_eq!(ne("blk.29.attn_q.weight"), Some((DType::I2_S, vec![2560, 2560])));
        assert_eq!(ne("blk.0.attn_k.weight"), Some((DType::I2_S, vec![2560, 640])));
        assert_eq!(ne("blk.0.attn_v.weight"), Some((DType::I2_S, vec![2560, 640])));
        assert_eq!(ne("blk.0.attn_output.weight"), Some((DType::I2_S, vec![2560, 2560])));
        assert_eq!(ne("blk.0.ffn_gate.weight"), Some((DType::I2_S, vec![2560, 6912])));
        assert_eq!(ne("blk.0.ffn_up.weight"), Some((DType::I2_S, vec![2560, 6912])));
        assert_eq!(ne("blk.0.ffn_down.weight"), Some((DType::I2_S, vec![6912, 2560])));
        assert_eq!(ne("blk.0.ffn_sub_norm.weight"), Some((DType::F32, vec![6912])));
        assert_eq!(ne("blk.0.attn_sub_norm.weight"), Some((DType::F32, vec![2560])));
        assert_eq!(ne("output_norm.weight"), Some((DType::F32, vec![2560])));
        assert_eq!(ne("output.weight"), None, "the LM head is tied");
        // Linear elements per layer: q, o 2560·2560; k, v 2560·640; gate, up, down 2560·6912
        // = 13,107,200 + 3,276,800 + 53,084,160 = 69,468,160. I2_S: n/4 + 32 per tensor.
        assert_eq!(totals(&p, DType::I2_S), (210, 30 * 69_468_160, 30 * (69_468_160 / 4 + 7 * 32)));
        assert_eq!(totals(&p, DType::I2_S).2, 521_017_920);
        // Norms per layer: 3·2560 + 6912 = 14,592, plus output_norm's 2560.
        assert_eq!(totals(&p, DType::F32), (121, 30 * 14_592 + 2560, 4 * (30 * 14_592 + 2560)));
        assert_eq!(totals(&p, DType::F16), (1, 328_335_360, 656_670_720));
        let all: usize = p.iter().map(|t| t.n_bytes().expect("small")).sum();
        assert_eq!(all, 1_179_449_920);
        assert_eq!(p.iter().map(PlannedTensor::n_elements).sum::<usize>(), 2_412_820_480);
        // The block formats: 69,468,160 / 256 = 271,360 blocks per layer.
        assert_eq!(totals(&plan(s, WeightFormat::Tq2_0), DType::TQ2_0).2, 30 * 271_360 * 66);
        assert_eq!(totals(&plan(s, WeightFormat::Tq1_0), DType::TQ1_0).2, 30 * 271_360 * 54);
    }

    #[test]
    fn tiny_model_matches_the_fixture_layout() {
        let fixture =
            GgufFile::open(concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/bitnet-tiny/tiny_b158_i2_s.gguf"))
                .expect("fixture");
        let planned = plan(&TINY, WeightFormat::I2S);
        let theirs: Vec<(&str, DType, &[u64])> =
            fixture.tensors().iter().map(|t| (t.name.as_str(), t.dtype, t.ne.as_slice())).collect();
        let ours: Vec<(&str, DType, &[u64])> =
            planned.iter().map(|t| (t.name.as_str(), t.dtype, t.ne.as_slice())).collect();
        assert_eq!(ours, theirs);

        let ours = GgufFile::from_bytes("synthetic", &build(&TINY, WeightFormat::I2S, 7).expect("builds").to_bytes())
            .expect("reads back");
        // Every fixture key but the merges' content and the chat template, plus ours.
        let keys = |f: &GgufFile| f.metadata().iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
        let mut expected: Vec<String> = keys(&fixture).into_iter().filter(|k| k != "tokenizer.chat_template").collect();
        expected.push("general.synthetic".into());
        expected.sort();
        let mut got = keys(&ours);
        got.sort();
        assert_eq!(got, expected);
        assert_eq!(ModelConfig::from_gguf(&ours).expect("config"), ModelConfig::from_gguf(&fixture).expect("config"));
        assert!(ours.get_bool("general.synthetic").expect("bool"));
        assert_eq!(ours.get_u64("synthetic.seed").expect("u64"), 7);
    }

    #[test]
    fn the_tokenizer_loads_and_spells_bytes() {
        let f = GgufFile::from_bytes("synthetic", &build(&TINY, WeightFormat::Tq2_0, 1).expect("builds").to_bytes())
            .expect("reads back");
        let tok = Tokenizer::from_gguf(&f).expect("a valid gpt2 tokenizer");
        assert_eq!(tok.token_count(), 8192);
        assert_eq!((tok.bos(), tok.eos(), tok.add_bos()), (Some(256), Some(257), true));
        assert_eq!(tok.encode("Hi é", true, true), vec![256, 72, 105, 32, 0xc3, 0xa9]);
        assert_eq!(tok.decode(&[72, 105, 32, 0xc3, 0xa9, 300]), "Hi é<synthetic_300>");
        assert!(tok.is_control(256) && tok.is_control(257) && !tok.is_control(258));
        assert!(tok.is_eog(257));
    }

    #[test]
    fn the_draws_have_the_documented_distributions() {
        let mut rng = SplitMix64::new(99);
        let trits = rng.trits(1_000_003);
        assert_eq!(trits.len(), 1_000_003);
        let share = |v: i8| trits.iter().filter(|&&t| t == v).count() as f64 / trits.len() as f64;
        for (v, p) in [(-1, 0.3), (0, 0.4), (1, 0.3)] {
            assert!((share(v) - p).abs() < 0.003, "P({v}) = {}", share(v));
        }
        let z: Vec<f64> = (0..200_000).map(|_| rng.normal()).collect();
        let mean = z.iter().sum::<f64>() / z.len() as f64;
        let var = z.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / z.len() as f64;
        assert!(mean.abs() < 0.01 && (var - 1.0).abs() < 0.01, "mean {mean}, variance {var}");
        assert!(z.iter().all(|x| x.abs() < 6.0));
        // Vigna's splitmix64.c from state 0: the first output.
        assert_eq!(SplitMix64::new(0).next_u64(), 0xE220_A839_7B1D_CDAF);
        // The scale is exact in f16 and of the size that keeps outputs near unit variance.
        let s = linear_scale(&mut rng, 2560);
        let expected = 1.0 / (0.6f64 * 2560.0).sqrt();
        assert!((f64::from(s.to_f32()) / expected - 1.0).abs() <= 0.11, "{s} vs {expected}");
    }
}
