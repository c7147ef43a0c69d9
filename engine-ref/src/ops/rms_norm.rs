//! RMS_NORM: `out_i = x_i / sqrt(mean(x²) + eps) · w_i`, per row, in f64.

use purebee_isa::ops::RmsNorm;
use purebee_isa::ExecError;
use purebee_memory::Registry;

use crate::access::{dims, f32s, store_f32};

pub(crate) fn run(reg: &mut Registry, n: &RmsNorm) -> Result<(), ExecError> {
    const OP: &str = "RMS_NORM";
    let (rows, d) = dims(reg, OP, n.x)?;
    let x = f32s(reg, OP, n.x)?; // [rows, d]
    let w = f32s(reg, OP, n.weight)?; // [d]
    let mut out = vec![0f32; rows * d]; // [rows, d]
    for r in 0..rows {
        let row = &x[r * d..(r + 1) * d];
        let mean_sq = row.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / d as f64;
        let inv = 1.0 / (mean_sq + n.eps as f64).sqrt();
        for i in 0..d {
            out[r * d + i] = (row[i] as f64 * inv * w[i] as f64) as f32;
        }
    }
    store_f32(reg, OP, n.out, &out)
}
