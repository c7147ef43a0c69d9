//! TOP_K: each row's first `k` elements in the rank order of the ISA (numbers before NaN,
//! larger values first, ties by lower index).

use std::cmp::Ordering;

use purebee_isa::ops::TopK;
use purebee_isa::ExecError;
use purebee_memory::Registry;

use crate::access::{dims, f32s, store_f32, store_u32};

pub(crate) fn run(reg: &mut Registry, t: &TopK) -> Result<(), ExecError> {
    const OP: &str = "TOP_K";
    let (rows, m) = dims(reg, OP, t.x)?;
    let k = t.k as usize;
    let x = f32s(reg, OP, t.x)?; // [rows, m]
    let mut values = Vec::with_capacity(rows * k); // [rows, k]
    let mut ids = Vec::with_capacity(rows * k); // [rows, k]
    let mut lse = Vec::with_capacity(rows); // [rows]
    for r in 0..rows {
        let row = &x[r * m..(r + 1) * m];
        for i in top_k(row, k) {
            values.push(row[i]);
            ids.push(i as u32);
        }
        if t.lse.is_some() {
            lse.push(log_sum_exp(row));
        }
    }
    drop(x);
    store_f32(reg, OP, t.values, &values)?;
    store_u32(reg, OP, t.ids, &ids)?;
    match t.lse {
        Some(out) => store_f32(reg, OP, out, &lse),
        None => Ok(()),
    }
}

/// The row's log-sum-exp as TOP_K's rustdoc states it: NaN, then `+∞`, then an all-`−∞` row
/// first; otherwise `M + ln Σ e^(x − M)` in f64 (terms summed in index order), rounded once.
pub(crate) fn log_sum_exp(row: &[f32]) -> f32 {
    if row.iter().any(|v| v.is_nan()) {
        return f32::NAN;
    }
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max.is_infinite() {
        return max;
    }
    let max = f64::from(max);
    let sum: f64 = row.iter().map(|&v| (f64::from(v) - max).exp()).sum();
    (max + sum.ln()) as f32
}

/// The indices of the first `k` elements of `row` in rank order.
pub(crate) fn top_k(row: &[f32], k: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..row.len()).collect();
    order.sort_by(|&a, &b| rank(row, a, b));
    order.truncate(k);
    order
}

/// The rank order of the ISA: `Less` when element `a` comes before element `b`.
fn rank(row: &[f32], a: usize, b: usize) -> Ordering {
    let (va, vb) = (row[a], row[b]);
    let by_value = match (va.is_nan(), vb.is_nan()) {
        (false, true) => Ordering::Less,
        (true, false) => Ordering::Greater,
        (true, true) => Ordering::Equal,
        // Larger first; IEEE comparison, so -0 and +0 are equal.
        (false, false) => vb.partial_cmp(&va).unwrap_or(Ordering::Equal),
    };
    by_value.then(a.cmp(&b))
}
