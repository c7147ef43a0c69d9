//! ATTENTION: causal grouped-query attention, f32 accumulation (the ISA allows f32 or
//! wider, in any order).
//!
//! Prefill (several rows): one task per block of [`ROW_BLOCK`] query rows, every kv head in
//! turn: the block's queries against the kv head's keys as one tile product (`dot_tile`,
//! the LINEAR micro-kernel), the causal mask and the softmax per query row and head, then
//! the weights against the values as another (over the values transposed, gathered once
//! per task). Each key and value is read once per block instead of once per row.
//!
//! Decode (one row): one task per kv head: the query heads that share a kv head share one pass
//! over its keys and one over its values. One row over a long context is also split over
//! positions (each part keeps its own maximum, sum and weighted values, merged at the end
//! as flash-decoding does), so that every thread has work when kv heads are few: also a
//! short context, when the kv heads alone would leave threads idle (SmolLM2's 3 kv heads
//! on 2 threads: 3 tasks, one thread doing two of them while the other waits).

use purebee_isa::ops::Attention;
use purebee_isa::ExecError;

use super::kv_write::check_fits;
use super::{f32s_mut, Exec};
use crate::kernels::linear::{dot, dot_tile};
use crate::kernels::math;
use crate::kernels::Simd;
use crate::store::dims;

/// Positions per part when one row is split over positions.
const SPLIT_POSITIONS: usize = 256;
/// The fewest positions a part gets when a short context is split only to give every
/// thread work.
const MIN_PART: usize = 32;

/// Query rows per prefill task.
const ROW_BLOCK: usize = 16;

/// Where the caches and this task's heads are.
#[derive(Clone, Copy)]
struct Shape {
    hd: usize,
    group: usize,
    kv_width: usize,
    scale: f32,
    level: Simd,
}

/// What one part of the positions of one (row, kv head) produced: per query head of the
/// group, the maximum score, `Σ e^(score − max)` and `Σ e^(score − max) · v`.
struct Part {
    max: Vec<f32>,
    sum: Vec<f32>,
    acc: Vec<f32>,
}

/// Attends the `group` query heads in `q` (`[group · hd]`) of kv head `kvh` over cache
/// positions `t0..t1`.
fn attend(s: Shape, q: &[f32], k: &[f32], v: &[f32], kvh: usize, t0: usize, t1: usize) -> Part {
    let (hd, g) = (s.hd, s.group);
    let len = t1 - t0;
    let mut scores = vec![0f32; g * len]; // [g, len]
    for t in t0..t1 {
        let kt = &k[t * s.kv_width + kvh * hd..][..hd];
        for h in 0..g {
            scores[h * len + t - t0] = dot(s.level, &q[h * hd..(h + 1) * hd], kt) * s.scale;
        }
    }
    let mut part = Part { max: vec![f32::NEG_INFINITY; g], sum: vec![0.0; g], acc: vec![0.0; g * hd] };
    for h in 0..g {
        let row = &mut scores[h * len..(h + 1) * len];
        let max = max_of(row.iter().copied());
        let mut sum = 0f32;
        for x in row.iter_mut() {
            *x = math::exp(*x - max);
            sum += *x;
        }
        part.max[h] = max;
        part.sum[h] = sum;
    }
    for t in t0..t1 {
        let vt = &v[t * s.kv_width + kvh * hd..][..hd];
        for h in 0..g {
            let wt = scores[h * len + t - t0];
            for (a, &x) in part.acc[h * hd..(h + 1) * hd].iter_mut().zip(vt) {
                *a += wt * x;
            }
        }
    }
    part
}

/// The maximum of `xs`, NaN if any is NaN.
fn max_of(xs: impl IntoIterator<Item = f32>) -> f32 {
    xs.into_iter().fold(f32::NEG_INFINITY, |a, b| if b > a || b.is_nan() { b } else { a })
}

/// Prefill: query rows `r0 .. r0 + rows` (row `r` at position `pos + r`), every kv head, into
/// `out`, those rows of the output (`[rows, n_kv · group · hd]`).
fn attend_rows(s: Shape, (q, k, v): (&[f32], &[f32], &[f32]), n_kv: usize, pos: usize, r0: usize, out: &mut [f32]) {
    let (hd, g) = (s.hd, s.group);
    let q_width = n_kv * g * hd;
    let rows = out.len() / q_width.max(1);
    // The block's last row attends to positions 0 ..= pos + r0 + rows − 1.
    let len = pos + r0 + rows;
    let qn = rows * g; // query vectors of one kv head: row r, head h at r·g + h
    let mut keys = vec![0f32; len * hd]; // [len, hd]
    let mut values_t = vec![0f32; hd * len]; // [hd, len]
    let mut queries = vec![0f32; qn * hd]; // [qn, hd]
    let mut weights = vec![0f32; qn * len]; // [qn, len]
    let mut sums = vec![0f32; qn];
    let mut acc = vec![0f32; qn * hd]; // [qn, hd]
    for kvh in 0..n_kv {
        for t in 0..len {
            let at = t * s.kv_width + kvh * hd;
            keys[t * hd..(t + 1) * hd].copy_from_slice(&k[at..at + hd]);
            for (d, &x) in v[at..at + hd].iter().enumerate() {
                values_t[d * len + t] = x;
            }
        }
        for r in 0..rows {
            let at = (r0 + r) * q_width + kvh * g * hd;
            queries[r * g * hd..(r + 1) * g * hd].copy_from_slice(&q[at..at + g * hd]);
        }
        // weights[j·len + t] = q_j · k_t (the keys as the tile's rows, the queries as its
        // tokens), then scaled, masked past each row's position and turned into e^(s − max).
        dot_tile(s.level, &keys, &queries, hd, &mut weights);
        for (j, row) in weights.chunks_exact_mut(len.max(1)).enumerate() {
            let (live, masked) = row.split_at_mut(pos + r0 + j / g + 1);
            live.iter_mut().for_each(|x| *x *= s.scale);
            let max = max_of(live.iter().copied());
            let mut sum = 0f32;
            for x in live.iter_mut() {
                *x = math::exp(*x - max);
                sum += *x;
            }
            masked.fill(0.0);
            sums[j] = sum;
        }
        // acc[j·hd + d] = Σ_t w_jt · v_t[d] (the values' dimensions as the tile's rows).
        dot_tile(s.level, &values_t, &weights, len, &mut acc);
        for (j, a) in acc.chunks_exact(hd.max(1)).enumerate() {
            let (r, h) = (j / g, j % g);
            let o = &mut out[r * q_width + (kvh * g + h) * hd..][..hd];
            for (o, &a) in o.iter_mut().zip(a) {
                *o = a / sums[j];
            }
        }
    }
}

