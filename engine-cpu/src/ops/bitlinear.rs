//! BITLINEAR: per-token int8 activations × ternary codes, exact integer sums per scale
//! block, then `y = Σ_b d_b · isum_b / s · scale` in f64 in the reference's order, so the
//! outputs are bit for bit the reference engine's.
//!
//! The activations are quantized once per contents of `x` and kept ([`Activations`]): the
//! BITLINEARs that read the same `x` (often two or three in a row) share one quantization,
//! which the ISA's semantics allow since it is a pure function of `x`.
//!
//! - One token: each thread takes blocks of weight rows and sums straight from the packed
//!   2-bit codes (TQ2_0, I2_S) or from a TQ1_0 block unpacked to one code per byte.
//! - A few tokens (a batched decode step or a verify pass, at most [`FEW_TOKENS`]): each
//!   task takes a tile of [`FEW_TOKENS_ROWS`] rows and sums it for every token straight
//!   from the packed codes, each code loaded and unpacked once for up to four tokens: the
//!   tile's bytes come from memory once.
//! - Several tokens: weight-stationary; a tile of rows is unpacked to one code per byte
//!   once, then multiplied against every token.
//!
//! Every path gives the reference's bits, so which one runs never changes a row's result.

use purebee_isa::ops::BitLinear;
use purebee_isa::ExecError;
use purebee_memory::quant::{i2_s, QuantMatrix};
use purebee_memory::{DType, TensorId};

use super::linear::transpose;
use super::{f32s_mut, Exec};
use crate::kernels::f16::f16_to_f32;
use crate::kernels::pool::Pool;
use crate::kernels::ternary::tokens::{self as tokens_kernel, ChunkLayout};
use crate::kernels::ternary::{self as t, CHUNK_ELEMS};
use crate::kernels::Simd;
use crate::store::{dims, mem, Store};

/// Weight rows unpacked together in prefill.
const TILE_ROWS: usize = 8;
/// Elements per panel in prefill: the tile's codes (8 KiB) and four tokens' activations
/// (4 KiB) over one panel fit the L1 cache with room to spare.
const PANEL: usize = 1024;

/// The int8 activations of one `x`, and the `x` (and its version) they came from.
#[derive(Default)]
pub(crate) struct Activations {
    key: Option<(TensorId, u64)>,
    k: usize,
    /// `[n, k]`.
    q: Vec<i8>,
    /// `[n]`.
    s: Vec<f32>,
    /// `[n, k / 128]`: `Σ q` per 128 elements.
    sums: Vec<i32>,
}

impl Activations {
    fn update(&mut self, level: Simd, store: &Store, x_id: TensorId, x: &[f32], n: usize, k: usize) {
        let key = store.version(x_id).map(|v| (x_id, v));
        if key.is_some() && key == self.key && self.k == k && self.s.len() == n {
            return;
        }
        let groups = k / CHUNK_ELEMS;
        self.q.resize(n * k, 0);
        self.s.resize(n, 0.0);
        self.sums.resize(n * groups, 0);
        for r in 0..n {
            let sums = &mut self.sums[r * groups..(r + 1) * groups];
            self.s[r] = t::quantize_row(level, &x[r * k..(r + 1) * k], &mut self.q[r * k..(r + 1) * k], sums);
        }
        self.k = k;
        self.key = key;
    }

    fn q(&self, r: usize) -> &[i8] {
        &self.q[r * self.k..(r + 1) * self.k]
    }

    /// `Σ q` of row `r` over each scale block of `block` elements (a multiple of 128;
    /// an I2_S row of zero length is one empty block).
    fn block_sums(&self, r: usize, block: usize) -> Vec<i32> {
        let g = self.k / CHUNK_ELEMS;
        let per = block / CHUNK_ELEMS;
        if per == 0 {
            return vec![0];
        }
        self.sums[r * g..(r + 1) * g].chunks(per).map(|c| c.iter().sum()).collect()
    }
}

