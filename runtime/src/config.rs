//! A model's hyper-parameters, read from GGUF metadata and checked for consistency.

use purebee_isa::ops::RopeStyle;
use purebee_memory::gguf::GgufFile;

use crate::ModelError;

/// The tokenizer's vocabulary, one entry per token id (checked against the embedding rows).
const TOKENS_KEY: &str = "tokenizer.ggml.tokens";

/// The architectures purebee runs, by their `general.architecture` name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Architecture {
    /// `bitnet-b1.58`: Microsoft's BitNet b1.58 2B-4T GGUF (relu² FFN).
    BitnetB158,
    /// `bitnet-25`: the first upload of the same model (relu² FFN).
    Bitnet25,
    /// `bitnet`: upstream llama.cpp's BitNet (1bitLLM models; silu FFN).
    Bitnet,
    /// `llama`: Llama 2/3 and the models converted like them (SmolLM2): no sub-norms, normal
    /// (adjacent-pair) RoPE, silu FFN, block-quantized or float weights.
    Llama,
}

impl Architecture {
    /// Every supported architecture name.
    pub const SUPPORTED: [&'static str; 4] = ["bitnet-b1.58", "bitnet-25", "bitnet", "llama"];

    /// The architecture of a `general.architecture` value.
    pub fn from_name(name: &str) -> Option<Architecture> {
        match name {
            "bitnet-b1.58" => Some(Architecture::BitnetB158),
            "bitnet-25" => Some(Architecture::Bitnet25),
            "bitnet" => Some(Architecture::Bitnet),
            "llama" => Some(Architecture::Llama),
            _ => None,
        }
    }

    /// The name, which is also the prefix of its metadata keys.
    pub fn name(self) -> &'static str {
        match self {
            Architecture::BitnetB158 => "bitnet-b1.58",
            Architecture::Bitnet25 => "bitnet-25",
            Architecture::Bitnet => "bitnet",
            Architecture::Llama => "llama",
        }
    }

    /// The FFN activation. Choosing it by name matters: silu on the 2B-4T model gives wrong
    /// logits (its HF config says `hidden_act: relu2`).
    pub fn ffn_activation(self) -> FfnActivation {
        match self {
            Architecture::BitnetB158 | Architecture::Bitnet25 => FfnActivation::Relu2,
            Architecture::Bitnet | Architecture::Llama => FfnActivation::Silu,
        }
    }

    /// The RoPE pairing: NEOX for BitNet (its Q/K weights are not permuted), normal for
    /// Llama (the converter permuted Q/K for adjacent pairs; llama.cpp's
    /// `llama_model_rope_type`).
    pub fn rope_style(self) -> RopeStyle {
        match self {
            Architecture::BitnetB158 | Architecture::Bitnet25 | Architecture::Bitnet => RopeStyle::Neox,
            Architecture::Llama => RopeStyle::Normal,
        }
    }

    /// True for BitNet's extra RMS norms before the attention output and FFN down
    /// projections (`attn_sub_norm`, `ffn_sub_norm`).
    pub fn has_sub_norms(self) -> bool {
        match self {
            Architecture::BitnetB158 | Architecture::Bitnet25 | Architecture::Bitnet => true,
            Architecture::Llama => false,
        }
    }
}

/// The FFN's gate activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FfnActivation {
    /// `max(x, 0)²`.
    Relu2,
    /// `x · σ(x)`.
    Silu,
}

/// Hyper-parameters of a model.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    /// The architecture.
    pub arch: Architecture,
    /// `embedding_length`.
    pub n_embd: usize,
    /// `block_count`.
    pub n_layer: usize,
    /// `feed_forward_length`.
    pub n_ff: usize,
    /// `attention.head_count`.
    pub n_head: usize,
    /// `attention.head_count_kv` (defaults to `n_head`).
    pub n_kv_head: usize,
    /// `n_embd / n_head`.
    pub head_dim: usize,
    /// `rope.dimension_count` (defaults to `head_dim`).
    pub rot_dim: usize,
    /// `context_length`: the context the model was trained for.
    pub n_ctx_train: usize,
    /// Rows of the token embedding (checked against `vocab_size` and the length of
    /// `tokenizer.ggml.tokens` when present).
    pub n_vocab: usize,
    /// `attention.layer_norm_rms_epsilon`.
    pub rms_eps: f32,
    /// `rope.freq_base` (defaults to 10000).
    pub rope_base: f32,
}

