//! Which checkpoint tensor becomes which GGUF tensor, with what role and shape: every name is
//! accounted for (a tensor the architecture does not have is an error naming it) and every
//! shape is checked against `config.json` before anything is written.

use crate::config::HfConfig;
use crate::safetensors::{Checkpoint, StDtype};
use crate::ConvertError;

/// What a tensor is to the model, which decides how it is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The token embedding (also the LM head when tied).
    Embedding,
    /// An untied LM head.
    LmHead,
    /// An RMS norm's weight: stored as F32.
    Norm,
    /// A projection (Q, K, V, attention output, gate, up, down).
    Projection,
}

/// How a projection's Q/K rows are reordered for adjacent RoPE pairs (llama.cpp's
/// `LlamaModel.permute`): the head count it splits by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Permute {
    /// The heads (of Q, or of K).
    pub heads: usize,
}

/// Where a projection's values come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// One float tensor.
    Float(String),
    /// BitNet's packed release: a U8 `weight` of four trits a byte, and its `weight_scale`.
    Packed {
        /// The U8 weight.
        weight: String,
        /// Its one-element scale.
        scale: String,
    },
}

/// One tensor of the output.
#[derive(Clone, Debug)]
pub struct Planned {
    /// Its GGUF name.
    pub gguf: String,
    /// Where its values come from.
    pub source: Source,
    /// What it is to the model.
    pub role: Role,
    /// `[rows, cols]` (rows outermost) or `[n]`.
    pub shape: Vec<usize>,
    /// The Q/K permutation, for Llama.
    pub permute: Option<Permute>,
}

impl Planned {
    /// The checkpoint name of its (first) source tensor.
    pub fn source_name(&self) -> &str {
        match &self.source {
            Source::Float(n) => n,
            Source::Packed { weight, .. } => weight,
        }
    }
}

/// The plan of every output tensor, in GGUF order: the embedding, each layer, the final
/// norm and the LM head.
pub fn plan(c: &HfConfig, ckpt: &Checkpoint) -> Result<Vec<Planned>, ConvertError> {
    let (d, ff, kv) = (c.hidden, c.ff, c.kv_width());
    let mut out = Vec::new();
    let mut used: Vec<String> = Vec::new();
    let mut take = |gguf: String, hf: &[String], role: Role, shape: Vec<usize>, permute: Option<Permute>| {
        let found = hf.iter().find(|n| ckpt.get(n).is_some() || ckpt.get(&format!("{n}_scale")).is_some());
        let Some(name) = found else {
            return Err(ConvertError::Tensor {
                path: ckpt.path_of(""),
                tensor: hf[0].clone(),
                reason: "missing from the checkpoint".to_string(),
            });
        };
        let source = source(ckpt, name, role, &shape)?;
        if let Source::Packed { scale, .. } = &source {
            used.push(scale.clone());
        }
        used.push(name.clone());
        out.push(Planned { gguf, source, role, shape, permute });
        Ok(())
    };
    take("token_embd.weight".into(), &["model.embed_tokens.weight".into()], Role::Embedding, vec![c.vocab, d], None)?;
    for i in 0..c.layers {
        let p = |s: &str| format!("model.layers.{i}.{s}");
        let g = |s: &str| format!("blk.{i}.{s}.weight");
        let (q_perm, k_perm) = if c.arch.permutes_qk() {
            (Some(Permute { heads: c.heads }), Some(Permute { heads: c.kv_heads }))
        } else {
            (None, None)
        };
        take(g("attn_norm"), &[p("input_layernorm.weight")], Role::Norm, vec![d], None)?;
        take(g("attn_q"), &[p("self_attn.q_proj.weight")], Role::Projection, vec![d, d], q_perm)?;
        take(g("attn_k"), &[p("self_attn.k_proj.weight")], Role::Projection, vec![kv, d], k_perm)?;
        take(g("attn_v"), &[p("self_attn.v_proj.weight")], Role::Projection, vec![kv, d], None)?;
        if c.arch.has_sub_norms() {
            let names = [p("self_attn.attn_sub_norm.weight"), p("self_attn.inner_attn_ln.weight")];
            take(g("attn_sub_norm"), &names, Role::Norm, vec![d], None)?;
        }
        take(g("attn_output"), &[p("self_attn.o_proj.weight")], Role::Projection, vec![d, d], None)?;
        take(g("ffn_norm"), &[p("post_attention_layernorm.weight")], Role::Norm, vec![d], None)?;
        take(g("ffn_gate"), &[p("mlp.gate_proj.weight")], Role::Projection, vec![ff, d], None)?;
        take(g("ffn_up"), &[p("mlp.up_proj.weight")], Role::Projection, vec![ff, d], None)?;
        if c.arch.has_sub_norms() {
            let names = [p("mlp.ffn_sub_norm.weight"), p("mlp.ffn_layernorm.weight")];
            take(g("ffn_sub_norm"), &names, Role::Norm, vec![ff], None)?;
        }
        take(g("ffn_down"), &[p("mlp.down_proj.weight")], Role::Projection, vec![d, ff], None)?;
    }
    take("output_norm.weight".into(), &["model.norm.weight".into()], Role::Norm, vec![d], None)?;
    let has_head = ckpt.get("lm_head.weight").is_some();
    if has_head && !c.tied {
        take("output.weight".into(), &["lm_head.weight".into()], Role::LmHead, vec![c.vocab, d], None)?;
    } else if has_head {
        // A tied model may store its head anyway: it is the embedding, and is not written.
        used.push("lm_head.weight".into());
    }
    // Everything else must be something the model does not need at all.
    let mut unknown: Vec<&str> =
        ckpt.names().filter(|n| !used.iter().any(|u| u == n) && !n.ends_with("rotary_emb.inv_freq")).collect();
    unknown.sort_unstable();
    if let Some(name) = unknown.first() {
        return Err(ConvertError::Tensor {
            path: ckpt.path_of(name),
            tensor: name.to_string(),
            reason: format!("not a tensor of {} (and {} more unknown)", c.arch.gguf_name(), unknown.len() - 1),
        });
    }
    Ok(out)
}

