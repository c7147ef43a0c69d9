//! LINEAR: `out = x̂ · Wᵀ`, weights decoded from their layout, products summed in f64;
//! `x̂` is `x`, or `x` rounded to int8 blocks (each block's integer-weighted sum divided by
//! its scale, as the spec writes it).

use purebee_isa::ops::{quantize_blocks, Linear, LinearActivations, LINEAR_ACT_BLOCK};
use purebee_isa::ExecError;
use purebee_memory::Registry;
use rayon::prelude::*;

use crate::access::{decode_error, dims, dot_f64, f32s, matrix, store_f32};

/// One row of activations as LINEAR reads it.
enum ActRow<'a> {
    F32(&'a [f32]),
    /// Int8 codes (as f32, exact) and one scale per block.
    Int8 {
        q: Vec<f32>,
        scales: Vec<f32>,
    },
}

impl ActRow<'_> {
    /// `Σ_i x̂_i · w_i` in f64: index order, or per block `(Σ_{i∈b} q_i · w_i) / s_b` in
    /// block order (each `q_i · w_i` and each block's sum is exact in f64).
    fn dot(&self, w: &[f32]) -> f64 {
        match self {
            ActRow::F32(x) => dot_f64(x, w),
            ActRow::Int8 { q, scales } => q
                .chunks(LINEAR_ACT_BLOCK)
                .zip(w.chunks(LINEAR_ACT_BLOCK))
                .zip(scales)
                .map(|((qb, wb), &s)| dot_f64(qb, wb) / s as f64)
                .sum(),
        }
    }
}

pub(crate) fn run(reg: &mut Registry, l: &Linear) -> Result<(), ExecError> {
    const OP: &str = "LINEAR";
    let x = f32s(reg, OP, l.x)?; // [n, k]
    let w = matrix(reg, OP, l.weight)?; // [m, k], any layout
    let (m, k) = (w.rows(), w.cols());
    let (n, _) = dims(reg, OP, l.x)?; // rows of x (k may be 0)
    let rows: Vec<ActRow> = (0..n)
        .map(|r| {
            let xr = &x[r * k..(r + 1) * k];
            match l.activations {
                LinearActivations::F32 => ActRow::F32(xr),
                LinearActivations::Int8Blocks => {
                    let (mut q, mut scales) = (vec![0i8; k], vec![0f32; k.div_ceil(LINEAR_ACT_BLOCK)]);
                    quantize_blocks(xr, &mut q, &mut scales);
                    ActRow::Int8 { q: q.into_iter().map(f32::from).collect(), scales }
                }
            }
        })
        .collect();
    // One weight row at a time (decoded once), against every input row: columns of out.
    let columns: Vec<Vec<f32>> = (0..m)
        .into_par_iter()
        .map(|j| {
            let mut w_row = vec![0f32; k]; // [k]
            w.dequantize_row(j, &mut w_row)?;
            Ok(rows.iter().map(|row| row.dot(&w_row) as f32).collect())
        })
        .collect::<Result<_, purebee_memory::quant::QuantError>>()
        .map_err(|e| decode_error(reg, OP, l.weight, e))?;
    let mut out = vec![0f32; n * m]; // [n, m]
    for (j, column) in columns.iter().enumerate() {
        for (r, &v) in column.iter().enumerate() {
            out[r * m + j] = v;
        }
    }
    store_f32(reg, OP, l.out, &out)
}
