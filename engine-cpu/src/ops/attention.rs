//! ATTENTION: causal grouped-query attention, f32 accumulation (the ISA allows f32 or
//! wider, in any order).
//!
//! Prefill (more than [`EXACT_ROWS`] rows): one task per block of [`ROW_BLOCK`] query
//! rows, every kv head in turn: the block's queries against the kv head's keys as one tile
//! product (`dot_tile`, the LINEAR micro-kernel), the causal mask and the softmax per query row and head, then
//! the weights against the values as another (over the values transposed, gathered once
//! per task). Each key and value is read once per block instead of once per row.
//!
//! Decode (one row, and each row of a pass of at most [`EXACT_ROWS`]): the positions are
//! split into parts, each a task over every kv head (each part keeps its own maximum, sum
//! and weighted values per head, merged at the end as flash-decoding does): a task reads whole cache rows in order, and the parts balance the
//! threads whatever the number of kv heads (3 kv heads on 2 threads). Within a part, one
//! pass over its key rows and one over its value rows, in place and in order
//! (`kernels/attention.rs`): the query heads that share a kv head share each load.
//!
//! Paged rows (a batched step of several sequences): every row alone, in parts that end at
//! every page boundary and every [`PAGED_PART`] positions, merged in order. The parts
//! depend only on the row's position and the page size, never on the other rows or the
//! threads, so a sequence gets the same bits in any batch (the ISA's promise); the tasks,
//! one per (row, part), balance the threads.

use purebee_isa::ops::Attention;
use purebee_isa::{ExecError, ParamValue, Program};
use purebee_memory::{DType, Registry, TensorId};

use super::cache_rows::{resolve, Resolved};
use super::{f32s_mut, Exec};
use crate::kernels::attention;
use crate::kernels::linear::dot_tile;
use crate::kernels::math;
use crate::kernels::pool::Pool;
use crate::kernels::Simd;
use crate::store::{dims, mem, Store};

/// Positions per part when one row is split over positions.
const SPLIT_POSITIONS: usize = 256;
/// The fewest positions a part gets when a short context is split only to give every
/// thread work.
const MIN_PART: usize = 32;

/// The most positions of one part of a paged row.
const PAGED_PART: usize = 256;

/// Query rows per prefill task.
const ROW_BLOCK: usize = 16;

/// Passes of at most this many consecutive rows attend row by row, each as a one-row pass
/// does (bit for bit): a pass checking drafted tokens then gives what decode steps give.
pub(crate) const EXACT_ROWS: usize = 32;

/// How a one-row pass over `positions` cache positions splits them on `threads` threads:
/// `(parts, positions per part)`. Two parts per thread when every part gets [`MIN_PART`]
/// positions, more when the context is long (each part a task over every kv head, so each
/// reads whole cache rows, in order).
fn decode_parts(positions: usize, threads: usize) -> (usize, usize) {
    let for_threads = (2 * threads).min(positions.div_ceil(MIN_PART));
    let splits = positions.div_ceil(SPLIT_POSITIONS).max(for_threads).max(1);
    (splits, positions.div_ceil(splits))
}

/// Where the caches and this task's heads are.
#[derive(Clone, Copy)]
struct Shape {
    hd: usize,
    group: usize,
    kv_width: usize,
    scale: f32,
    level: Simd,
}

/// A KV cache as its engine holds it: F32, or the bits of F16 values, widened exactly: by
/// the decode kernels as they load them (F16C on AVX2), a span at a time for prefill.
#[derive(Clone, Copy)]
enum Cache<'a> {
    F32(&'a [f32]),
    F16(&'a [u16]),
}

impl<'a> Cache<'a> {
    /// Elements `range` as f32: in place for an F32 cache, widened into `buf` for F16.
    fn span<'b>(self, level: Simd, range: std::ops::Range<usize>, buf: &'b mut Vec<f32>) -> &'b [f32]
    where
        'a: 'b,
    {
        match self {
            Cache::F32(x) => &x[range],
            Cache::F16(h) => {
                buf.clear();
                buf.resize(range.len(), 0.0);
                attention::widen_f16(level, &h[range], buf);
                buf
            }
        }
    }
}

/// What one part of the positions of one query row produced: per query head, the maximum
/// score, `Σ e^(score − max)` and `Σ e^(score − max) · v`.
struct Part {
    max: Vec<f32>,
    sum: Vec<f32>,
    acc: Vec<f32>,
}

