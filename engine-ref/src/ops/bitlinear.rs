//! BITLINEAR: per-row int8 activations × ternary weights, exact integer sums, one f64
//! scaling per result.

use purebee_isa::ops::{bitlinear_act_scale, bitlinear_quantize, BitLinear};
use purebee_isa::ExecError;
use purebee_memory::Registry;
use rayon::prelude::*;

use crate::access::{decode_error, dims, f32s, matrix, store_f32};

pub(crate) fn run(reg: &mut Registry, b: &BitLinear) -> Result<(), ExecError> {
    const OP: &str = "BITLINEAR";
    let x = f32s(reg, OP, b.x)?; // [n, k]
    let w = matrix(reg, OP, b.weight)?; // [m, k], ternary
    let (m, k) = (w.rows(), w.cols());
    let (n, _) = dims(reg, OP, b.x)?; // rows of x (k may be 0)
    let out_scale = match b.scale {
        Some(id) => f32s(reg, OP, id)?.first().copied().unwrap_or(1.0) as f64,
        None => 1.0,
    };
    let not_ternary = || decode_error(reg, OP, b.weight, "not a ternary type");
    let block = w.ternary_scale_block().ok_or_else(not_ternary)?; // elements per scale
    let n_scales = w.ternary_scales_per_row().ok_or_else(not_ternary)?; // scales per row

    // Per row r: s_r (f32) and q[r] (int8), exactly as the ISA specifies.
    let mut s = vec![0f32; n]; // [n]
    let mut q = vec![0i8; n * k]; // [n, k]
    for r in 0..n {
        let row = &x[r * k..(r + 1) * k];
        s[r] = bitlinear_act_scale(row.iter().fold(0f32, |a, &v| a.max(v.abs())));
        for i in 0..k {
            q[r * k + i] = bitlinear_quantize(row[i], s[r]);
        }
    }

    let columns: Vec<Vec<f32>> = (0..m)
        .into_par_iter()
        .map(|j| {
            let mut t = vec![0i8; k]; // [k] codes of weight row j
            let mut d = vec![0f32; n_scales]; // [n_scales] scales of row j
            w.ternary_row(j, &mut t, &mut d)?;
            Ok((0..n)
                .map(|r| {
                    let qr = &q[r * k..(r + 1) * k];
                    // y = Σ_b d_b · (Σ_{i∈b} q_i t_i) / s: exact i64 sums, then f64 scaling.
                    let y: f64 = d
                        .iter()
                        .enumerate()
                        .map(|(bi, &db)| {
                            let range = bi * block..(bi + 1) * block;
                            let isum: i64 =
                                qr[range.clone()].iter().zip(&t[range]).map(|(&qi, &ti)| qi as i64 * ti as i64).sum();
                            db as f64 * isum as f64
                        })
                        .sum();
                    (y / s[r] as f64 * out_scale) as f32
                })
                .collect())
        })
        .collect::<Result<_, purebee_memory::quant::QuantError>>()
        .map_err(|e| decode_error(reg, OP, b.weight, e))?;
    let mut out = vec![0f32; n * m]; // [n, m]
    for (j, column) in columns.iter().enumerate() {
        for (r, &v) in column.iter().enumerate() {
            out[r * m + j] = v;
        }
    }
    store_f32(reg, OP, b.out, &out)
}
