//! LINEAR: `out = x̂ · Wᵀ` with weights decoded from their layout; `x̂` is `x`, or `x`
//! rounded to int8 blocks (`LinearActivations::Int8Blocks`).
//!
//! - Int8 blocks against Q4_0, Q4_1 or Q8_0 weights: integer products per block
//!   (`kernels::linear_int8`), the weight bytes read once as below. The rounded activations
//!   are kept per contents of `x` ([`Int8Activations`]): the LINEARs that read one `x`
//!   share one rounding. Every other case with int8 blocks runs the f32 kernels below on
//!   `x̂ = q / s_b` (exact integers, one rounding each), which LINEAR's f32 summation allows.
//! - One token (decode): each thread takes blocks of weight rows and computes each row's
//!   dot product decoding on the fly, so every weight byte is read once (memory-bound).
//! - Several tokens (prefill, a batched step): weight-stationary; each task takes a tile of
//!   [`TILE_ROWS`] weight rows and applies the one-token kernels to every token (float
//!   rows: one load and widening of each weight for up to four tokens), so the
//!   tile's bytes come from memory once and from cache for the other tokens, and every
//!   token's outputs are the bits it gets alone: a row's result never depends on the other
//!   rows in the batch (batch invariance).

use purebee_isa::ops::{Linear, LinearActivations};
use purebee_isa::ExecError;
use purebee_memory::quant::QuantMatrix;
use purebee_memory::{DType, TensorId};

use super::{f32s_mut, Exec};
use crate::kernels::linear as k;
use crate::kernels::linear_int8::{self as k8, Int8Row, BLOCK};
use crate::kernels::pool::Pool;
use crate::kernels::Simd;
use crate::store::{dims, mem, Store};

/// Weight rows a several-token task applies to every token.
const TILE_ROWS: usize = 16;

pub(crate) fn run(e: &mut Exec, l: &Linear) -> Result<(), ExecError> {
    const OP: &str = "LINEAR";
    e.store.f32s(e.reg, OP, l.x)?;
    let (m, kk) = dims(e.reg, OP, l.weight)?;
    let dtype = e.reg.desc(l.weight).map_err(mem(OP))?.dtype;
    let (n, _) = dims(e.reg, OP, l.x)?;
    let reg = e.reg;
    let decode_error = |err: purebee_memory::quant::QuantError| ExecError::Decode {
        op: OP,
        tensor: reg.name(l.weight).to_string(),
        reason: err.to_string(),
    };
    QuantMatrix::new(dtype, e.store.bytes(reg, OP, l.weight)?, m, kk).map_err(decode_error)?;
    let (pool, level) = (e.pool, e.level);
    let acts = &mut e.caches.linear_activations;
    let gemm_tiles = &mut e.caches.gemm_tiles;
    let int8_kernel = k8::supports(dtype);
    if l.activations == LinearActivations::Int8Blocks {
        acts.update(level, e.store, l.x, e.store.f32s(reg, OP, l.x)?, n, kk);
        if !int8_kernel {
            acts.dequantize();
        }
    }
    let acts = &*acts;
    e.store.with_output(reg, OP, l.out, |store, words| {
        let x = match l.activations {
            LinearActivations::F32 => store.f32s(reg, OP, l.x)?,
            LinearActivations::Int8Blocks => &acts.dequantized,
        };
        let bytes = store.bytes(reg, OP, l.weight)?;
        let w = Weights { matrix: QuantMatrix::new(dtype, bytes, m, kk).map_err(decode_error)?, bytes, dtype, k: kk };
        let out = f32s_mut(words, n * m);
        let int8 = l.activations == LinearActivations::Int8Blocks && int8_kernel;
        match (int8, n) {
            (true, 1) => gemv_int8(pool, level, &w, acts.row(0), out),
            (false, 1) => gemv(pool, level, &w, x, out),
            (true, _) => gemm(pool, level, &w, Tokens::Int8(acts), n, gemm_tiles, out),
            (false, _) => gemm(pool, level, &w, Tokens::F32(x), n, gemm_tiles, out),
        }
        Ok(())
    })
}