/// Attends every query head of one row `q` (`[n_head · hd]`) over cache positions `t0..t1`,
/// reading the cache rows in place, in order.
fn attend(s: Shape, q: &[f32], (k, v): (Cache, Cache), t0: usize, t1: usize) -> Part {
    let hd = s.hd;
    let n_head = q.len() / hd;
    let len = t1.saturating_sub(t0);
    let mut part = Part { max: vec![f32::NEG_INFINITY; n_head], sum: vec![0.0; n_head], acc: vec![0.0; n_head * hd] };
    if len == 0 {
        return part;
    }
    let heads = attention::Heads { hd, group: s.group, stride: s.kv_width };
    let rows = t0 * s.kv_width..t1 * s.kv_width;
    let mut weights = vec![0f32; n_head * len]; // [n_head, len]
                                                // F16 rows are widened as the kernels load them.
    match k {
        Cache::F32(k) => attention::scores(s.level, heads, q, &k[rows.clone()], s.scale, &mut weights),
        Cache::F16(k) => attention::scores(s.level, heads, q, &k[rows.clone()], s.scale, &mut weights),
    }
    for (h, row) in weights.chunks_exact_mut(len).enumerate() {
        let max = max_of(row.iter().copied());
        part.max[h] = max;
        part.sum[h] = attention::exp_shifted(s.level, row, max);
    }
    match v {
        Cache::F32(v) => attention::weighted_values(s.level, heads, &weights, len, &v[rows], &mut part.acc),
        Cache::F16(v) => attention::weighted_values(s.level, heads, &weights, len, &v[rows], &mut part.acc),
    }
    part
}

/// The maximum of `xs`, NaN if any is NaN.
fn max_of(xs: impl IntoIterator<Item = f32>) -> f32 {
    xs.into_iter().fold(f32::NEG_INFINITY, |a, b| if b > a || b.is_nan() { b } else { a })
}