pub(crate) fn run(e: &mut Exec, b: &BitLinear) -> Result<(), ExecError> {
    const OP: &str = "BITLINEAR";
    e.store.f32s(e.reg, OP, b.x)?;
    let (m, k) = dims(e.reg, OP, b.weight)?;
    let dtype = e.reg.desc(b.weight).map_err(mem(OP))?.dtype;
    let reg = e.reg;
    let decode_error = |reason: String| ExecError::Decode { op: OP, tensor: reg.name(b.weight).to_string(), reason };
    QuantMatrix::new(dtype, e.store.bytes(reg, OP, b.weight)?, m, k).map_err(|e| decode_error(e.to_string()))?;
    if !dtype.is_ternary() || k % CHUNK_ELEMS != 0 {
        return Err(decode_error("not a ternary type".to_string()));
    }
    let (n, _) = dims(reg, OP, b.x)?;
    let out_scale = match b.scale {
        Some(id) => e.store.f32s(reg, OP, id)?.first().copied().unwrap_or(1.0) as f64,
        None => 1.0,
    };
    let (pool, level) = (e.pool, e.level);
    let acts = &mut e.caches.activations;
    acts.update(level, e.store, b.x, e.store.f32s(reg, OP, b.x)?, n, k);
    e.store.with_output(reg, OP, b.out, |store, words| {
        let bytes = store.bytes(reg, OP, b.weight)?;
        let w = Ternary::new(dtype, bytes, m, k);
        let out = f32s_mut(words, n * m);
        if n == 1 {
            gemv(pool, level, &w, acts, out_scale, out);
        } else if n <= FEW_TOKENS {
            gemv_tokens(pool, level, &w, acts, n, out_scale, out);
        } else {
            gemm(pool, level, &w, acts, n, out_scale, out);
        }
        Ok(())
    })
}

/// A ternary weight in its file layout.
struct Ternary<'a> {
    dtype: DType,
    bytes: &'a [u8],
    k: usize,
    /// Bytes per row.
    row_bytes: usize,
    /// I2_S: the tensor's scale.
    i2s_scale: f32,
}

impl<'a> Ternary<'a> {
    fn new(dtype: DType, bytes: &'a [u8], m: usize, k: usize) -> Ternary<'a> {
        let row_bytes = dtype.row_bytes(k).unwrap_or(0);
        let i2s_scale = match bytes.get(m * row_bytes..).and_then(|t| t.first_chunk::<{ i2_s::TRAILER_BYTES }>()) {
            Some(trailer) if dtype == DType::I2_S => i2_s::scale(trailer),
            _ => 0.0,
        };
        Ternary { dtype, bytes, k, row_bytes, i2s_scale }
    }

    fn row(&self, j: usize) -> &'a [u8] {
        self.rows(j, 1)
    }

