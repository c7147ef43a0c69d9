//! LINEAR: a float matrix product with float or block-quantized weights, and f32 or
//! block-wise int8 activations.

use purebee_memory::TensorId;

use crate::validate::Checker;
use crate::IsaError;

/// Activations per int8 block of [`LinearActivations::Int8Blocks`] (ggml's `QK8_0`).
pub const LINEAR_ACT_BLOCK: usize = 32;

/// How LINEAR reads its activations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LinearActivations {
    /// The f32 activations as they are.
    #[default]
    F32,
    /// Each row rounded to int8 in blocks of [`LINEAR_ACT_BLOCK`] elements, each block with
    /// its own scale, as llama.cpp's CPU backend rounds every activation entering a Q4_0,
    /// Q4_1 or Q8_0 dot product (its Q8_0 / Q8_1 "vec_dot_type"). This is what lets a fast
    /// engine multiply integers instead of decoding every weight to float.
    Int8Blocks,
}

/// LINEAR: `out[r][j] = Σ_i x̂[r][i] · W[j][i]`, i.e. `out = x̂ · Wᵀ`.
///
/// - `x`: F32 `[n, k]`.
/// - `weight`: `[m, k]` (GGUF `ne = [k, m]`), F32, F16, BF16 or any block-quantized type,
///   ternary included; its elements `w_ji` are decoded exactly as the layout defines.
/// - `out`: F32 `[n, m]`, distinct from `x` and `weight`.
/// - `activations`, what `x̂` is:
///   - [`LinearActivations::F32`]: `x̂ = x`, unrounded.
///   - [`LinearActivations::Int8Blocks`]: every row of `x` is cut into blocks `b` of
///     [`LINEAR_ACT_BLOCK`] consecutive elements (the last one shorter when `k` is not a
///     multiple), and each block is rounded exactly as BITLINEAR rounds a whole row:
///     `a_b = max_{i∈b} |x_i|`, `s_b = 127 / max(a_b, 1e-5)` (one correctly rounded f32
///     division, [`bitlinear_act_scale`](super::bitlinear_act_scale)), `q_i =
///     clamp(round_half_to_even(x_i · s_b), −128, 127)` (one correctly rounded f32 multiply,
///     [`bitlinear_quantize`](super::bitlinear_quantize)); then `x̂_i = q_i / s_b`, so
///     `out_j = Σ_b (Σ_{i∈b} q_i · w_ji) / s_b`. The `q_i` are integers every engine must
///     agree on; how the products are then summed and scaled is free like below.
/// - Products are accumulated in f32 or wider, in any order (the reference engine: f64, in
///   index order, each block's sum divided by `s_b`); each result is rounded to f32 once.
#[derive(Clone, Debug, PartialEq)]
pub struct Linear {
    /// The output, F32 `[n, m]`.
    pub out: TensorId,
    /// The activations, F32 `[n, k]`.
    pub x: TensorId,
    /// The weight, `[m, k]`.
    pub weight: TensorId,
    /// Whether the activations are used as they are or rounded to int8 blocks.
    pub activations: LinearActivations,
}

/// The int8 activations and per-block scales `s_b` of one row under
/// [`LinearActivations::Int8Blocks`]: `q` as long as `x`, `scales` one per block (the rule
/// is written once here; engines call it or reproduce it bit for bit).
#[inline]
pub fn quantize_blocks(x: &[f32], q: &mut [i8], scales: &mut [f32]) {
    for ((xb, qb), s) in x.chunks(LINEAR_ACT_BLOCK).zip(q.chunks_mut(LINEAR_ACT_BLOCK)).zip(scales.iter_mut()) {
        let a = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
        *s = super::bitlinear_act_scale(a);
        for (qi, &xi) in qb.iter_mut().zip(xb) {
            *qi = super::bitlinear_quantize(xi, *s);
        }
    }
}

impl Linear {
    pub(crate) fn validate(&self, c: &Checker) -> Result<(), IsaError> {
        let x = c.f32("x", self.x)?;
        let (n, k) = c.matrix("x", x)?;
        let w = c.dtype("weight", self.weight, |d| d.is_float_like(), "a float or block-quantized type")?;
        let (m, wk) = c.matrix("weight", w)?;
        if wk != k {
            return Err(c.shape_error("weight", w, format!("[m, {k}] (columns equal to x's)")));
        }
        let out = c.f32("out", self.out)?;
        c.shape("out", out, &[n, m])?;
        c.distinct(self.out, &[self.x, self.weight])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_have_their_own_scale_and_the_last_may_be_short() {
        // 33 elements: a block of 32 whose maximum is 2, then a block of one.
        let mut x = vec![0.5f32; 33];
        x[3] = -2.0;
        x[32] = 0.25;
        let (mut q, mut s) = (vec![0i8; 33], vec![0f32; 2]);
        quantize_blocks(&x, &mut q, &mut s);
        assert_eq!(s, [63.5, 508.0]);
        assert_eq!(q[3], -127);
        assert_eq!(q[0], 32); // 0.5 · 63.5 = 31.75
        assert_eq!(q[32], 127);
    }
}