/// Prefill: query rows `r0 .. r0 + rows` (row `r` at position `pos + r`), every kv head, into
/// `out`, those rows of the output (`[rows, n_kv · group · hd]`).
fn attend_rows(s: Shape, (q, k, v): (&[f32], Cache, Cache), n_kv: usize, pos: usize, r0: usize, out: &mut [f32]) {
    let (hd, g) = (s.hd, s.group);
    let q_width = n_kv * g * hd;
    let rows = out.len() / q_width.max(1);
    // The block's last row attends to positions 0 ..= pos + r0 + rows − 1.
    let len = pos + r0 + rows;
    let (mut k_buf, mut v_buf) = (Vec::new(), Vec::new());
    let k = k.span(s.level, 0..len * s.kv_width, &mut k_buf);
    let v = v.span(s.level, 0..len * s.kv_width, &mut v_buf);
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

/// Merges the parts of one row into `out` (`[n_head · hd]`).
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

/// The position ranges `[t0, t1)` of a paged row at position `p`: they end at every page
/// boundary and every [`PAGED_PART`] positions, so each covers consecutive cache rows.
fn paged_parts(p: usize, page: usize) -> impl Iterator<Item = (usize, usize)> {
    let len = p + 1;
    let mut t = 0;
    std::iter::from_fn(move || {
        (t < len).then(|| {
            let end = len.min((t / page + 1) * page).min((t / PAGED_PART + 1) * PAGED_PART);
            let part = (t, end);
            t = end;
            part
        })
    })
}

/// Paged rows: one task per (row, part), then each row's parts merged in order.
fn attend_paged(s: Shape, (q, k, v): (&[f32], Cache, Cache), rows: &Resolved, pool: &Pool, out: &mut [f32]) {
    let q_width = s.kv_width * s.group; // n_kv · group · hd
    let n = out.len() / q_width.max(1);
    let page = rows.page_size().unwrap_or(usize::MAX);
    let tasks: Vec<(usize, usize, usize)> =
        (0..n).flat_map(|r| paged_parts(rows.position(r), page).map(move |(t0, t1)| (r, t0, t1))).collect();
    let mut parts: Vec<Option<Part>> = (0..tasks.len()).map(|_| None).collect();
    pool.for_each_chunk(&mut parts, 1, &|i, p| {
        let (r, t0, t1) = tasks[i];
        let c0 = rows.cache_row(r, t0);
        p[0] = Some(attend(s, &q[r * q_width..(r + 1) * q_width], (k, v), c0, c0 + (t1 - t0)));
    });
    // The tasks are in row order: each row's parts are the next run of them.
    let mut parts = parts.into_iter().flatten();
    let mut row_parts = Vec::new();
    let mut next = 0;
    for (r, o) in out.chunks_exact_mut(q_width.max(1)).enumerate() {
        let count = tasks[next..].iter().take_while(|t| t.0 == r).count();
        next += count;
        row_parts.clear();
        row_parts.extend(parts.by_ref().take(count));
        merge(&row_parts, s.hd, o);
    }
}

/// ATTENTION's view of a live cache of either dtype.
fn cache<'a>(store: &'a Store, reg: &'a Registry, id: TensorId) -> Result<Cache<'a>, ExecError> {
    const OP: &str = "ATTENTION";
    if reg.desc(id).map_err(mem(OP))?.dtype != DType::F16 {
        return Ok(Cache::F32(store.f32s(reg, OP, id)?));
    }
    let numel = reg.desc(id).map_err(mem(OP))?.shape.numel();
    let bytes = store.bytes(reg, OP, id)?;
    let halves: &[u16] = bytemuck::try_cast_slice(&bytes[..2 * numel]).map_err(|_| ExecError::Decode {
        op: OP,
        tensor: reg.name(id).to_string(),
        reason: "its bytes are not 2-byte aligned".to_string(),
    })?;
    Ok(Cache::F16(halves))
}

pub(crate) fn run(e: &mut Exec, program: &Program, params: &[ParamValue], a: &Attention) -> Result<(), ExecError> {
    const OP: &str = "ATTENTION";
    let (n, q_width) = dims(e.reg, OP, a.q)?;
    let (_, kv_width) = dims(e.reg, OP, a.k_cache)?;
    let rows = resolve(e, OP, program, params, &a.rows, n, a.k_cache, true)?;
    e.store.f32s(e.reg, OP, a.q)?;
    e.store.bytes(e.reg, OP, a.k_cache)?;
    e.store.bytes(e.reg, OP, a.v_cache)?;
    let hd = a.head_dim as usize;
    let (n_head, n_kv) = (q_width / hd, kv_width / hd);
    let group = n_head / n_kv;
    let shape = Shape { hd, group, kv_width, scale: (1.0 / (hd as f64).sqrt()) as f32, level: e.level };
    let (reg, pool) = (e.reg, e.pool);
    e.store.with_output(reg, OP, a.out, |store, words| {
        let q = store.f32s(reg, OP, a.q)?;
        let k = cache(store, reg, a.k_cache)?;
        let v = cache(store, reg, a.v_cache)?;
        let out = f32s_mut(words, n * q_width);
        let pos = match rows {
            Resolved::Consecutive(pos) => pos,
            Resolved::Paged { .. } => {
                attend_paged(shape, (q, k, v), &rows, pool, out);
                return Ok(());
            }
        };
        if n <= EXACT_ROWS {
            // Each row as a one-row pass computes it (the same parts, merged the same way):
            // a short pass (drafted tokens checked at once) gets the bits of decode steps.
            let mut tasks = Vec::new();
            for r in 0..n {
                let (splits, per) = decode_parts(pos + r + 1, pool.threads());
                tasks.extend((0..splits).map(|i| (r, (i * per).min(pos + r + 1), ((i + 1) * per).min(pos + r + 1))));
            }
            let mut parts: Vec<Option<Part>> = tasks.iter().map(|_| None).collect();
            pool.for_each_chunk(&mut parts, 1, &|i, p| {
                let (r, t0, t1) = tasks[i];
                p[0] = Some(attend(shape, &q[r * q_width..(r + 1) * q_width], (k, v), t0, t1));
            });
            let mut parts = parts.into_iter().flatten();
            for (r, o) in out.chunks_exact_mut(q_width).enumerate() {
                let row_parts: Vec<Part> = parts.by_ref().take(decode_parts(pos + r + 1, pool.threads()).0).collect();
                merge(&row_parts, hd, o);
            }
        } else {
            pool.for_each_chunk(out, ROW_BLOCK * q_width, &|i, o| {
                attend_rows(shape, (q, k, v), n_kv, pos, i * ROW_BLOCK, o);
            });
        }
        Ok(())
    })
}