    /// Rows `first..first + n`, consecutive in the file.
    fn rows(&self, first: usize, n: usize) -> &'a [u8] {
        &self.bytes[first * self.row_bytes..(first + n) * self.row_bytes]
    }

    /// The f16 bits of block `b`'s `d` in `row` (TQ2_0 and TQ1_0: after the block's codes).
    fn block_scale_bits(&self, row: &[u8], b: usize) -> u16 {
        let (bb, dd) = if self.dtype == DType::TQ2_0 { (66, 64) } else { (54, 52) };
        u16::from_le_bytes([row[bb * b + dd], row[bb * b + dd + 1]])
    }

    /// The scale of block `b` of `row` (I2_S: the tensor's).
    fn block_scale(&self, row: &[u8], b: usize) -> f32 {
        match self.dtype {
            DType::I2_S => self.i2s_scale,
            _ => f16_to_f32(self.block_scale_bits(row, b)),
        }
    }

    /// Row `j`'s one scale when all its blocks share it ([`t::uniform_scale`]); an I2_S
    /// row is one block already.
    fn uniform_scale(&self, j: usize) -> Option<f64> {
        let row = self.row(j);
        match self.dtype {
            DType::I2_S => None,
            _ => t::uniform_scale((0..self.blocks()).map(|b| self.block_scale_bits(row, b))),
        }
    }

    /// Row `j`'s scale per block, widened to f64.
    fn scales(&self, j: usize, out: &mut [f64]) {
        let row = self.row(j);
        for (b, d) in out.iter_mut().enumerate() {
            *d = self.block_scale(row, b) as f64;
        }
    }

    /// Elements per scale block: the whole row for I2_S.
    fn block_len(&self) -> usize {
        if self.dtype == DType::I2_S {
            self.k
        } else {
            256
        }
    }

    /// Scale blocks per row.
    fn blocks(&self) -> usize {
        if self.dtype == DType::I2_S {
            1
        } else {
            self.k / 256
        }
    }

    /// `y = Σ_b d_b · isum_b / s · scale` for rows `j0 .. j0 + out.len()` and one token
    /// (its `Σ q` per scale block `qsums`, its activation scale `s`), their raw code sums
    /// per scale block in `raws` (`[rows, blocks]`). The rows' f64 sums run interleaved
    /// (independent chains), each in the reference's order: `0 + t_0 + t_1 + ...`, as
    /// `Iterator::sum` adds.
    fn finish_rows(&self, j0: usize, qsums: &[i32], s: f64, out_scale: f64, raws: &[i32], out: &mut [f32]) {
        const ROWS: usize = 4;
        let nb = self.blocks();
        let zero: f64 = std::iter::empty::<f64>().sum();
        for (g, ys) in out.chunks_mut(ROWS).enumerate() {
            let mut acc = [zero; ROWS];
            let mut rows: [&[u8]; ROWS] = [&[]; ROWS];
            for (i, row) in rows.iter_mut().enumerate().take(ys.len()) {
                *row = self.row(j0 + g * ROWS + i);
            }
            for (b, &qsum) in qsums.iter().enumerate() {
                for (i, row) in rows[..ys.len()].iter().enumerate() {
                    let d = self.block_scale(row, b);
                    let isum = raws[(g * ROWS + i) * nb + b] as i64 - qsum as i64;
                    acc[i] += d as f64 * isum as f64;
                }
            }
            for (y, a) in ys.iter_mut().zip(acc) {
                *y = ((a / s) * out_scale) as f32;
            }
        }
    }
}

fn gemv(pool: &Pool, level: Simd, w: &Ternary, acts: &Activations, out_scale: f64, out: &mut [f32]) {
    // Σ q per scale block and the activation scale, once for every part.
    let token = Token::new(acts, 0, w.block_len());
    // Parts claimed as threads get free, long at first and short at the end
    // (`for_each_guided`): a part's rows are one stream for the prefetchers, which start
    // cold at every part, and the threads finish together. On a decode of 2560- and
    // 6912-element ternary rows the threads were busy 91–94 % of each call with four equal
    // tasks per thread, 95–96 % so.
    pool.for_each_guided(out, MIN_GEMV_ROWS, &|first, o| one_token_rows(level, w, &token, out_scale, first, o));
}

/// The most tokens that take [`gemv_tokens`] (more go through the unpacked tiles of
/// `gemm`). Passes of 9 to 16 tokens over TQ2_0 rows of 2560 and 6912 elements (2 threads)
/// cost 3.6 to 5.7 one-token passes here, against 5.1 to 6.8 through the tiles.
const FEW_TOKENS: usize = 16;
/// Rows per task of [`gemv_tokens`]: 21 KB of TQ2_0 rows of 2560, which stay in L1 while
/// every token passes over them.
const FEW_TOKENS_ROWS: usize = 32;

