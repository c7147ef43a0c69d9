//! TOP_K: each row's first `k` elements in the ISA's rank order (numbers before NaN, larger
//! values first, ties by lower index).
//!
//! Every element becomes one distinct u64 key whose unsigned order is the rank order
//! ([`rank_key`]), so a row's top `k` are its `k` largest keys. A row is scanned once against
//! a threshold: keys above it join a buffer of at most `2k`; a full buffer is cut back to its
//! `k` largest (`select_nth_unstable`), which raises the threshold to the smallest of them.
//! Rows are spread over the pool when there are several and enough elements to pay for a
//! join. One 128256-entry row takes 0.16 ms on one Zen 4 core, under 1 % of the decode
//! step that produced it, so a single row is not split.

use purebee_isa::ops::TopK;
use purebee_isa::ExecError;

use super::{f32s_mut, Exec};
use crate::store::dims;

/// Rows of fewer elements than this in all run on the caller's thread.
const PARALLEL_ELEMENTS: usize = 1 << 16;

pub(crate) fn run(e: &mut Exec, t: &TopK) -> Result<(), ExecError> {
    const OP: &str = "TOP_K";
    let (rows, m) = dims(e.reg, OP, t.x)?;
    let k = t.k as usize;
    let x = e.store.f32s(e.reg, OP, t.x)?; // [rows, m]
                                           // [rows, k (+ 1)]: each row's keys in rank order, then (with `lse`) its log-sum-exp's bits.
    let width = k + usize::from(t.lse.is_some());
    let mut keys = vec![0u64; rows * width];
    let row_keys = |r: usize, out: &mut [u64]| {
        let row = &x[r * m..(r + 1) * m];
        top_keys(row, &mut out[..k]);
        if width > k {
            out[k] = u64::from(log_sum_exp(row).to_bits());
        }
    };
    if rows > 1 && rows * m >= PARALLEL_ELEMENTS {
        e.pool.for_each_chunk(&mut keys, width, &|r, out| row_keys(r, out));
    } else {
        for (r, out) in keys.chunks_exact_mut(width).enumerate() {
            row_keys(r, out);
        }
    }
    let row_of = |r: usize| &keys[r * width..r * width + k];
    let reg = e.reg;
    e.store.with_output(reg, OP, t.values, |store, words| {
        let x = store.f32s(reg, OP, t.x)?;
        let values = f32s_mut(words, rows * k);
        for (r, out) in values.chunks_exact_mut(k).enumerate() {
            for (v, &key) in out.iter_mut().zip(row_of(r)) {
                *v = x[r * m + index_of(key)];
            }
        }
        Ok(())
    })?;
    e.store.with_output(reg, OP, t.ids, |_, words| {
        for (r, out) in words.chunks_exact_mut(k).enumerate() {
            for (id, &key) in out.iter_mut().zip(row_of(r)) {
                *id = index_of(key) as u32;
            }
        }
        Ok(())
    })?;
    if let Some(lse) = t.lse {
        e.store.with_output(reg, OP, lse, |_, words| {
            for (w, r) in words.iter_mut().zip(0..rows) {
                *w = keys[r * width + k] as u32;
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// The row's log-sum-exp (TOP_K's rustdoc): NaN, `+∞` and all-`−∞` rows exactly; otherwise
/// each `e^(x − M)` in f32 (`x − M` rounded once, `expf` within an ulp) summed in f64 in index
/// order, then `M + ln` of the sum in f64, rounded once. Within the ISA's bound of the
/// reference (which computes the exponentials in f64): the f32 subtraction and exponential
/// are the only roundings before the sum.
fn log_sum_exp(row: &[f32]) -> f32 {
    let mut max = f32::NEG_INFINITY;
    let mut nan = false;
    for &v in row {
        nan |= v.is_nan();
        max = max.max(v);
    }
    if nan {
        return f32::NAN;
    }
    if max.is_infinite() {
        return max;
    }
    let sum: f64 = row.iter().map(|&v| f64::from((v - max).exp())).sum();
    (f64::from(max) + sum.ln()) as f32
}

/// The order-preserving key of element `i` of value `v`: the high word orders values (NaN
/// lowest, `−0` folded onto `+0`, `−∞` above NaN), the low word `!i` puts lower indices
/// first among equal values. Distinct for distinct `i`.
fn rank_key(v: f32, i: usize) -> u64 {
    let bits = v.to_bits();
    let value = if v.is_nan() {
        0
    } else if v == 0.0 {
        0x8000_0000
    } else if bits & 0x8000_0000 != 0 {
        !bits
    } else {
        bits | 0x8000_0000
    };
    (u64::from(value) << 32) | u64::from(!(i as u32))
}

/// The index of the element a key was made from.
fn index_of(key: u64) -> usize {
    !(key as u32) as usize
}

/// The `out.len()` largest keys of `row`, descending.
fn top_keys(row: &[f32], out: &mut [u64]) {
    let k = out.len();
    let mut buffer: Vec<u64> = row[..k].iter().enumerate().map(|(i, &v)| rank_key(v, i)).collect();
    let mut threshold = buffer.iter().copied().min().unwrap_or(0);
    for (i, &v) in row.iter().enumerate().skip(k) {
        let key = rank_key(v, i);
        if key > threshold {
            buffer.push(key);
            if buffer.len() == 2 * k {
                buffer.select_nth_unstable_by(k - 1, |a, b| b.cmp(a));
                buffer.truncate(k);
                threshold = buffer.iter().copied().min().unwrap_or(0);
            }
        }
    }
    buffer.sort_unstable_by(|a, b| b.cmp(a));
    out.copy_from_slice(&buffer[..k]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_order_values_then_lower_indices_with_nan_last() {
        let order = [f32::INFINITY, 1.0, 1e-40, 0.0, -1e-40, -1.0, f32::NEG_INFINITY, f32::NAN];
        let keys: Vec<u64> = order.iter().map(|&v| rank_key(v, 5)).collect();
        assert!(keys.windows(2).all(|w| w[0] > w[1]), "{keys:x?}");
        assert_eq!(rank_key(-0.0, 3), rank_key(0.0, 3));
        assert!(rank_key(2.0, 3) > rank_key(2.0, 4));
        assert!(rank_key(f32::NAN, 0) > rank_key(-f32::NAN, 1));
        assert_eq!(index_of(rank_key(7.0, 123_456)), 123_456);
    }

    #[test]
    fn the_threshold_scan_keeps_the_largest_keys() {
        let row: Vec<f32> = (0..1000).map(|i| ((i * 7919) % 101) as f32).collect();
        for k in [1, 2, 3, 40, 999, 1000] {
            let mut out = vec![0; k];
            top_keys(&row, &mut out);
            let mut all: Vec<u64> = row.iter().enumerate().map(|(i, &v)| rank_key(v, i)).collect();
            all.sort_unstable_by(|a, b| b.cmp(a));
            assert_eq!(out, all[..k], "k = {k}");
        }
    }
}