/// The source of `name` (a float tensor, or a packed weight with its scale), its shape and
/// dtype checked against `shape`.
fn source(ckpt: &Checkpoint, name: &str, role: Role, shape: &[usize]) -> Result<Source, ConvertError> {
    let scale_name = format!("{name}_scale");
    let wrong = |path, reason: String| ConvertError::Tensor { path, tensor: name.to_string(), reason };
    let Some((file, t)) = ckpt.get(name) else {
        return Err(wrong(ckpt.path_of(&scale_name), "has a scale but no weight".to_string()));
    };
    if t.dtype == StDtype::U8 {
        // Packed: four trits a byte along the rows, and a one-element scale.
        let packed = role == Role::Projection && shape.len() == 2 && shape[0].is_multiple_of(4);
        if !packed || t.shape != [shape[0] / 4, shape[1]] {
            return Err(wrong(
                file.path().to_path_buf(),
                format!("U8 of shape {:?} is not a packed ternary weight of shape {shape:?}", t.shape),
            ));
        }
        let Some((sfile, s)) = ckpt.get(&scale_name) else {
            return Err(wrong(file.path().to_path_buf(), format!("a packed weight needs its '{scale_name}'")));
        };
        if s.numel() != 1 || s.dtype == StDtype::U8 {
            return Err(ConvertError::Tensor {
                path: sfile.path().to_path_buf(),
                tensor: scale_name,
                reason: format!("{:?} of shape {:?} is not one float", s.dtype, s.shape),
            });
        }
        return Ok(Source::Packed { weight: name.to_string(), scale: scale_name });
    }
    if t.shape != shape {
        return Err(wrong(
            file.path().to_path_buf(),
            format!("shape {:?}, but config.json implies {shape:?}", t.shape),
        ));
    }
    Ok(Source::Float(name.to_string()))
}