/// The int8-block rounding of one `x` (`[n, k]`), and the `x` (and its version) it came
/// from.
#[derive(Default)]
pub(crate) struct Int8Activations {
    key: Option<(TensorId, u64)>,
    k: usize,
    /// Blocks per row.
    blocks: usize,
    /// `[n, blocks · 32]` codes (a short last block padded with zeros).
    q: Vec<i8>,
    /// `[n, blocks]`: `s_b`.
    scale: Vec<f32>,
    /// `[n, blocks]`: `1 / s_b`.
    inv_scale: Vec<f32>,
    /// `[n, blocks]`: `Σ q` per block (exact in f32).
    sum: Vec<f32>,
    /// Each row in the AVX2 Q4 kernels' layout (`linear_int8::pair_layout`) and the
    /// AVX-512 ones' (`linear_int8::quad_layout`).
    pairs: Vec<i8>,
    pair_scales: Vec<f32>,
    quads: Vec<i8>,
    quad_scales: Vec<f32>,
    /// `[n, k]`: `x̂ = q / s_b`, for the f32 kernels, filled by [`Int8Activations::dequantize`]
    /// when a kernel needs it (empty until then).
    dequantized: Vec<f32>,
}

impl Int8Activations {
    fn update(&mut self, level: Simd, store: &Store, x_id: TensorId, x: &[f32], n: usize, k: usize) {
        let key = store.version(x_id).map(|v| (x_id, v));
        if key.is_some() && key == self.key && self.k == k && self.scale.len() == n * k.div_ceil(BLOCK) {
            return;
        }
        let nb = k.div_ceil(BLOCK);
        self.q.clear();
        self.q.resize(n * nb * BLOCK, 0);
        self.scale.resize(n * nb, 0.0);
        self.inv_scale.resize(n * nb, 0.0);
        self.sum.resize(n * nb, 0.0);
        self.dequantized.clear();
        let (pl, sl) = k8::pair_layout_len(nb);
        self.pairs.resize(n * pl, 0);
        self.pair_scales.resize(n * sl, 0.0);
        let (ql, qsl) = k8::quad_layout_len(nb);
        self.quads.resize(n * ql, 0);
        self.quad_scales.resize(n * qsl, 0.0);
        for r in 0..n {
            let q = &mut self.q[r * nb * BLOCK..][..nb * BLOCK];
            let scales = &mut self.scale[r * nb..(r + 1) * nb];
            k8::quantize_row(level, &x[r * k..(r + 1) * k], &mut q[..k], scales);
            for (b, (qb, &s)) in q.chunks(BLOCK).zip(scales.iter()).enumerate() {
                self.inv_scale[r * nb + b] = 1.0 / s;
                self.sum[r * nb + b] = qb.iter().map(|&v| v as f32).sum();
            }
            k8::pair_layout(
                q,
                &self.inv_scale[r * nb..(r + 1) * nb],
                &self.sum[r * nb..(r + 1) * nb],
                &mut self.pairs[r * pl..(r + 1) * pl],
                &mut self.pair_scales[r * sl..(r + 1) * sl],
            );
            k8::quad_layout(
                q,
                &self.inv_scale[r * nb..(r + 1) * nb],
                &self.sum[r * nb..(r + 1) * nb],
                &mut self.quads[r * ql..(r + 1) * ql],
                &mut self.quad_scales[r * qsl..(r + 1) * qsl],
            );
        }
        (self.k, self.blocks, self.key) = (k, nb, key);
    }

    /// Fills `x̂ = q / s_b` (one correctly rounded division each) if it is not yet.
    fn dequantize(&mut self) {
        let (k, nb) = (self.k, self.blocks);
        let n = self.scale.len() / nb.max(1);
        if !self.dequantized.is_empty() || n * k == 0 {
            return;
        }
        self.dequantized.resize(n * k, 0.0);
        for (r, row) in self.dequantized.chunks_exact_mut(k).enumerate() {
            let q = &self.q[r * nb * BLOCK..][..k];
            for (i, (o, &qi)) in row.iter_mut().zip(q).enumerate() {
                *o = qi as f32 / self.scale[r * nb + i / BLOCK];
            }
        }
    }

