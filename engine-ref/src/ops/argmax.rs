//! ARGMAX: the lowest index of each row's maximum; NaN never wins.

use purebee_isa::ops::Argmax;
use purebee_isa::ExecError;
use purebee_memory::Registry;

use crate::access::{dims, f32s, store_u32};

pub(crate) fn run(reg: &mut Registry, a: &Argmax) -> Result<(), ExecError> {
    const OP: &str = "ARGMAX";
    let (rows, m) = dims(reg, OP, a.x)?;
    let x = f32s(reg, OP, a.x)?; // [rows, m]
    let out: Vec<u32> = (0..rows).map(|r| argmax(&x[r * m..(r + 1) * m]) as u32).collect(); // [rows]
    store_u32(reg, OP, a.out, &out)
}

/// The lowest index of the maximum; NaN elements are skipped; 0 for an all-NaN row.
pub(crate) fn argmax(row: &[f32]) -> usize {
    let mut best: Option<(usize, f32)> = None;
    for (i, &v) in row.iter().enumerate() {
        if v.is_nan() {
            continue;
        }
        if best.is_none_or(|(_, b)| v > b) {
            best = Some((i, v));
        }
    }
    best.map_or(0, |(i, _)| i)
}
