//! What a synthetic model is: its architecture, hyper-parameters and storage types.

use std::borrow::Cow;

use purebee_memory::DType;

use crate::Vocabulary;

/// The architecture written to `general.architecture`, which also decides the sub-norms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// `bitnet-b1.58` (BitNet-b1.58-2B-4T: relu², sub-norms).
    BitnetB158,
    /// `bitnet` (SiLU, with sub-norms as the runtime reads them).
    Bitnet,
    /// `llama`: no sub-norms.
    Llama,
}

impl Arch {
    /// The `general.architecture` value, also the prefix of the hyper-parameter keys.
    pub fn name(self) -> &'static str {
        match self {
            Arch::BitnetB158 => "bitnet-b1.58",
            Arch::Bitnet => "bitnet",
            Arch::Llama => "llama",
        }
    }

    /// Whether the layers have `attn_sub_norm` and `ffn_sub_norm`.
    pub fn has_sub_norms(self) -> bool {
        matches!(self, Arch::BitnetB158 | Arch::Bitnet)
    }
}

/// The hyper-parameters of a synthetic model.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelShape {
    /// A short name for `general.name` (owned when a caller changed the shape).
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

/// Everything [`build`](crate::build) needs besides the seed.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelSpec {
    /// The architecture.
    pub arch: Arch,
    /// The hyper-parameters.
    pub shape: ModelShape,
    /// The storage type of the layers' linear weights.
    pub weights: DType,
    /// The storage type of `token_embd.weight`.
    pub embedding: DType,
    /// The storage type of `output.weight`; `None` ties the head to the embedding.
    pub output: Option<DType>,
    /// The tokenizer; its token count must be `shape.n_vocab`.
    pub vocabulary: Vocabulary,
}

impl ModelSpec {
    /// A BitNet b1.58 model of `shape` as `purebee-rs synth` writes it: `weights` for every
    /// linear, an F16 embedding tied to the head, and the byte-level vocabulary of
    /// [`Vocabulary::bytes`].
    pub fn bitnet(shape: ModelShape, weights: DType) -> ModelSpec {
        let vocabulary = Vocabulary::bytes(shape.n_vocab);
        ModelSpec { arch: Arch::BitnetB158, shape, weights, embedding: DType::F16, output: None, vocabulary }
    }
}
