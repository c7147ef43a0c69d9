//! The whole synthetic model in a GGUF writer.

use purebee_memory::gguf::{GgufWriteError, GgufWriter, MetaValue};
use purebee_memory::quant::encode::EncodeError;
use purebee_memory::DType;
use purebee_rng::SplitMix64;

use crate::{plan, tensor_values, ModelSpec};

/// What went wrong building a synthetic model: each is a bug of the spec, not of any input.
#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    /// The encoder refused a tensor's values (its rows are not whole blocks).
    #[error("encoding tensor '{tensor}': {source}")]
    Encode {
        /// The tensor.
        tensor: String,
        /// The encoder's error.
        source: EncodeError,
    },
    /// The vocabulary's token count is not the shape's `n_vocab`.
    #[error("the vocabulary has {tokens} tokens but the shape says n_vocab = {n_vocab}")]
    Vocabulary {
        /// Tokens in the vocabulary.
        tokens: usize,
        /// The shape's vocabulary size.
        n_vocab: usize,
    },
    /// The writer refused an entry or a tensor.
    #[error("building the GGUF file: {0}")]
    Build(#[from] GgufWriteError),
}

/// `general.file_type` for linear weights of `dtype`, as the fixtures have it
/// ([`DType::llama_file_type`]).
pub fn file_type(dtype: DType) -> Option<u32> {
    dtype.llama_file_type()
}

/// Builds the model of `spec` with every value drawn from `seed`. Besides the architecture's
/// hyper-parameters and the tokenizer it writes `general.synthetic = true` and
/// `synthetic.seed`. The writer holds every tensor's bytes (about 1.18 GB for the 2B shape).
pub fn build(spec: &ModelSpec, seed: u64) -> Result<GgufWriter, SynthError> {
    let shape = &spec.shape;
    if spec.vocabulary.tokens.len() != shape.n_vocab {
        return Err(SynthError::Vocabulary { tokens: spec.vocabulary.tokens.len(), n_vocab: shape.n_vocab });
    }
    let mut w = GgufWriter::new();
    let arch = spec.arch.name();
    let k = |key: &str| format!("{arch}.{key}");
    let u32_of = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    w.add_str("general.architecture", arch)?;
    w.add_str("general.name", &format!("synthetic-{}-{}-seed{seed}", shape.name, spec.weights.name().to_lowercase()))?;
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
    if let Some(file_type) = file_type(spec.weights) {
        w.add_u32("general.file_type", file_type)?;
    }
    w.add_bool("general.synthetic", true)?;
    w.add("synthetic.seed", MetaValue::U64(seed))?;
    w.add_bool("synthetic.scale_tensors", false)?;
    spec.vocabulary.write(&mut w)?;

    for (index, t) in plan(spec).iter().enumerate() {
        let mut rng = SplitMix64::stream(seed, index as u64);
        let bytes = tensor_values(t, &mut rng)?;
        w.add_tensor(&t.name, t.dtype, &t.ne, bytes)?;
    }
    Ok(w)
}
