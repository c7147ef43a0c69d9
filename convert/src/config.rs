//! A checkpoint's `config.json`: which architecture, and its hyper-parameters.

use std::path::Path;

use serde_json::Value;

use crate::json::JsonFile;
use crate::ConvertError;

/// The architectures this converter writes, by the GGUF architecture they become.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// BitNet b1.58 with a relu² FFN (Microsoft's 2B-4T): GGUF `bitnet-b1.58`.
    BitnetB158,
    /// BitNet b1.58 with a SiLU FFN (1bitLLM's models): GGUF `bitnet`.
    Bitnet,
    /// Llama: GGUF `llama`.
    Llama,
}

/// The `architectures` values accepted, for the error that lists them.
pub const SUPPORTED: &str = "BitNetForCausalLM, BitnetForCausalLM, LlamaForCausalLM";

impl Arch {
    /// The GGUF `general.architecture`, which is also its keys' prefix.
    pub fn gguf_name(self) -> &'static str {
        match self {
            Arch::BitnetB158 => "bitnet-b1.58",
            Arch::Bitnet => "bitnet",
            Arch::Llama => "llama",
        }
    }

    /// Whether its projections are trained ternary (BitNet), so always ternarized.
    pub fn is_ternary(self) -> bool {
        matches!(self, Arch::BitnetB158 | Arch::Bitnet)
    }

    /// Whether each layer has the sub-norms before the attention output and FFN down
    /// projections.
    pub fn has_sub_norms(self) -> bool {
        self.is_ternary()
    }

    /// Whether Q and K get llama.cpp's permutation to adjacent RoPE pairs. BitNet's are kept
    /// as the checkpoint stores them (its GGUF architectures rotate NEOX pairs).
    pub fn permutes_qk(self) -> bool {
        self == Arch::Llama
    }
}

/// What `config.json` says.
#[derive(Clone, Debug)]
pub struct HfConfig {
    /// The architecture it converts to.
    pub arch: Arch,
    /// `hidden_size`.
    pub hidden: usize,
    /// `intermediate_size`.
    pub ff: usize,
    /// `num_hidden_layers`.
    pub layers: usize,
    /// `num_attention_heads`.
    pub heads: usize,
    /// `num_key_value_heads` (default: `heads`).
    pub kv_heads: usize,
    /// `rms_norm_eps` (default 1e-6).
    pub rms_eps: f32,
    /// `rope_theta` (default 10000).
    pub rope_theta: f32,
    /// `max_position_embeddings` (default 2048).
    pub context: usize,
    /// `vocab_size`: the embedding's rows.
    pub vocab: usize,
    /// `tie_word_embeddings`: the LM head is the embedding.
    pub tied: bool,
    /// `bos_token_id` (generation_config.json's, else config.json's), used when
    /// tokenizer_config.json names none.
    pub bos: Option<u32>,
    /// `eos_token_id` likewise (the first, when a list).
    pub eos: Option<u32>,
}

impl HfConfig {
    /// Reads and checks `dir/config.json`.
    pub fn read(dir: &Path) -> Result<HfConfig, ConvertError> {
        let path = dir.join("config.json");
        if !path.exists() {
            return Err(ConvertError::Missing { path, why: "the model's configuration".to_string() });
        }
        let c = JsonFile::open(&path)?;
        let name = match c.get("architectures") {
            Some(Value::Array(a)) if a.len() == 1 => a[0].as_str().unwrap_or_default().to_string(),
            Some(v) => return Err(c.error("architectures", format!("{v} is not one architecture name"))),
            None => return Err(c.error("architectures", "missing")),
        };
        let act = c.opt_str("hidden_act")?.unwrap_or("silu");
        let arch = match (name.as_str(), act) {
            ("BitNetForCausalLM" | "BitnetForCausalLM", "relu2") => Arch::BitnetB158,
            ("BitNetForCausalLM" | "BitnetForCausalLM", "silu") => Arch::Bitnet,
            ("LlamaForCausalLM", "silu") => Arch::Llama,
            ("BitNetForCausalLM" | "BitnetForCausalLM" | "LlamaForCausalLM", other) => {
                return Err(c.error("hidden_act", format!("'{other}' is not supported for {name} (relu2 or silu)")))
            }
            _ => return Err(ConvertError::Architecture { path, name, supported: SUPPORTED }),
        };
        let hidden = c.usize("hidden_size")?;
        let heads = c.usize("num_attention_heads")?;
        let kv_heads = c.opt_usize("num_key_value_heads")?.unwrap_or(heads);
        let mut config = HfConfig {
            arch,
            hidden,
            ff: c.usize("intermediate_size")?,
            layers: c.usize("num_hidden_layers")?,
            heads,
            kv_heads,
            rms_eps: c.opt_f64("rms_norm_eps")?.unwrap_or(1e-6) as f32,
            rope_theta: c.opt_f64("rope_theta")?.unwrap_or(10000.0) as f32,
            context: c.opt_usize("max_position_embeddings")?.unwrap_or(2048),
            vocab: c.usize("vocab_size")?,
            tied: c.opt_bool("tie_word_embeddings")?.unwrap_or(false),
            bos: token_id(&c, "bos_token_id")?,
            eos: token_id(&c, "eos_token_id")?,
        };
        // generation_config.json's ids, what `generate` uses, before config.json's.
        let generation = dir.join("generation_config.json");
        if generation.exists() {
            let g = JsonFile::open(&generation)?;
            config.bos = token_id(&g, "bos_token_id")?.or(config.bos);
            config.eos = token_id(&g, "eos_token_id")?.or(config.eos);
        }
        let even_heads = heads != 0 && hidden % heads == 0 && (hidden / heads) % 2 == 0;
        if !even_heads || kv_heads == 0 || heads % kv_heads != 0 {
            return Err(c.error(
                "num_attention_heads",
                format!("{heads} heads ({kv_heads} KV heads) do not split hidden_size {hidden} into even head sizes"),
            ));
        }
        if let Some(scaling) = c.get("rope_scaling") {
            return Err(c.error("rope_scaling", format!("{scaling}: RoPE scaling is not supported")));
        }
        for (key, n) in [
            ("hidden_size", hidden),
            ("intermediate_size", config.ff),
            ("num_hidden_layers", config.layers),
            ("vocab_size", config.vocab),
        ] {
            if n == 0 {
                return Err(c.error(key, "is 0"));
            }
        }
        Ok(config)
    }

    /// Elements per head.
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }

    /// The width of K and V.
    pub fn kv_width(&self) -> usize {
        self.kv_heads * self.head_dim()
    }
}

/// A token id key: a number, or the first of a list (transformers allows both for EOS).
fn token_id(c: &JsonFile, key: &str) -> Result<Option<u32>, ConvertError> {
    let v = match c.get(key) {
        None => return Ok(None),
        Some(Value::Array(a)) => match a.first() {
            Some(v) => v,
            None => return Ok(None),
        },
        Some(v) => v,
    };
    v.as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .map(Some)
        .ok_or_else(|| c.error(key, format!("{v} is not a token id")))
}