impl ModelConfig {
    /// Reads and checks the hyper-parameters of a GGUF model.
    pub fn from_gguf(f: &GgufFile) -> Result<ModelConfig, ModelError> {
        let file = f.path().display().to_string();
        let arch_name = f.architecture()?;
        let arch = Architecture::from_name(arch_name).ok_or_else(|| ModelError::UnsupportedArchitecture {
            file: file.clone(),
            arch: arch_name.to_string(),
            supported: Architecture::SUPPORTED.join(", "),
        })?;
        let p = arch.name();
        let key = |k: &str| format!("{p}.{k}");
        let n_embd = f.get_usize(&key("embedding_length"))?;
        let n_layer = f.get_usize(&key("block_count"))?;
        let n_ff = f.get_usize(&key("feed_forward_length"))?;
        let n_head = f.get_usize(&key("attention.head_count"))?;
        let n_kv_head = match f.get(&key("attention.head_count_kv")) {
            Some(_) => f.get_usize(&key("attention.head_count_kv"))?,
            None => n_head,
        };
        let n_ctx_train = f.get_usize(&key("context_length"))?;
        let rms_eps = f.get_f32(&key("attention.layer_norm_rms_epsilon"))?;
        let rope_base = match f.get(&key("rope.freq_base")) {
            Some(_) => f.get_f32(&key("rope.freq_base"))?,
            None => 10000.0,
        };
        let bad = |k: &str, reason: String| ModelError::Inconsistent { file: file.clone(), key: key(k), reason };
        for (k, v) in [
            ("embedding_length", n_embd),
            ("block_count", n_layer),
            ("feed_forward_length", n_ff),
            ("attention.head_count", n_head),
            ("attention.head_count_kv", n_kv_head),
            ("context_length", n_ctx_train),
        ] {
            if v == 0 {
                return Err(bad(k, "must be > 0".to_string()));
            }
        }
        if n_embd % n_head != 0 {
            return Err(bad("attention.head_count", format!("{n_head} heads do not divide embedding_length {n_embd}")));
        }
        if n_head % n_kv_head != 0 {
            return Err(bad("attention.head_count_kv", format!("{n_kv_head} kv heads do not divide {n_head} heads")));
        }
        let head_dim = n_embd / n_head;
        let rot_dim = match f.get(&key("rope.dimension_count")) {
            Some(_) => f.get_usize(&key("rope.dimension_count"))?,
            None => head_dim,
        };
        if rot_dim == 0 || rot_dim % 2 != 0 || rot_dim > head_dim {
            return Err(bad("rope.dimension_count", format!("{rot_dim} must be even, > 0 and <= head_dim {head_dim}")));
        }
        if !(rms_eps.is_finite() && rms_eps >= 0.0) {
            return Err(bad("attention.layer_norm_rms_epsilon", format!("{rms_eps} must be finite and >= 0")));
        }
        if !(rope_base.is_finite() && rope_base > 0.0) {
            return Err(bad("rope.freq_base", format!("{rope_base} must be finite and > 0")));
        }
        let embd = f.tensor_info("token_embd.weight")?;
        let n_vocab = embd.shape.rows();
        if let Some(_v) = f.get(&key("vocab_size")) {
            let declared = f.get_usize(&key("vocab_size"))?;
            if declared != n_vocab {
                return Err(bad(
                    "vocab_size",
                    format!("{declared} does not match the {n_vocab} rows of token_embd.weight"),
                ));
            }
        }
        // Every token needs an embedding row and every row a token: a shorter vocabulary
        // leaves ids the model can sample but nothing can print, a longer one ids the
        // tokenizer makes but the model cannot run. llama.cpp sizes token_embd by the
        // token count and refuses any other shape.
        if f.get(TOKENS_KEY).is_some() {
            let n_tokens = f.get_array(TOKENS_KEY)?.len();
            if n_tokens != n_vocab {
                return Err(ModelError::Inconsistent {
                    file: file.clone(),
                    key: TOKENS_KEY.to_string(),
                    reason: format!("{n_tokens} tokens, but token_embd.weight has {n_vocab} rows (one per token)"),
                });
            }
        }
        Ok(ModelConfig {
            arch,
            n_embd,
            n_layer,
            n_ff,
            n_head,
            n_kv_head,
            head_dim,
            rot_dim,
            n_ctx_train,
            n_vocab,
            rms_eps,
            rope_base,
        })
    }

    /// Width of the keys and values of one position: `n_kv_head · head_dim`.
    pub fn kv_width(&self) -> usize {
        self.n_kv_head * self.head_dim
    }
}