/// A few tokens: each task sums a tile of rows for every token (the tile read from memory
/// once) into `[rows, n]`, then transposed into `out`. Where the level has a several-token
/// kernel (`ternary::tokens`), up to four tokens share each load and unpacking of the codes;
/// elsewhere the one-token kernels run per token.
fn gemv_tokens(pool: &Pool, level: Simd, w: &Ternary, acts: &Activations, n: usize, out_scale: f64, out: &mut [f32]) {
    let m = out.len() / n.max(1);
    let tokens: Vec<Token> = (0..n).map(|t| Token::new(acts, t, w.block_len())).collect();
    let layout = match w.dtype {
        DType::TQ2_0 => Some(ChunkLayout::tq2_0(w.k)),
        DType::I2_S => Some(ChunkLayout::i2_s(w.k)),
        _ => None,
    }
    .filter(|_| tokens_kernel::has_kernel(level) && w.k <= tokens_kernel::MAX_ROW_ELEMS);
    let mut by_row = vec![0f32; m * n];
    pool.for_each_chunk(&mut by_row, FEW_TOKENS_ROWS * n, &|i, o| {
        let (rows, first) = (o.len() / n, i * FEW_TOKENS_ROWS);
        let mut ys = [0f32; FEW_TOKENS_ROWS * tokens_kernel::MAX_TOKENS]; // [tokens, rows]
        for (g, group) in tokens.chunks(tokens_kernel::MAX_TOKENS).enumerate() {
            let ys = &mut ys[..group.len() * rows];
            match &layout {
                Some(layout) => several_tokens_rows(level, w, layout, group, out_scale, first, ys),
                None => {
                    for (token, ys) in group.iter().zip(ys.chunks_exact_mut(rows)) {
                        one_token_rows(level, w, token, out_scale, first, ys);
                    }
                }
            }
            for (t, ys) in ys.chunks_exact(rows).enumerate() {
                for (r, &y) in ys.iter().enumerate() {
                    o[r * n + tokens_kernel::MAX_TOKENS * g + t] = y;
                }
            }
        }
    });
    transpose(pool, &by_row, m, n, out);
}

/// `ys[t · rows + r]`: row `first + r` against token `t` of `group` (1 to 4 tokens), the
/// codes of each row loaded once for every token. Each result is the one-token path's:
/// exact integer sums, finished as `one_token_rows` finishes them.
fn several_tokens_rows(
    level: Simd,
    w: &Ternary,
    layout: &ChunkLayout,
    group: &[Token],
    out_scale: f64,
    first: usize,
    ys: &mut [f32],
) {
    let rows = ys.len() / group.len();
    let mut q: [&[i8]; tokens_kernel::MAX_TOKENS] = [&[]; tokens_kernel::MAX_TOKENS];
    for (q, token) in q.iter_mut().zip(group) {
        *q = token.q;
    }
    let mut raws = [0i32; FEW_TOKENS_ROWS * tokens_kernel::MAX_TOKENS];
    let raws = &mut raws[..ys.len()];
    tokens_kernel::packed_rows_tokens(level, w.rows(first, rows), w.row_bytes, layout, &q[..group.len()], raws);
    if w.dtype == DType::I2_S {
        for ((token, raws), ys) in group.iter().zip(raws.chunks_exact(rows)).zip(ys.chunks_exact_mut(rows)) {
            w.finish_rows(first, &token.qsums, token.s, out_scale, raws, ys);
        }
        return;
    }
    // TQ2_0: a row whose blocks share one scale is that scale times its integer total
    // (`t::uniform_scale` says why that is the reference's sum, and why a zero total
    // is not); any other row is summed again the long way, as one token alone would.
    for r in 0..rows {
        let scale = w.uniform_scale(first + r);
        for (t, token) in group.iter().enumerate() {
            let total = raws[t * rows + r] as i64 - token.qsum_total;
            let sum = match scale {
                Some(d) if total != 0 => d * total as f64,
                _ => t::tq2_0_row_sum(level, w.row(first + r), token.q, &token.qsums),
            };
            ys[t * rows + r] = ((sum / token.s) * out_scale) as f32;
        }
    }
}

/// One token's int8 activations, their sums per scale block (and in all) and their scale.
struct Token<'a> {
    q: &'a [i8],
    qsums: Vec<i32>,
    qsum_total: i64,
    s: f64,
}

