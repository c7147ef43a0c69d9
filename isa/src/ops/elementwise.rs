//! TENSOR_ADD, ELEMENT_MUL, and the activations SILU, RELU2, GELU: element by element.

use purebee_memory::TensorId;

use crate::validate::Checker;
use crate::IsaError;

/// Two-input element-wise instructions (TENSOR_ADD: `out = a + b`; ELEMENT_MUL:
/// `out = a · b`), one f32 operation per element, exactly rounded.
///
/// `a`, `b`, `out`: F32 of one shape. `out` may be `a` or `b` (in place: a residual add).
#[derive(Clone, Debug, PartialEq)]
pub struct Binary {
    /// The output.
    pub out: TensorId,
    /// The first operand.
    pub a: TensorId,
    /// The second operand.
    pub b: TensorId,
}

impl Binary {
    pub(crate) fn validate(&self, c: &Checker) -> Result<(), IsaError> {
        let a = c.f32("a", self.a)?;
        let b = c.f32("b", self.b)?;
        c.shape("b", b, a.shape.dims())?;
        let out = c.f32("out", self.out)?;
        c.shape("out", out, a.shape.dims())
    }
}

/// One-input element-wise instructions. `x`, `out`: F32 of one shape; `out` may be `x`.
///
/// - SILU: `x / (1 + e^(−x))`.
/// - RELU2: `max(x, 0)²` (BitNet b1.58's FFN activation).
/// - GELU: the tanh approximation ggml and GPT-2 use,
///   `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`.
///
/// Engines evaluate the formula in f32 or wider (the reference engine: f64) and round once;
/// transcendental functions may be approximated to within a few ulp.
#[derive(Clone, Debug, PartialEq)]
pub struct Unary {
    /// The output.
    pub out: TensorId,
    /// The input.
    pub x: TensorId,
}

impl Unary {
    pub(crate) fn validate(&self, c: &Checker) -> Result<(), IsaError> {
        let x = c.f32("x", self.x)?;
        let out = c.f32("out", self.out)?;
        c.shape("out", out, x.shape.dims())
    }
}
