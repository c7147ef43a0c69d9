//! ATTENTION: causal grouped-query attention, f32 accumulation (the ISA allows f32 or
//! wider, in any order).
//!
//! One task per (query row, kv head): the query heads that share a kv head share one pass
//! over its keys and one over its values. One row over a long context is also split over
//! positions (each part keeps its own maximum, sum and weighted values, merged at the end
//! as flash-decoding does), so that every thread has work when kv heads are few: also a
//! short context, when the kv heads alone would leave threads idle (SmolLM2's 3 kv heads
//! on 2 threads: 3 tasks, one thread doing two of them while the other waits).

use purebee_isa::ops::Attention;
use purebee_isa::ExecError;

use super::kv_write::check_fits;
use super::{f32s_mut, Exec};
use crate::kernels::linear::dot;
use crate::kernels::math;
use crate::kernels::Simd;
use crate::store::dims;

/// Positions per part when one row is split over positions.
const SPLIT_POSITIONS: usize = 256;
/// The fewest positions a part gets when a short context is split only to give every
/// thread work.
const MIN_PART: usize = 32;

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
        let max = row.iter().copied().fold(f32::NEG_INFINITY, |a, b| if b > a || b.is_nan() { b } else { a });
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

/// Merges parts of one (row, kv head) into `out` (`[group · hd]`).
fn merge(parts: &[Part], hd: usize, out: &mut [f32]) {
    for (h, o) in out.chunks_exact_mut(hd.max(1)).enumerate() {
        let max =
            parts.iter().map(|p| p.max[h]).fold(f32::NEG_INFINITY, |a, b| if b > a || b.is_nan() { b } else { a });
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
