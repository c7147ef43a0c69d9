//! TENSOR_ADD, ELEMENT_MUL, SILU, RELU2, GELU.

use purebee_isa::ops::{Binary, Unary};
use purebee_isa::ExecError;
use purebee_memory::Registry;

use crate::access::{f32s, store_f32};

/// `out_i = f(a_i, b_i)`, one f32 operation per element (exactly rounded).
pub(crate) fn binary(
    reg: &mut Registry,
    op: &'static str,
    i: &Binary,
    f: fn(f32, f32) -> f32,
) -> Result<(), ExecError> {
    let a = f32s(reg, op, i.a)?; // [..]
    let b = f32s(reg, op, i.b)?; // [..], shape of a
    let out: Vec<f32> = a.iter().zip(b.iter()).map(|(&x, &y)| f(x, y)).collect();
    store_f32(reg, op, i.out, &out)
}

/// `out_i = f(x_i)` evaluated in f64 and rounded once to f32.
pub(crate) fn unary(reg: &mut Registry, op: &'static str, i: &Unary, f: fn(f64) -> f64) -> Result<(), ExecError> {
    let x = f32s(reg, op, i.x)?; // [..]
    let out: Vec<f32> = x.iter().map(|&v| f(v as f64) as f32).collect();
    store_f32(reg, op, i.out, &out)
}

/// SILU: `x / (1 + e^(−x))`.
pub(crate) fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// RELU2: `max(x, 0)²`.
pub(crate) fn relu2(x: f64) -> f64 {
    let r = x.max(0.0);
    r * r
}

/// GELU, tanh approximation: `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`.
pub(crate) fn gelu(x: f64) -> f64 {
    const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)).tanh())
}