/// Merges parts of one (row, kv head) into `out` (`[group · hd]`).
fn merge(parts: &[Part], hd: usize, out: &mut [f32]) {
    for (h, o) in out.chunks_exact_mut(hd.max(1)).enumerate() {
        let max = max_of(parts.iter().map(|p| p.max[h]));
        let mut sum = 0f32;
        o.fill(0.0);
        for p in parts {
            // A part whose scores were all −∞ contributes nothing (and must not give NaN).
            let f = if p.max[h] == f32::NEG_INFINITY { 0.0 } else { math::exp(p.max[h] - max) };
            sum += f * p.sum[h];
            for (a, &x) in o.iter_mut().zip(&p.acc[h * hd..(h + 1) * hd]) {
                *a += f * x;
            }
        }
        for a in o.iter_mut() {
            *a /= sum;
        }
    }
}

pub(crate) fn run(e: &mut Exec, a: &Attention, pos: u32) -> Result<(), ExecError> {
    const OP: &str = "ATTENTION";
    let (n, q_width) = dims(e.reg, OP, a.q)?;
    let (_, kv_width) = dims(e.reg, OP, a.k_cache)?;
    check_fits(e, OP, a.k_cache, pos, n)?;
    e.store.f32s(e.reg, OP, a.q)?;
    e.store.f32s(e.reg, OP, a.k_cache)?;
    e.store.f32s(e.reg, OP, a.v_cache)?;
    let hd = a.head_dim as usize;
    let (n_head, n_kv) = (q_width / hd, kv_width / hd);
    let group = n_head / n_kv;
    let shape = Shape { hd, group, kv_width, scale: (1.0 / (hd as f64).sqrt()) as f32, level: e.level };
    let (reg, pool) = (e.reg, e.pool);
    e.store.with_output(reg, OP, a.out, |store, words| {
        let q = store.f32s(reg, OP, a.q)?;
        let k = store.f32s(reg, OP, a.k_cache)?;
        let v = store.f32s(reg, OP, a.v_cache)?;
        let out = f32s_mut(words, n * q_width);
        let positions = pos as usize + 1;
        // Two tasks per thread at least, in parts of MIN_PART positions or more.
        let for_threads = (2 * pool.threads()).div_ceil(n_kv.max(1)).min(positions.div_ceil(MIN_PART));
        let splits = positions.div_ceil(SPLIT_POSITIONS).max(for_threads);
        if n == 1 && splits > 1 && n_kv < 2 * pool.threads() {
            // One row, long context: (kv head, part) tasks, then a merge per kv head.
            let per = positions.div_ceil(splits);
            let mut parts: Vec<Option<Part>> = (0..n_kv * splits).map(|_| None).collect();
            pool.for_each_chunk(&mut parts, 1, &|i, p| {
                let (kvh, s) = (i / splits, i % splits);
                let (t0, t1) = (s * per, ((s + 1) * per).min(positions));
                let qh = &q[kvh * group * hd..(kvh + 1) * group * hd];
                p[0] = Some(attend(shape, qh, k, v, kvh, t0, t1.max(t0)));
            });
            for (kvh, o) in out.chunks_exact_mut(group * hd).enumerate() {
                let mine: Vec<Part> =
                    parts[kvh * splits..(kvh + 1) * splits].iter_mut().filter_map(Option::take).collect();
                merge(&mine, hd, o);
            }
        } else if n > 1 {
            pool.for_each_chunk(out, ROW_BLOCK * q_width, &|i, o| {
                attend_rows(shape, (q, k, v), n_kv, pos as usize, i * ROW_BLOCK, o);
            });
        } else {
            pool.for_each_chunk(out, group * hd, &|i, o| {
                let (r, kvh) = (i / n_kv, i % n_kv);
                let qh = &q[r * q_width + kvh * group * hd..][..group * hd];
                let part = attend(shape, qh, k, v, kvh, 0, pos as usize + r + 1);
                merge(std::slice::from_ref(&part), hd, o);
            });
        }
        Ok(())
    })
}
