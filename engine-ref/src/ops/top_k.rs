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
    for r in 0..rows {
        let row = &x[r * m..(r + 1) * m];
        for i in top_k(row, k) {
            values.push(row[i]);
            ids.push(i as u32);
        }
    }
    drop(x);
    store_f32(reg, OP, t.values, &values)?;
    store_u32(reg, OP, t.ids, &ids)
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
