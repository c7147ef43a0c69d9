//! Row instructions: RMS_NORM, SOFTMAX, ARGMAX (each row on its own; rows are short, so
//! one thread).

use purebee_isa::ops::{Argmax, RmsNorm, Softmax};
use purebee_isa::ExecError;

use super::{f32s_mut, input, maybe_aliased, Exec};
use crate::kernels::{math, norm};
use crate::store::dims;

/// `out_i = x_i / sqrt(mean(x²) + eps) · w_i`, row by row (`kernels/norm.rs`).
pub(crate) fn rms_norm(e: &mut Exec, n: &RmsNorm) -> Result<(), ExecError> {
    const OP: &str = "RMS_NORM";
    let (_, d) = dims(e.reg, OP, n.x)?;
    let x_copy = maybe_aliased(e, OP, n.x, n.out)?;
    e.store.f32s(e.reg, OP, n.weight)?;
    let (reg, level) = (e.reg, e.level);
    e.store.with_output(reg, OP, n.out, |store, words| {
        let x = input(store, reg, OP, n.x, &x_copy)?;
        let w = store.f32s(reg, OP, n.weight)?;
        let out = f32s_mut(words, x.len());
        for (row, o) in x.chunks_exact(d.max(1)).zip(out.chunks_exact_mut(d.max(1))) {
            norm::rms_norm_row(level, row, w, n.eps, o);
        }
        Ok(())
    })
}

/// `out_i = e^(v_i − max) / Σ e^(v_j − max)`: exponentials in f32 (fast exp), the sum in
/// f64. A row holding +∞ or NaN gives NaN (its maximum is then +∞ or NaN, as in the
/// reference).
pub(crate) fn softmax(e: &mut Exec, s: &Softmax) -> Result<(), ExecError> {
    const OP: &str = "SOFTMAX";
    let (_, d) = dims(e.reg, OP, s.x)?;
    let x_copy = maybe_aliased(e, OP, s.x, s.out)?;
    let reg = e.reg;
    e.store.with_output(reg, OP, s.out, |store, words| {
        let x = input(store, reg, OP, s.x, &x_copy)?;
        let out = f32s_mut(words, x.len());
        for (row, o) in x.chunks_exact(d.max(1)).zip(out.chunks_exact_mut(d.max(1))) {
            softmax_row(row, o);
        }
        Ok(())
    })
}

/// One row of SOFTMAX into `out`.
pub(crate) fn softmax_row(row: &[f32], out: &mut [f32]) {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, |a, b| if b > a || b.is_nan() { b } else { a });
    let mut sum = 0f64;
    for (o, &v) in out.iter_mut().zip(row) {
        *o = math::exp(v - max);
        sum += *o as f64;
    }
    for o in out.iter_mut() {
        *o = (*o as f64 / sum) as f32;
    }
}

/// The lowest index of each row's maximum; NaN never wins; 0 for an all-NaN row.
pub(crate) fn argmax(e: &mut Exec, a: &Argmax) -> Result<(), ExecError> {
    const OP: &str = "ARGMAX";
    let (rows, m) = dims(e.reg, OP, a.x)?;
    e.store.f32s(e.reg, OP, a.x)?;
    let reg = e.reg;
    e.store.with_output(reg, OP, a.out, |store, words| {
        let x = store.f32s(reg, OP, a.x)?;
        for (r, o) in words.iter_mut().take(rows).enumerate() {
            let row = &x[r * m..(r + 1) * m];
            let mut best: Option<(usize, f32)> = None;
            for (i, &v) in row.iter().enumerate() {
                if !v.is_nan() && best.is_none_or(|(_, b)| v > b) {
                    best = Some((i, v));
                }
            }
            *o = best.map_or(0, |(i, _)| i) as u32;
        }
        Ok(())
    })
}