impl<'a> Token<'a> {
    /// Token `t` of `acts`, for scale blocks of `block` elements.
    fn new(acts: &'a Activations, t: usize, block: usize) -> Token<'a> {
        let qsums = acts.block_sums(t, block);
        let qsum_total = qsums.iter().map(|&v| v as i64).sum();
        Token { q: acts.q(t), qsums, qsum_total, s: acts.s[t] as f64 }
    }
}

/// `o[jj]`: row `first + jj` against one token, summed from the packed codes.
fn one_token_rows(level: Simd, w: &Ternary, token: &Token, out_scale: f64, first: usize, o: &mut [f32]) {
    let (q, qsums, s) = (token.q, &token.qsums, token.s);
    let nb = w.blocks();
    if w.dtype == DType::TQ2_0 {
        // The sums of a run of rows in one kernel call, then their scaling: the f64
        // divisions then overlap instead of each waiting behind the next row's sum.
        let mut sums = [0f64; 64];
        for (c, ys) in o.chunks_mut(sums.len()).enumerate() {
            let rows = w.rows(first + 64 * c, ys.len());
            t::tq2_0_rows_sum(level, rows, w.row_bytes, q, qsums, &mut sums[..ys.len()]);
            for (y, &sum) in ys.iter_mut().zip(&sums) {
                *y = ((sum / s) * out_scale) as f32;
            }
        }
        return;
    }
    if w.dtype == DType::I2_S {
        // One block per row: the raw sums of a run of rows in one kernel call, then their
        // scaling, as for TQ2_0 above.
        let mut raws = [0i32; 64];
        for (c, ys) in o.chunks_mut(raws.len()).enumerate() {
            let (first, raws) = (first + 64 * c, &mut raws[..ys.len()]);
            t::packed_dot_rows(level, w.rows(first, ys.len()), w.row_bytes, &t::I2_S_SHIFTS, q, raws);
            w.finish_rows(first, qsums, s, out_scale, raws, ys);
        }
        return;
    }
    // TQ1_0: each block unpacked to one code per byte.
    let mut raws = vec![0i32; o.len() * nb]; // [rows, blocks]
    let mut codes = [0u8; 256];
    for (jj, raw) in raws.chunks_exact_mut(nb.max(1)).enumerate() {
        let row = w.row(first + jj);
        for (b, r) in raw.iter_mut().enumerate() {
            t::unpack_tq1_0_block(&row[54 * b..54 * b + 52], &mut codes);
            *r = t::codes_dot(level, &codes, &q[256 * b..256 * b + 256]);
        }
    }
    w.finish_rows(first, qsums, s, out_scale, &raws, o);
}

/// The shortest part of a decode GEMV's rows that a thread claims (see `gemv`): 21 KB of
/// TQ2_0 rows of 2560.
const MIN_GEMV_ROWS: usize = 32;

/// Row `j` unpacked to one code per byte.
fn unpack_row(w: &Ternary, j: usize, codes: &mut [u8]) {
    let row = w.row(j);
    match w.dtype {
        DType::TQ2_0 => {
            for (b, c) in codes.chunks_exact_mut(256).enumerate() {
                t::unpack_chunks(&row[66 * b..66 * b + 64], &t::TQ2_0_SHIFTS, c);
            }
        }
        DType::I2_S => t::unpack_chunks(row, &t::I2_S_SHIFTS, codes),
        _ => {
            for (b, c) in codes.chunks_exact_mut(256).enumerate() {
                let mut block = [0u8; 256];
                t::unpack_tq1_0_block(&row[54 * b..54 * b + 52], &mut block);
                c.copy_from_slice(&block);
            }
        }
    }
}

fn gemm(pool: &Pool, level: Simd, w: &Ternary, acts: &Activations, n: usize, out_scale: f64, out: &mut [f32]) {
    let (m, k) = (out.len() / n.max(1), w.k);
    let (block, blocks) = (w.block_len(), w.blocks());
    // Σ q per scale block, per token; then per group of four tokens (a missing token
    // repeats the last), per block.
    let qsums: Vec<Vec<i32>> = (0..n).map(|t| acts.block_sums(t, block)).collect();
    let groups = n.div_ceil(4);
    let subs: Vec<[i32; 4]> = (0..groups) // [groups, blocks]
        .flat_map(|g| (0..blocks).map(move |b| (g, b)))
        .map(|(g, b)| [0, 1, 2, 3].map(|t| qsums[(4 * g + t).min(n - 1)][b]))
        .collect();
    // Read only for rows of at most `MAX_UNIFORM_BLOCKS` blocks, whose totals fit an i32;
    // longer rows' may wrap, unread.
    let totals: Vec<[i32; 4]> = // [groups, 1]
        subs.chunks(blocks.max(1))
            .map(|g| g.iter().fold([0i32; 4], |a, s| [0, 1, 2, 3].map(|t| a[t].wrapping_add(s[t]))))
            .collect();
    let q_all = &acts.q[..n * k];
    let mut by_row = vec![0f32; m * n];
    pool.for_each_chunk(&mut by_row, TILE_ROWS * n, &|i, o| {
        let rows = o.len() / n;
        let mut codes = vec![0u8; rows * k];
        let mut d = vec![0f64; rows * blocks]; // [rows, blocks]
        for (r, c) in codes.chunks_exact_mut(k.max(1)).enumerate() {
            unpack_row(w, i * TILE_ROWS + r, c);
        }
        for (r, dr) in d.chunks_exact_mut(blocks.max(1)).enumerate() {
            w.scales(i * TILE_ROWS + r, dr);
        }
        // Two rows × four tokens at a time; a missing row repeats the last one (its sums
        // are computed and dropped). The rows' codes over one panel of elements stay in L1
        // while every token's activations for that panel go past them.
        let pairs = rows.div_ceil(2);
        let pair_rows = |pair: usize| [2 * pair, (2 * pair + 1).min(rows - 1)];
        // A pair of rows whose blocks each share one scale sums whole rows in integers, as
        // one block of k (`t::uniform_scale` says why that is the reference's sum).
        let uniform: Vec<Option<[[f64; 1]; 2]>> = (0..pairs)
            .map(|pair| {
                let [a, b] = pair_rows(pair).map(|r| w.uniform_scale(i * TILE_ROWS + r));
                Some([[a?], [b?]])
            })
            .collect();
        let row_pair = |pair: usize, per_block: bool| {
            let rr = pair_rows(pair);
            let c = rr.map(|r| &codes[r * k..(r + 1) * k]);
            match &uniform[pair] {
                Some([d0, d1]) if !per_block => t::RowPair { c, block: k, d: [d0, d1], qsums: &totals },
                _ => t::RowPair { c, block, d: rr.map(|r| &d[r * blocks..(r + 1) * blocks]), qsums: &subs },
            }
        };
        let row_pairs: Vec<t::RowPair> = (0..pairs).map(|pair| row_pair(pair, false)).collect();
        let mut sums = vec![t::TileSums::default(); pairs * groups]; // [pairs, groups]
        for p0 in (0..k).step_by(PANEL) {
            t::tiles_2x4(level, &row_pairs, &mut sums, q_all, k, p0..(p0 + PANEL).min(k));
        }
        for (pair, pair_sums) in sums.chunks_exact_mut(groups).enumerate() {
            // A zero total from a whole-row sum: the sign of zero is the reference's order's.
            if uniform[pair].is_some() && pair_sums.iter().any(|s| s.y.contains(&0.0)) {
                pair_sums.fill(t::TileSums::default());
                t::tiles_2x4(level, &[row_pair(pair, true)], pair_sums, q_all, k, 0..k);
            }
            for (g, s) in pair_sums.iter().enumerate() {
                for (lane, &a) in s.y.iter().enumerate() {
                    let (r, t) = (2 * pair + lane / 4, 4 * g + lane % 4);
                    if r < rows && t < n {
                        o[r * n + t] = ((a / acts.s[t] as f64) * out_scale) as f32;
                    }
                }
            }
        }
    });
    transpose(pool, &by_row, m, n, out);
}
