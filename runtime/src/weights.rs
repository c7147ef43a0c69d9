//! Binding a model's GGUF tensors to their roles, checking shape and type of each, and that
//! the file holds no tensor without a role (a bias or RoPE factor table the graph would
//! silently ignore; llama.cpp refuses such files too).

use std::cell::RefCell;
use std::collections::HashSet;

use purebee_memory::gguf::GgufFile;
use purebee_memory::{DType, Registry, TensorId};

use crate::{ModelConfig, ModelError};

/// A linear layer's weight, the instruction that applies it, and its optional output scale.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LinearWeight {
    pub weight: TensorId,
    /// `<name>.scale`, F32 `[1]`, when the converter wrote one.
    pub scale: Option<TensorId>,
    /// Ternary weights go through BITLINEAR; float weights through LINEAR.
    pub ternary: bool,
    /// The weight's type (LINEAR's activation rounding depends on it).
    pub dtype: DType,
}

/// One transformer block's tensors.
#[derive(Clone, Debug)]
pub(crate) struct LayerWeights {
    pub attn_norm: TensorId,
    pub q: LinearWeight,
    pub k: LinearWeight,
    pub v: LinearWeight,
    /// BitNet only: the norm before the attention output projection.
    pub attn_sub_norm: Option<TensorId>,
    pub o: LinearWeight,
    pub ffn_norm: TensorId,
    pub gate: LinearWeight,
    pub up: LinearWeight,
    /// BitNet only: the norm before the FFN down projection.
    pub ffn_sub_norm: Option<TensorId>,
    pub down: LinearWeight,
}

/// Every tensor of the model, by role.
#[derive(Clone, Debug)]
pub(crate) struct Weights {
    pub token_embd: TensorId,
    pub layers: Vec<LayerWeights>,
    pub output_norm: TensorId,
    /// `output.weight`, or the tied `token_embd.weight` (always through LINEAR).
    pub lm_head: LinearWeight,
}

/// Looks tensors up in the file (for checks and errors naming it) and in the registry.
struct Binder<'a> {
    file: &'a GgufFile,
    reg: &'a Registry,
    /// The names bound so far.
    bound: RefCell<HashSet<String>>,
}

impl Binder<'_> {
    fn path(&self) -> String {
        self.file.path().display().to_string()
    }

    /// A tensor of ggml dims `ne` whose type satisfies `ok`.
    fn tensor(&self, name: &str, ne: &[usize], ok: fn(DType) -> bool, expected: &str) -> Result<TensorId, ModelError> {
        let info = self.file.tensor_info(name)?;
        if !ok(info.dtype) {
            return Err(ModelError::TensorType {
                file: self.path(),
                tensor: name.to_string(),
                got: info.dtype,
                expected: expected.to_string(),
            });
        }
        let got = info.shape.ggml_ne();
        // A vector may be stored as [n] or [n, 1].
        let trimmed: Vec<usize> =
            got.iter().copied().rev().skip_while(|&d| d == 1).collect::<Vec<_>>().into_iter().rev().collect();
        if got != ne && trimmed != ne {
            return Err(ModelError::TensorShape {
                file: self.path(),
                tensor: name.to_string(),
                expected: ne.to_vec(),
                got,
            });
        }
        self.bound.borrow_mut().insert(name.to_string());
        self.reg.id(name).map_err(|e| ModelError::Inconsistent {
            file: self.path(),
            key: name.to_string(),
            reason: e.to_string(),
        })
    }

    fn norm(&self, name: &str, n: usize) -> Result<TensorId, ModelError> {
        self.tensor(name, &[n], |d| d == DType::F32, "F32")
    }

    /// A linear weight of `n_in` → `n_out` (ggml ne `[n_in, n_out]`), ternary or float.
    fn linear(&self, name: &str, n_in: usize, n_out: usize) -> Result<LinearWeight, ModelError> {
        let weight_name = format!("{name}.weight");
        let weight = self.tensor(
            &weight_name,
            &[n_in, n_out],
            DType::is_float_like,
            "a ternary (I2_S, TQ1_0, TQ2_0), block-quantized (Q4_0, Q4_1, Q8_0) or float type",
        )?;
        let dtype = self.file.tensor_info(&weight_name)?.dtype;
        let ternary = dtype.is_ternary();
        let scale_name = format!("{name}.scale");
        let scale = match self.file.tensor_info(&scale_name) {
            Ok(_) => Some(self.tensor(&scale_name, &[1], |d| d == DType::F32, "F32")?),
            Err(_) => None,
        };
        if scale.is_some() && !ternary {
            return Err(ModelError::Inconsistent {
                file: self.path(),
                key: scale_name,
                reason: "a separate .scale tensor is supported with ternary weights only".to_string(),
            });
        }
        Ok(LinearWeight { weight, scale, ternary, dtype })
    }
}

impl Weights {
    /// Binds every tensor the config implies, checking shapes and types.
    pub(crate) fn bind(file: &GgufFile, cfg: &ModelConfig, reg: &Registry) -> Result<Weights, ModelError> {
        let b = Binder { file, reg, bound: RefCell::new(HashSet::new()) };
        let (d, kv, ff) = (cfg.n_embd, cfg.kv_width(), cfg.n_ff);
        let sub = cfg.arch.has_sub_norms();
        let token_embd =
            b.tensor("token_embd.weight", &[d, cfg.n_vocab], DType::is_float_like, "a float or block-quantized type")?;
        let layers = (0..cfg.n_layer)
            .map(|l| {
                let n = |role: &str| format!("blk.{l}.{role}");
                Ok(LayerWeights {
                    attn_norm: b.norm(&n("attn_norm.weight"), d)?,
                    q: b.linear(&n("attn_q"), d, d)?,
                    k: b.linear(&n("attn_k"), d, kv)?,
                    v: b.linear(&n("attn_v"), d, kv)?,
                    attn_sub_norm: sub.then(|| b.norm(&n("attn_sub_norm.weight"), d)).transpose()?,
                    o: b.linear(&n("attn_output"), d, d)?,
                    ffn_norm: b.norm(&n("ffn_norm.weight"), d)?,
                    gate: b.linear(&n("ffn_gate"), d, ff)?,
                    up: b.linear(&n("ffn_up"), d, ff)?,
                    ffn_sub_norm: sub.then(|| b.norm(&n("ffn_sub_norm.weight"), ff)).transpose()?,
                    down: b.linear(&n("ffn_down"), ff, d)?,
                })
            })
            .collect::<Result<_, ModelError>>()?;
        let output_norm = b.norm("output_norm.weight", d)?;
        let lm_head = match file.tensor_info("output.weight") {
            Ok(_) => {
                b.tensor("output.weight", &[d, cfg.n_vocab], DType::is_float_like, "a float or block-quantized type")?
            }
            Err(_) => token_embd,
        };
        let head_name = if lm_head == token_embd { "token_embd.weight" } else { "output.weight" };
        let lm_head =
            LinearWeight { weight: lm_head, scale: None, ternary: false, dtype: file.tensor_info(head_name)?.dtype };
        let bound = b.bound.borrow();
        if let Some(extra) = file.tensors().iter().find(|t| !bound.contains(&t.name)) {
            return Err(ModelError::Inconsistent {
                file: b.path(),
                key: extra.name.clone(),
                reason: format!("this tensor has no role in a {} model (purebee would ignore it)", cfg.arch.name()),
            });
        }
        Ok(Weights { token_embd, layers, output_norm, lm_head })
    }
}
