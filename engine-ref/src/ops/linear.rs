//! LINEAR: `out = x · Wᵀ`, weights decoded from their layout, products summed in f64.

use purebee_isa::ops::Linear;
use purebee_isa::ExecError;
use purebee_memory::Registry;
use rayon::prelude::*;

use crate::access::{decode_error, dims, dot_f64, f32s, matrix, store_f32};

pub(crate) fn run(reg: &mut Registry, l: &Linear) -> Result<(), ExecError> {
    const OP: &str = "LINEAR";
    let x = f32s(reg, OP, l.x)?; // [n, k]
    let w = matrix(reg, OP, l.weight)?; // [m, k], any layout
    let (m, k) = (w.rows(), w.cols());
    let (n, _) = dims(reg, OP, l.x)?; // rows of x (k may be 0)
                                      // One weight row at a time (decoded once), against every input row: columns of out.
    let columns: Vec<Vec<f32>> = (0..m)
        .into_par_iter()
        .map(|j| {
            let mut w_row = vec![0f32; k]; // [k]
            w.dequantize_row(j, &mut w_row)?;
            Ok((0..n).map(|r| dot_f64(&x[r * k..(r + 1) * k], &w_row) as f32).collect())
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