    fn row(&self, r: usize) -> Int8Row<'_> {
        let nb = self.blocks;
        let (pl, sl) = k8::pair_layout_len(nb);
        let (ql, qsl) = k8::quad_layout_len(nb);
        Int8Row {
            q: &self.q[r * nb * BLOCK..(r + 1) * nb * BLOCK],
            inv_scale: &self.inv_scale[r * nb..(r + 1) * nb],
            sum: &self.sum[r * nb..(r + 1) * nb],
            pairs: &self.pairs[r * pl..(r + 1) * pl],
            pair_scales: &self.pair_scales[r * sl..(r + 1) * sl],
            quads: &self.quads[r * ql..(r + 1) * ql],
            quad_scales: &self.quad_scales[r * qsl..(r + 1) * qsl],
        }
    }
}

/// A weight matrix in its file layout.
struct Weights<'a> {
    matrix: QuantMatrix<'a>,
    bytes: &'a [u8],
    dtype: DType,
    k: usize,
}

impl Weights<'_> {
    /// The bytes of rows `j0..j0 + count`, for the dtypes the kernels read directly.
    fn rows(&self, j0: usize, count: usize) -> &[u8] {
        let rb = self.dtype.row_bytes(self.k).unwrap_or(0);
        &self.bytes[j0 * rb..(j0 + count) * rb]
    }

    /// Row `j`'s bytes.
    fn row(&self, j: usize) -> &[u8] {
        self.rows(j, 1)
    }

    /// Row `j` decoded to f32.
    fn decode(&self, j: usize, out: &mut [f32]) {
        if k::supports(self.dtype) {
            k::decode_row(self.dtype, self.row(j), out);
        } else {
            // Sizes were checked when the matrix was built, so decoding cannot fail.
            let _ = self.matrix.dequantize_row(j, out);
        }
    }
}

/// The shortest part of a decode GEMV's rows that a thread claims (`Pool::for_each_guided`:
/// long parts first, one prefetch stream each, then short ones so the threads finish
/// together). A decode of Q4_1 rows of 576 and 1536 elements, 6 alternated rounds: LINEAR
/// 15.3 -> 17.7 GB/s and 158 -> 183 tokens/s against 16 equal tasks per call.
const MIN_GEMV_ROWS: usize = 16;

fn gemv(pool: &Pool, level: Simd, w: &Weights, x: &[f32], out: &mut [f32]) {
    pool.for_each_guided(out, MIN_GEMV_ROWS, &|first, o| {
        let mut row = Vec::new();
        one_token_rows(level, w, first, x, &mut row, o);
    });
}

/// `out[j] = row first + j · x` for `out.len()` consecutive weight rows, with the one-token
/// kernels (read in place, or decoded into `decoded` for the dtypes they do not read).
fn one_token_rows(level: Simd, w: &Weights, first: usize, x: &[f32], decoded: &mut Vec<f32>, out: &mut [f32]) {
    if k::supports(w.dtype) {
        for (jj, y) in out.iter_mut().enumerate() {
            *y = k::dot_row(level, w.dtype, w.row(first + jj), x);
        }
    } else {
        decoded.resize(w.k, 0.0);
        for (jj, y) in out.iter_mut().enumerate() {
            w.decode(first + jj, decoded);
            k::dot_tile(level, decoded, x, w.k, std::slice::from_mut(y));
        }
    }
}

