//! SOFTMAX over each row, max-subtracted, in f64.

use purebee_isa::ops::Softmax;
use purebee_isa::ExecError;
use purebee_memory::Registry;

use crate::access::{dims, f32s, store_f32};

pub(crate) fn run(reg: &mut Registry, s: &Softmax) -> Result<(), ExecError> {
    const OP: &str = "SOFTMAX";
    let (rows, d) = dims(reg, OP, s.x)?;
    let x = f32s(reg, OP, s.x)?; // [rows, d]
    let mut out = vec![0f32; rows * d]; // [rows, d]
    for r in 0..rows {
        let row = &x[r * d..(r + 1) * d];
        softmax_f64(row, &mut out[r * d..(r + 1) * d]);
    }
    store_f32(reg, OP, s.out, &out)
}

/// `out_i = e^(v_i − max v) / Σ e^(v_j − max v)`, computed in f64.
pub(crate) fn softmax_f64(v: &[f32], out: &mut [f32]) {
    let e = softmax_weights(&v.iter().map(|&x| x as f64).collect::<Vec<_>>());
    for (o, w) in out.iter_mut().zip(e) {
        *o = w as f32;
    }
}

/// Softmax of f64 scores. A row holding +∞ or NaN gives NaN (∞ − ∞ is NaN).
pub(crate) fn softmax_weights(v: &[f64]) -> Vec<f64> {
    let max = v.iter().copied().fold(f64::NEG_INFINITY, |a, b| if b > a || b.is_nan() { b } else { a });
    let e: Vec<f64> = v.iter().map(|&x| (x - max).exp()).collect();
    let sum: f64 = e.iter().sum();
    e.into_iter().map(|x| x / sum).collect()
}
