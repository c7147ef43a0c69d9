//! LINEAR: `out = x · Wᵀ` with f32 activations and weights decoded from their layout.
//!
//! - One token (decode): each thread takes blocks of weight rows and computes each row's
//!   dot product decoding on the fly, so every weight byte is read once (memory-bound).
//! - Several tokens (prefill): weight-stationary; a tile of [`TILE_ROWS`] weight rows is
//!   decoded to f32 once and multiplied against every token (in blocks of
//!   [`TOKEN_BLOCK`] that stay in cache) by a register-blocked micro-kernel.

use purebee_isa::ops::Linear;
use purebee_isa::ExecError;
use purebee_memory::quant::QuantMatrix;
use purebee_memory::DType;

use super::{f32s_mut, Exec};
use crate::kernels::linear as k;
use crate::kernels::pool::Pool;
use crate::kernels::SimdLevel;
use crate::store::{dims, mem};

/// Weight rows decoded together in prefill.
const TILE_ROWS: usize = 16;
/// Tokens multiplied against a decoded tile at a time.
const TOKEN_BLOCK: usize = 64;

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
    e.store.with_output(reg, OP, l.out, |store, words| {
        let x = store.f32s(reg, OP, l.x)?;
        let bytes = store.bytes(reg, OP, l.weight)?;
        let w = Weights { matrix: QuantMatrix::new(dtype, bytes, m, kk).map_err(decode_error)?, bytes, dtype, k: kk };
        let out = f32s_mut(words, n * m);
        if n == 1 {
            gemv(pool, level, &w, x, out);
        } else {
            gemm(pool, level, &w, x, n, out);
        }
        Ok(())
    })
}

/// A weight matrix in its file layout.
struct Weights<'a> {
    matrix: QuantMatrix<'a>,
    bytes: &'a [u8],
    dtype: DType,
    k: usize,
}

impl Weights<'_> {
    /// Row `j`'s bytes, for the dtypes the kernels read directly.
    fn row(&self, j: usize) -> &[u8] {
        let rb = self.dtype.row_bytes(self.k).unwrap_or(0);
        &self.bytes[j * rb..(j + 1) * rb]
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

/// Rows per task: enough tasks to balance the threads, enough rows to amortize a claim.
pub(crate) fn rows_per_task(pool: &Pool, m: usize) -> usize {
    (m / (pool.threads() * 8)).clamp(4, 256)
}

fn gemv(pool: &Pool, level: SimdLevel, w: &Weights, x: &[f32], out: &mut [f32]) {
    let chunk = rows_per_task(pool, out.len());
    pool.for_each_chunk(out, chunk, &|i, o| {
        if k::supports(w.dtype) {
            for (jj, y) in o.iter_mut().enumerate() {
                *y = k::dot_row(level, w.dtype, w.row(i * chunk + jj), x);
            }
        } else {
            let mut row = vec![0f32; w.k];
            for (jj, y) in o.iter_mut().enumerate() {
                w.decode(i * chunk + jj, &mut row);
                k::dot_tile(level, &row, x, w.k, std::slice::from_mut(y));
            }
        }
    });
}

fn gemm(pool: &Pool, level: SimdLevel, w: &Weights, x: &[f32], n: usize, out: &mut [f32]) {
    let (m, kk) = (out.len() / n.max(1), w.k);
    // Computed as [m, n] (each task's rows contiguous), then transposed into out [n, m].
    let mut by_row = vec![0f32; m * n];
    pool.for_each_chunk(&mut by_row, TILE_ROWS * n, &|i, o| {
        let rows = o.len() / n;
        let mut tile = vec![0f32; rows * kk];
        for (r, t) in tile.chunks_exact_mut(kk.max(1)).enumerate() {
            w.decode(i * TILE_ROWS + r, t);
        }
        let mut part = vec![0f32; TOKEN_BLOCK * rows];
        for t0 in (0..n).step_by(TOKEN_BLOCK) {
            let tn = (n - t0).min(TOKEN_BLOCK);
            k::dot_tile(level, &tile, &x[t0 * kk..(t0 + tn) * kk], kk, &mut part[..tn * rows]);
            for t in 0..tn {
                for r in 0..rows {
                    o[r * n + t0 + t] = part[t * rows + r];
                }
            }
        }
    });
    transpose(pool, &by_row, m, n, out);
}

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