/// The tokens of a several-token LINEAR.
#[derive(Clone, Copy)]
enum Tokens<'a> {
    /// `[n, k]` f32 rows.
    F32(&'a [f32]),
    /// Their int8-block rounding, for the integer kernels.
    Int8(&'a Int8Activations),
}

fn gemv_int8(pool: &Pool, level: Simd, w: &Weights, a: Int8Row, out: &mut [f32]) {
    pool.for_each_guided(out, MIN_GEMV_ROWS, &|first, o| {
        k8::dot_rows(level, w.dtype, w.rows(first, o.len()), a, o);
    });
}

fn gemm(pool: &Pool, level: Simd, w: &Weights, x: Tokens, n: usize, tiles: &mut Vec<f32>, out: &mut [f32]) {
    let (m, kk) = (out.len() / n.max(1), w.k);
    // Each task computes one tile of TILE_ROWS weight rows (fewer in the last) for every
    // token, into its part of `tiles`, token-major ([n, rows]). Then each row of `out` is
    // assembled from the tiles' runs of `rows` consecutive outputs.
    // (Every element of `tiles` is written before it is read: growing it is the only
    // zeroing.)
    if tiles.len() < m * n {
        tiles.resize(m * n, 0.0);
    }
    let outputs = &mut tiles[..m * n];
    // The kernels' token rows, once per call (not per task).
    let (row_bytes, token_rows): (usize, Vec<&[f32]>) = match x {
        Tokens::F32(x) if k::supports_tokens(w.dtype) => {
            (w.dtype.row_bytes(kk).unwrap_or(0), x.chunks_exact(kk.max(1)).take(n).collect())
        }
        _ => (0, Vec::new()),
    };
    let int8_rows: Vec<Int8Row> = match x {
        Tokens::Int8(acts) => (0..n).map(|t| acts.row(t)).collect(),
        Tokens::F32(_) => Vec::new(),
    };
    pool.for_each_chunk(outputs, TILE_ROWS * n, &|i, o| {
        let rows = o.len() / n;
        let first = i * TILE_ROWS;
        let mut decoded = Vec::new();
        match x {
            // Float rows: each weight loaded and widened once for up to four tokens.
            Tokens::F32(_) if !token_rows.is_empty() => {
                for (group, og) in token_rows.chunks(k::MAX_TOKENS).zip(o.chunks_mut(k::MAX_TOKENS * rows.max(1))) {
                    k::dot_rows_tokens(level, w.dtype, w.rows(first, rows), row_bytes, group, og);
                }
            }
            Tokens::F32(x) => {
                for (t, ot) in o.chunks_exact_mut(rows.max(1)).enumerate() {
                    one_token_rows(level, w, first, &x[t * kk..(t + 1) * kk], &mut decoded, ot);
                }
            }
            // Each weight block loaded and unpacked once for up to four tokens.
            Tokens::Int8(_) => {
                for (group, og) in int8_rows.chunks(k8::MAX_TOKENS).zip(o.chunks_mut(k8::MAX_TOKENS * rows.max(1))) {
                    k8::dot_rows_tokens(level, w.dtype, w.rows(first, rows), group, og);
                }
            }
        }
    });
    const TOKENS: usize = 16;
    let outputs = &*outputs;
    pool.for_each_chunk(out, TOKENS * m, &|i, o| {
        for (t, row) in o.chunks_exact_mut(m.max(1)).enumerate() {
            let t = i * TOKENS + t;
            for (j, run) in row.chunks_mut(TILE_ROWS).enumerate() {
                let start = j * TILE_ROWS * n + t * run.len();
                run.copy_from_slice(&outputs[start..start + run.len()]);
            }
        }
    });
    if tiles.len() > KEEP_TILES {
        // A one-off (all the logits of a long prompt): not worth holding on to.
        *tiles = Vec::new();
    }
}

/// The most floats of `gemm`'s tile outputs kept between calls (16 MiB): a product of 1536
/// rows at 512 tokens takes 0.8 M; one of 128256 rows (66 M at 512 tokens) does not stay
/// resident. A larger projection allocates and
/// zeroes its buffer each call, as before.
const KEEP_TILES: usize = 1 << 22;

/// `out[t · m + j] = by_row[j · n + t]`, a few tokens per task: each task reads short runs
/// of `by_row`'s rows and writes a few whole rows of `out`, so neither side strides
/// through memory one element per cache line.
pub(crate) fn transpose(pool: &Pool, by_row: &[f32], m: usize, n: usize, out: &mut [f32]) {
    const TOKENS: usize = 16;
    pool.for_each_chunk(out, TOKENS * m, &|i, o| {
        let t0 = i * TOKENS;
        let tokens = o.len() / m.max(1);
        for (j, row) in by_row.chunks_exact(n.max(1)).enumerate().take(m) {
            for (t, &v) in row[t0..t0 + tokens].iter().enumerate() {
                o[t * m + j] = v;
            }
        }
    });
}
