//! BITLINEAR: BitNet b1.58's int8-activation × ternary-weight product.

use purebee_memory::{DType, TensorId};

use crate::validate::Checker;
use crate::IsaError;

/// BITLINEAR, as BitNet b1.58 was trained and as Microsoft's I2_S kernels compute it.
///
/// Shapes: `x` F32 `[n, k]`; `weight` ternary (I2_S, TQ1_0 or TQ2_0) `[m, k]`; optional
/// `scale` F32 with one element; `out` F32 `[n, m]`, distinct from the inputs.
///
/// For every row (token) `x` of the input, all in IEEE f32 with round-to-nearest-even:
/// 1. `a = max_i |x_i|` (exact), `s = 127 / max(a, 1e-5)` (one correctly rounded f32
///    division);
/// 2. `q_i = clamp(round_half_to_even(x_i · s), −128, 127)` as int8 (one correctly rounded
///    f32 multiply, then an exact rounding to an integer);
/// 3. for every output `j`, with `t_ji ∈ {−1, 0, +1}` the weight codes and the weight's
///    scale blocks `b` (one block of `k` per row for I2_S, whose one scale `d` is the
///    tensor's; 256-element blocks with their own `d_b` for TQ1_0 / TQ2_0):
///    `y_j = Σ_b d_b · (Σ_{i∈b} q_i · t_ji) / s`, times `scale[0]` when given.
///
/// The integer sums are exact (every engine must produce the same integers). Only the final
/// scaling rounds: engines compute it in f32 or wider (the reference engine: f64, one
/// rounding to f32 at the end).
#[derive(Clone, Debug, PartialEq)]
pub struct BitLinear {
    /// The output, F32 `[n, m]`.
    pub out: TensorId,
    /// The activations, F32 `[n, k]`.
    pub x: TensorId,
    /// The ternary weight, `[m, k]`.
    pub weight: TensorId,
    /// A separate output scale (`<name>.scale`, F32 `[1]`) some converters write.
    pub scale: Option<TensorId>,
}

/// `s = 127 / max(a, 1e-5)`: the per-row activation scale of BITLINEAR, in f32.
#[inline] // engines call it in their SIMD-compiled loops
pub fn bitlinear_act_scale(abs_max: f32) -> f32 {
    127.0 / abs_max.max(1e-5)
}

/// `clamp(round_half_to_even(x · s), −128, 127)`: one BITLINEAR activation as int8.
#[inline] // engines call it in their SIMD-compiled loops (a rounding instruction, not a call)
pub fn bitlinear_quantize(x: f32, s: f32) -> i8 {
    // `as` saturates, and NaN becomes 0; the clamp documents the range.
    (x * s).round_ties_even().clamp(-128.0, 127.0) as i8
}

impl BitLinear {
    pub(crate) fn validate(&self, c: &Checker) -> Result<(), IsaError> {
        let x = c.f32("x", self.x)?;
        let (n, k) = c.matrix("x", x)?;
        let w = c.dtype("weight", self.weight, DType::is_ternary, "a ternary type (I2_S, TQ1_0, TQ2_0)")?;
        let (m, wk) = c.matrix("weight", w)?;
        if wk != k {
            return Err(c.shape_error("weight", w, format!("[m, {k}] (columns equal to x's)")));
        }
        if let Some(scale) = self.scale {
            let s = c.f32("scale", scale)?;
            if s.shape.numel() != 1 {
                return Err(c.shape_error("scale", s, "one element".to_string()));
            }
        }
        let out = c.f32("out", self.out)?;
        c.shape("out", out, &[n, m])?;
        let mut inputs = vec![self.x, self.weight];
        inputs.extend(self.scale);
        c.distinct(self.out, &inputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activation_quantization_rounds_half_to_even_and_clamps() {
        assert_eq!(bitlinear_act_scale(2.0), 63.5);
        assert_eq!(bitlinear_act_scale(0.0), 127.0 / 1e-5);
        assert_eq!(bitlinear_quantize(0.5, 1.0), 0);
        assert_eq!(bitlinear_quantize(1.5, 1.0), 2);
        assert_eq!(bitlinear_quantize(-2.5, 1.0), -2);
        assert_eq!(bitlinear_quantize(2.0, 63.5), 127);
        assert_eq!(bitlinear_quantize(-2.0, 63.5), -127);
        assert_eq!(bitlinear_quantize(-1000.0, 1.0), -128);
        assert_eq!(bitlinear_quantize(1000.0, 1.0), 127);
    }
}
