//! The tensors of a synthetic model, before their values are drawn.

use purebee_memory::DType;

use crate::ModelSpec;

/// What a planned tensor holds, and so how its values are drawn ([`tensor_values`](crate::tensor_values)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The token embedding: N(0, 0.25²) in a float type.
    Embedding,
    /// An F32 norm weight, `1 + 0.1·N(0, 1)`.
    Norm,
    /// A linear weight (the layers' and the untied head's): ternary with one per-tensor
    /// scale, or N(0, 1/n_in) in a float type, so outputs have a standard deviation near 1.
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

/// The tensors of `spec` in the fixtures' order: `token_embd`, then per layer `attn_norm`,
/// `attn_q`, `attn_k`, `attn_v`, `attn_sub_norm`, `attn_output`, `ffn_norm`, `ffn_gate`,
/// `ffn_up`, `ffn_sub_norm`, `ffn_down` (the sub-norms where the architecture has them),
/// then `output_norm` and, when the head is not tied, `output`.
pub fn plan(spec: &ModelSpec) -> Vec<PlannedTensor> {
    let shape = &spec.shape;
    let (d, kv, ff, vocab) = (shape.n_embd as u64, shape.kv_width() as u64, shape.n_ff as u64, shape.n_vocab as u64);
    let t = |name: String, dtype: DType, ne: &[u64], role: Role| PlannedTensor { name, dtype, ne: ne.to_vec(), role };
    let norm = |name: String, n: u64| t(name, DType::F32, &[n], Role::Norm);
    let linear = |name: String, n_in: u64, n_out: u64| t(name, spec.weights, &[n_in, n_out], Role::Linear);
    let sub_norms = spec.arch.has_sub_norms();
    let mut out = vec![t("token_embd.weight".into(), spec.embedding, &[d, vocab], Role::Embedding)];
    for l in 0..shape.n_layer {
        let name = |s: &str| format!("blk.{l}.{s}.weight");
        out.extend([norm(name("attn_norm"), d), linear(name("attn_q"), d, d), linear(name("attn_k"), d, kv)]);
        out.push(linear(name("attn_v"), d, kv));
        if sub_norms {
            out.push(norm(name("attn_sub_norm"), d));
        }
        out.extend([linear(name("attn_output"), d, d), norm(name("ffn_norm"), d)]);
        out.extend([linear(name("ffn_gate"), d, ff), linear(name("ffn_up"), d, ff)]);
        if sub_norms {
            out.push(norm(name("ffn_sub_norm"), ff));
        }
        out.push(linear(name("ffn_down"), ff, d));
    }
    out.push(norm("output_norm.weight".into(), d));
    if let Some(dtype) = spec.output {
        out.push(t("output.weight".into(), dtype, &[d, vocab], Role::Linear));
    }
    out
}
