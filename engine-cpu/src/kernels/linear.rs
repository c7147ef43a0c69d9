//! LINEAR's kernels: f32 activations against float or block-quantized weight rows, read
//! in their file layout (memory's `quant` modules give each layout).
//!
//! - [`dot_row`]: one weight row against one activation row, decoding on the fly (decode:
//!   each weight byte is read once per token, so this is the memory-bound path).
//! - [`decode_row`] + [`dot_tile`]: a tile of weight rows decoded to f32 once, then
//!   applied to many tokens (prefill: weight-stationary, the decode cost is shared).
//!
//! Values are decoded exactly as memory's `QuantMatrix::dequantize_row` decodes them (the
//! tests check it bit for bit): `code · d` (exact in f32), Q4_1's `code · d + m` rounded
//! once (an FMA, since `code · d` is exact). Sums are accumulated in f32 in an order that
//! differs from the reference engine's f64 sum, which LINEAR allows. Q8_0 and Q4_0 sum
//! `Σ x·code` per block and scale the block sum by `d` once: the same value as
//! `Σ x·(code·d)` in exact arithmetic, with the same error bound in f32.

use purebee_memory::DType;

use super::f16::f16_at;
use super::{Simd, SimdLevel};

/// The dtypes these kernels read directly; others are decoded by the caller.
pub fn supports(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16 | DType::Q4_0 | DType::Q4_1 | DType::Q8_0)
}

/// `Σ x_i · w_i` for one row `row` (its bytes, `x.len()` elements) of a [`supports`] dtype.
pub fn dot_row(level: Simd, dtype: DType, row: &[u8], x: &[f32]) -> f32 {
    match level.get() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Simd` of level `Avx2` or `Avx512Vnni` exists only where the CPU has AVX2/FMA/F16C.
        SimdLevel::Avx2 | SimdLevel::Avx512Vnni => unsafe { x86::dot_row(dtype, row, x) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: a `Simd` of level `Neon` or `NeonDot` exists only where the CPU has NEON (and dotprod).
        SimdLevel::Neon | SimdLevel::NeonDot => unsafe { super::neon::dot_row(dtype, row, x) },
        _ => dot_row_portable(dtype, row, x),
    }
}

/// The most tokens one call of [`dot_rows_tokens`] takes.
pub const MAX_TOKENS: usize = 4;

/// Whether [`dot_rows_tokens`] reads `dtype`.
pub fn supports_tokens(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
}

/// `out[t · rows + r]` = [`dot_row`] of row `r` of `rows` (rows of `row_bytes`, a
/// [`supports_tokens`] dtype) against token `t` of `x` (1 to [`MAX_TOKENS`] tokens), bit
/// for bit: the x86 levels load and widen each weight once for every token.
pub fn dot_rows_tokens(level: Simd, dtype: DType, rows: &[u8], row_bytes: usize, x: &[&[f32]], out: &mut [f32]) {
    assert!(
        (1..=MAX_TOKENS).contains(&x.len()) && supports_tokens(dtype),
        "dot_rows_tokens: 1 to 4 tokens, float rows"
    );
    let n_rows = out.len() / x.len();
    assert!(out.len() == n_rows * x.len() && rows.len() >= n_rows * row_bytes, "dot_rows_tokens: fewer rows than sums");
    let size = if dtype == DType::F32 { 4 } else { 2 };
    assert!(x.iter().all(|xt| size * xt.len() <= row_bytes), "dot_rows_tokens: activations longer than a row");
    match level.get() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Simd` of level `Avx2` exists only where the CPU has AVX2/FMA/F16C.
        SimdLevel::Avx2 => unsafe { x86::dot_rows_tokens(dtype, rows, row_bytes, x, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Simd` of level `Avx512Vnni` exists only where the CPU has AVX-512 F and
        // VL, and AVX2/FMA/F16C.
        SimdLevel::Avx512Vnni => unsafe { x86::dot_rows_tokens_avx512(dtype, rows, row_bytes, x, out) },
        _ => {
            for (t, xt) in x.iter().enumerate() {
                for r in 0..n_rows {
                    out[t * n_rows + r] = dot_row(level, dtype, &rows[r * row_bytes..(r + 1) * row_bytes], xt);
                }
            }
        }
    }
}

fn dot_row_portable(dtype: DType, row: &[u8], x: &[f32]) -> f32 {
    let mut w = [0f32; 32];
    let mut acc = [0f32; 8];
    let mut tail = 0f32;
    let (len, bytes) = group(dtype);
    for (block, xs) in row.chunks_exact(bytes).zip(x.chunks(len)) {
        decode_group(dtype, block, &mut w);
        if xs.len() == 32 {
            for (i, (&xi, &wi)) in xs.iter().zip(&w).enumerate() {
                acc[i % 8] += xi * wi;
            }
        } else {
            tail += xs.iter().zip(&w).map(|(&a, &b)| a * b).sum::<f32>();
        }
    }
    // A float row whose length is not a multiple of 32 ends in a partial group.
    let done = row.len() / bytes * len;
    if done < x.len() {
        decode_partial(dtype, &row[row.len() / bytes * bytes..], &mut w);
        tail += x[done..].iter().zip(&w).map(|(&a, &b)| a * b).sum::<f32>();
    }
    acc.iter().sum::<f32>() + tail
}

/// Decodes row `row` of a [`supports`] dtype into `out` (`out.len()` elements).
pub fn decode_row(dtype: DType, row: &[u8], out: &mut [f32]) {
    let (len, bytes) = group(dtype);
    let mut w = [0f32; 32];
    let whole = out.len() / len;
    for (block, o) in row.chunks_exact(bytes).zip(out.chunks_exact_mut(len)) {
        decode_group(dtype, block, &mut w);
        o.copy_from_slice(&w[..len]);
    }
    if whole * len < out.len() {
        decode_partial(dtype, &row[whole * bytes..], &mut w);
        let rest = out.len() - whole * len;
        out[whole * len..].copy_from_slice(&w[..rest]);
    }
}

/// Elements and bytes of the unit the decoders work in: a 32-element block, or 32 floats.
fn group(dtype: DType) -> (usize, usize) {
    match dtype {
        DType::F32 => (32, 128),
        DType::F16 | DType::BF16 => (32, 64),
        DType::Q8_0 => (32, 34),
        DType::Q4_0 => (32, 18),
        DType::Q4_1 => (32, 20),
        _ => (32, usize::MAX),
    }
}

/// Decodes one 32-element group (a block, or 32 floats).
#[inline(always)]
fn decode_group(dtype: DType, b: &[u8], w: &mut [f32; 32]) {
    match dtype {
        DType::F32 => {
            for (o, c) in w.iter_mut().zip(b.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        DType::F16 => {
            for (i, o) in w.iter_mut().enumerate() {
                *o = f16_at(b, 2 * i);
            }
        }
        DType::BF16 => {
            for (o, c) in w.iter_mut().zip(b.chunks_exact(2)) {
                *o = f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16);
            }
        }
        DType::Q8_0 => {
            let d = f16_at(b, 0);
            for (o, &q) in w.iter_mut().zip(&b[2..34]) {
                *o = (q as i8) as f32 * d;
            }
        }
        DType::Q4_0 => {
            let d = f16_at(b, 0);
            for i in 0..16 {
                w[i] = ((b[2 + i] & 15) as i32 - 8) as f32 * d;
                w[i + 16] = ((b[2 + i] >> 4) as i32 - 8) as f32 * d;
            }
        }
        DType::Q4_1 => {
            let (d, m) = (f16_at(b, 0), f16_at(b, 2));
            for i in 0..16 {
                w[i] = (b[4 + i] & 15) as f32 * d + m;
                w[i + 16] = (b[4 + i] >> 4) as f32 * d + m;
            }
        }
        _ => w.fill(0.0),
    }
}

/// Decodes the last partial group of a float row (fewer than 32 elements).
fn decode_partial(dtype: DType, b: &[u8], w: &mut [f32; 32]) {
    let size = match dtype {
        DType::F32 => 4,
        _ => 2,
    };
    for (o, c) in w.iter_mut().zip(b.chunks_exact(size)) {
        *o = match dtype {
            DType::F32 => f32::from_le_bytes([c[0], c[1], c[2], c[3]]),
            DType::F16 => f16_at(c, 0),
            _ => f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16),
        };
    }
}

/// `Σ a_i · b_i` in f32 (the one-row, one-token case of [`dot_tile`]).
pub fn dot(level: Simd, a: &[f32], b: &[f32]) -> f32 {
    let mut y = 0f32;
    dot_tile(level, a, b, a.len(), std::slice::from_mut(&mut y));
    y
}

/// A tile product: `out[t · rows + r] = Σ_i w[r·k + i] · x[t·k + i]` for `rows` decoded
/// weight rows and `tokens` activation rows of `k` elements.
pub fn dot_tile(level: Simd, w: &[f32], x: &[f32], k: usize, out: &mut [f32]) {
    match level.get() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `dot_row`.
        SimdLevel::Avx2 | SimdLevel::Avx512Vnni => unsafe { x86::dot_tile(w, x, k, out) },
        _ => dot_tile_portable(w, x, k, out),
    }
}

#[inline(always)]
fn dot_tile_portable(w: &[f32], x: &[f32], k: usize, out: &mut [f32]) {
    let rows = w.len() / k.max(1);
    for (t, xt) in x.chunks_exact(k.max(1)).enumerate() {
        for (r, wr) in w.chunks_exact(k.max(1)).enumerate() {
            let mut acc = [0f32; 8];
            let (xc, wc) = (xt.chunks_exact(8), wr.chunks_exact(8));
            let tail: f32 = xc.remainder().iter().zip(wc.remainder()).map(|(&a, &b)| a * b).sum();
            for (a, b) in xc.zip(wc) {
                for l in 0..8 {
                    acc[l] += a[l] * b[l];
                }
            }
            out[t * rows + r] = acc.iter().sum::<f32>() + tail;
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod x86 {
    use std::arch::x86_64::*;

    use purebee_memory::DType;

    use super::super::hsum::hsum_f32;

    /// The f16 at bytes `i..i + 2` of `b`, widened with F16C (exact, as every widening).
    #[target_feature(enable = "avx2,fma,f16c")]
    fn f16_at(b: &[u8], i: usize) -> f32 {
        let h = u16::from_le_bytes([b[i], b[i + 1]]);
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
    }

    /// Eight i8 codes (at `p`) widened to f32.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn i8x8(p: &[u8]) -> __m256 {
        // SAFETY: callers pass slices of at least 8 bytes.
        let v = unsafe { _mm_loadl_epi64(p.as_ptr().cast()) };
        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v))
    }

    /// The 32 four-bit codes of a Q4 block's 16 bytes `qs` as four groups of eight i32:
    /// elements 0..8, 8..16 (low nibbles of bytes 0..8, 8..16), 16..24, 24..32 (their high
    /// nibbles). Widening the bytes first makes each nibble one AND or one shift.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn q4_codes(qs: &[u8]) -> [__m256i; 4] {
        assert!(qs.len() >= 16);
        // SAFETY: `qs` holds at least 16 bytes (asserted above): two loads of 8.
        let (a, b) = unsafe {
            (
                _mm256_cvtepu8_epi32(_mm_loadl_epi64(qs.as_ptr().cast())),
                _mm256_cvtepu8_epi32(_mm_loadl_epi64(qs.as_ptr().add(8).cast())),
            )
        };
        let low = _mm256_set1_epi32(15);
        [_mm256_and_si256(a, low), _mm256_and_si256(b, low), _mm256_srli_epi32::<4>(a), _mm256_srli_epi32::<4>(b)]
    }

    /// Q4_1's `d` and `m` (the block's first four bytes) widened and broadcast.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn f16_pair(b: &[u8]) -> (__m256, __m256) {
        let dm = _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from_le_bytes([b[0], b[1], b[2], b[3]])));
        let dm = _mm256_castps128_ps256(dm);
        (_mm256_permutevar8x32_ps(dm, _mm256_setzero_si256()), _mm256_permutevar8x32_ps(dm, _mm256_set1_epi32(1)))
    }

    /// Loads eight f32 from `x` at `i` (i + 8 ≤ x.len()).
    #[target_feature(enable = "avx2,fma,f16c")]
    fn load(x: &[f32], i: usize) -> __m256 {
        debug_assert!(i + 8 <= x.len());
        // SAFETY: callers keep i + 8 within `x`.
        unsafe { _mm256_loadu_ps(x.as_ptr().add(i)) }
    }

    /// One F32, F16 or BF16 row against `T` tokens' activations (each `k` long): per
    /// token, four accumulators of eight lanes, element `32i + 8u + l` into lane `l` of
    /// accumulator `u`, then `hsum_f32((a0 + a1) + (a2 + a3))` plus the partial last group
    /// ([`float_finish`]). The same operations in the same order for every `T`, so a
    /// token's sum never depends on the others: `T = 1` is `dot_row`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn float_dot<const T: usize>(dtype: DType, row: &[u8], x: [&[f32]; T]) -> [f32; T] {
        let whole = x[0].len() / 32 * 32;
        let size = float_size(dtype);
        let mut acc = [[_mm256_setzero_ps(); 4]; T];
        let mut i = 0;
        while i < whole {
            prefetch_ahead(row, size * i, size / 2);
            for (u, j) in (i..i + 32).step_by(8).enumerate() {
                // SAFETY: (all three arms) elements j..j+8 (j + 8 ≤ whole ≤ k) of a row of k
                // elements of 4 or 2 bytes lie inside `row` (checked by the callers).
                let w = match dtype {
                    DType::F32 => unsafe { _mm256_loadu_ps(row.as_ptr().add(4 * j).cast()) },
                    DType::F16 => unsafe { _mm256_cvtph_ps(_mm_loadu_si128(row.as_ptr().add(2 * j).cast())) },
                    _ => unsafe {
                        let h = _mm_loadu_si128(row.as_ptr().add(2 * j).cast());
                        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
                    },
                };
                for t in 0..T {
                    // SAFETY: j + 8 ≤ k, the length of every token's activations.
                    acc[t][u] = unsafe { _mm256_fmadd_ps(_mm256_loadu_ps(x[t].as_ptr().add(j)), w, acc[t][u]) };
                }
            }
            i += 32;
        }
        let mut halves = [[_mm256_setzero_ps(); 2]; T];
        for t in 0..T {
            halves[t] = [_mm256_add_ps(acc[t][0], acc[t][1]), _mm256_add_ps(acc[t][2], acc[t][3])];
        }
        float_finish(dtype, row, x, whole, halves)
    }

    /// [`float_dot`] on AVX-512's 16-lane registers: accumulator `v` holds [`float_dot`]'s
    /// accumulators `2v` and `2v + 1` side by side (element `32i + 16v + l`), so every lane
    /// sees the same fused multiply-adds in the same order, and its halves add up as
    /// [`float_dot`]'s pairs: the same bits, with half the instructions.
    #[target_feature(enable = "avx512f,avx512vl,avx2,fma,f16c")]
    #[inline]
    fn float_dot_wide<const T: usize>(dtype: DType, row: &[u8], x: [&[f32]; T]) -> [f32; T] {
        let whole = x[0].len() / 32 * 32;
        let size = float_size(dtype);
        let mut acc = [[_mm512_setzero_ps(); 2]; T];
        let mut i = 0;
        while i < whole {
            prefetch_ahead(row, size * i, size / 2);
            for (v, j) in (i..i + 32).step_by(16).enumerate() {
                // SAFETY: as in `float_dot`, for elements j..j+16 (j + 16 ≤ whole).
                let w = match dtype {
                    DType::F32 => unsafe { _mm512_loadu_ps(row.as_ptr().add(4 * j).cast()) },
                    DType::F16 => unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(row.as_ptr().add(2 * j).cast())) },
                    _ => unsafe {
                        let h = _mm256_loadu_si256(row.as_ptr().add(2 * j).cast());
                        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
                    },
                };
                for t in 0..T {
                    // SAFETY: j + 16 ≤ k, the length of every token's activations.
                    acc[t][v] = unsafe { _mm512_fmadd_ps(_mm512_loadu_ps(x[t].as_ptr().add(j)), w, acc[t][v]) };
                }
            }
            i += 32;
        }
        let mut halves = [[_mm256_setzero_ps(); 2]; T];
        for t in 0..T {
            for v in 0..2 {
                let z = acc[t][v];
                let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(z)));
                halves[t][v] = _mm256_add_ps(_mm512_castps512_ps256(z), hi);
            }
        }
        float_finish(dtype, row, x, whole, halves)
    }

    /// Each token's `hsum_f32(halves[0] + halves[1])` plus its products with the row's partial
    /// last group (elements `whole..k`, decoded once).
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn float_finish<const T: usize>(
        dtype: DType,
        row: &[u8],
        x: [&[f32]; T],
        whole: usize,
        halves: [[__m256; 2]; T],
    ) -> [f32; T] {
        // The tails: zero (positive) for a row of whole groups, as `dot_row` always added.
        let mut tails = [0f32; T];
        if whole < x[0].len() {
            let mut w = [0f32; 32];
            super::decode_partial(dtype, &row[whole * float_size(dtype)..], &mut w);
            for t in 0..T {
                tails[t] = x[t][whole..].iter().zip(&w).map(|(&a, &b)| a * b).sum();
            }
        }
        let mut sums = [0f32; T];
        for t in 0..T {
            sums[t] = hsum_f32(_mm256_add_ps(halves[t][0], halves[t][1])) + tails[t];
        }
        sums
    }

    /// Bytes per element of a float dtype.
    fn float_size(dtype: DType) -> usize {
        if dtype == DType::F32 {
            4
        } else {
            2
        }
    }

    /// Asks for `lines` cache lines `PREFETCH` bytes past `at` in `row`: the rows of a task
    /// follow each other in memory, so this runs ahead into the next rows (measured: without
    /// it a float row from memory reads at 9 GB/s on one thread, against 12 in cache).
    #[target_feature(enable = "sse")]
    #[inline]
    fn prefetch_ahead(row: &[u8], at: usize, lines: usize) {
        for line in 0..lines {
            // A hint: an address past the matrix is harmless (wrapping_add, never dereferenced).
            _mm_prefetch::<_MM_HINT_T0>(row.as_ptr().wrapping_add(at + 64 * line + PREFETCH).cast());
        }
    }

    /// How far ahead the float kernels prefetch, in bytes.
    const PREFETCH: usize = 2048;

    /// See `linear::dot_rows_tokens`, which checked the lengths (AVX2 and FMA).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn dot_rows_tokens(dtype: DType, rows: &[u8], row_bytes: usize, x: &[&[f32]], out: &mut [f32]) {
        by_rows(rows, row_bytes, x.len(), out, |row| match *x {
            [a] => padded(float_dot::<1>(dtype, row, [a])),
            [a, b] => padded(float_dot::<2>(dtype, row, [a, b])),
            [a, b, c] => padded(float_dot::<3>(dtype, row, [a, b, c])),
            [a, b, c, d] => padded(float_dot::<4>(dtype, row, [a, b, c, d])),
            _ => unreachable!("dot_rows_tokens checked 1 to 4 tokens"),
        })
    }

    /// `dot_rows_tokens` on AVX-512 ([`float_dot_wide`]).
    #[target_feature(enable = "avx512f,avx512vl,avx2,fma,f16c")]
    pub(super) fn dot_rows_tokens_avx512(dtype: DType, rows: &[u8], row_bytes: usize, x: &[&[f32]], out: &mut [f32]) {
        by_rows(rows, row_bytes, x.len(), out, |row| match *x {
            [a] => padded(float_dot_wide::<1>(dtype, row, [a])),
            [a, b] => padded(float_dot_wide::<2>(dtype, row, [a, b])),
            [a, b, c] => padded(float_dot_wide::<3>(dtype, row, [a, b, c])),
            [a, b, c, d] => padded(float_dot_wide::<4>(dtype, row, [a, b, c, d])),
            _ => unreachable!("dot_rows_tokens checked 1 to 4 tokens"),
        })
    }

    /// `out[t · rows + r] = sums(row r)[t]` for the rows of `rows`.
    #[inline(always)]
    fn by_rows(rows: &[u8], row_bytes: usize, tokens: usize, out: &mut [f32], sums: impl Fn(&[u8]) -> [f32; 4]) {
        let n_rows = out.len() / tokens;
        for r in 0..n_rows {
            let ys = sums(&rows[r * row_bytes..(r + 1) * row_bytes]);
            for (t, &y) in ys[..tokens].iter().enumerate() {
                out[t * n_rows + r] = y;
            }
        }
    }

    /// `T` sums in an array of four.
    #[inline(always)]
    fn padded<const T: usize>(sums: [f32; T]) -> [f32; 4] {
        std::array::from_fn(|i| sums.get(i).copied().unwrap_or(0.0))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn dot_row(dtype: DType, row: &[u8], x: &[f32]) -> f32 {
        match dtype {
            DType::F32 | DType::F16 | DType::BF16 => float_dot::<1>(dtype, row, [x])[0],
            DType::Q8_0 => {
                // Σ x·code per block, scaled by d once; two blocks per step, each with its
                // running total in a register, keep the FMA latency chains short.
                let block = |b: &[u8], xs: &[f32]| {
                    let p0 = _mm256_fmadd_ps(load(xs, 8), i8x8(&b[10..]), _mm256_mul_ps(load(xs, 0), i8x8(&b[2..])));
                    let p1 = _mm256_fmadd_ps(load(xs, 24), i8x8(&b[26..]), _mm256_mul_ps(load(xs, 16), i8x8(&b[18..])));
                    (_mm256_add_ps(p0, p1), _mm256_set1_ps(f16_at(b, 0)))
                };
                two_blocks_at_a_time(row, x, 34, block)
            }
            DType::Q4_0 => {
                let eight = _mm256_set1_epi32(8);
                let block = |b: &[u8], xs: &[f32]| {
                    let c = q4_codes(&b[2..]);
                    let code = |g: usize| _mm256_cvtepi32_ps(_mm256_sub_epi32(c[g], eight));
                    let p0 = _mm256_fmadd_ps(load(xs, 8), code(1), _mm256_mul_ps(load(xs, 0), code(0)));
                    let p1 = _mm256_fmadd_ps(load(xs, 24), code(3), _mm256_mul_ps(load(xs, 16), code(2)));
                    (_mm256_add_ps(p0, p1), _mm256_set1_ps(f16_at(b, 0)))
                };
                two_blocks_at_a_time(row, x, 18, block)
            }
            DType::Q4_1 => {
                // One accumulator per group of 8 elements: four independent chains.
                let mut acc = [_mm256_setzero_ps(); 4];
                for (b, xs) in row.chunks_exact(20).zip(x.chunks_exact(32)) {
                    let c = q4_codes(&b[4..]);
                    let (d, m) = f16_pair(b);
                    for (g, a) in acc.iter_mut().enumerate() {
                        // w = code·d + m, rounded once (code·d is exact): the decoded weight.
                        let w = _mm256_fmadd_ps(_mm256_cvtepi32_ps(c[g]), d, m);
                        *a = _mm256_fmadd_ps(load(xs, 8 * g), w, *a);
                    }
                }
                hsum_f32(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])))
            }
            _ => super::dot_row_portable(dtype, row, x),
        }
    }

    /// `Σ_b d_b · S_b` over a row's blocks of 32 (`block_bytes` each), where `block(b, x)`
    /// gives a block's eight partial sums `S_b` and its `d` broadcast: two blocks per step,
    /// each into its own register total.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn two_blocks_at_a_time(
        row: &[u8],
        x: &[f32],
        block_bytes: usize,
        block: impl Fn(&[u8], &[f32]) -> (__m256, __m256),
    ) -> f32 {
        let (mut t0, mut t1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        for (b, xs) in row.chunks_exact(2 * block_bytes).zip(x.chunks_exact(64)) {
            let (s0, d0) = block(&b[..block_bytes], &xs[..32]);
            let (s1, d1) = block(&b[block_bytes..], &xs[32..]);
            t0 = _mm256_fmadd_ps(s0, d0, t0);
            t1 = _mm256_fmadd_ps(s1, d1, t1);
        }
        let done = row.len() / (2 * block_bytes);
        if let (Some(b), Some(xs)) = (row.get(2 * done * block_bytes..), x.get(64 * done..)) {
            if b.len() >= block_bytes && xs.len() >= 32 {
                let (s, d) = block(&b[..block_bytes], &xs[..32]);
                t0 = _mm256_fmadd_ps(s, d, t0);
            }
        }
        hsum_f32(_mm256_add_ps(t0, t1))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn dot_tile(w: &[f32], x: &[f32], k: usize, out: &mut [f32]) {
        if k < 8 {
            return super::dot_tile_portable(w, x, k, out);
        }
        let rows = w.len() / k;
        let tokens = x.len() / k;
        // 4 weight rows × 3 tokens: 12 accumulators, 7 loads per 12 FMAs; edges smaller.
        let mut t = 0;
        while t < tokens {
            let tn = (tokens - t).min(3);
            let mut r = 0;
            while r < rows {
                let rn = (rows - r).min(4);
                let at = Tile { w, x, k, rows, r, t };
                match (rn, tn) {
                    (4, 3) => micro::<4, 3>(at, out),
                    (4, 2) => micro::<4, 2>(at, out),
                    (4, 1) => micro::<4, 1>(at, out),
                    (3, 3) => micro::<3, 3>(at, out),
                    (3, 2) => micro::<3, 2>(at, out),
                    (3, 1) => micro::<3, 1>(at, out),
                    (2, 3) => micro::<2, 3>(at, out),
                    (2, 2) => micro::<2, 2>(at, out),
                    (2, 1) => micro::<2, 1>(at, out),
                    (1, 3) => micro::<1, 3>(at, out),
                    (1, 2) => micro::<1, 2>(at, out),
                    _ => micro::<1, 1>(at, out),
                }
                r += rn;
            }
            t += tn;
        }
    }

    /// Where a micro-tile sits: weight rows `r..`, tokens `t..`.
    #[derive(Clone, Copy)]
    struct Tile<'a> {
        w: &'a [f32],
        x: &'a [f32],
        k: usize,
        rows: usize,
        r: usize,
        t: usize,
    }

    /// `R` weight rows × `T` tokens, all accumulators in registers.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn micro<const R: usize, const T: usize>(at: Tile, out: &mut [f32]) {
        let Tile { w, x, k, rows, r, t } = at;
        let whole = k / 8 * 8;
        let mut acc = [[_mm256_setzero_ps(); T]; R];
        let mut i = 0;
        while i < whole {
            let mut xv = [_mm256_setzero_ps(); T];
            for (u, v) in xv.iter_mut().enumerate() {
                *v = load(x, (t + u) * k + i);
            }
            for (rr, a) in acc.iter_mut().enumerate() {
                let wv = load(w, (r + rr) * k + i);
                for (u, v) in a.iter_mut().enumerate() {
                    *v = _mm256_fmadd_ps(wv, xv[u], *v);
                }
            }
            i += 8;
        }
        for (rr, a) in acc.iter().enumerate() {
            for (u, v) in a.iter().enumerate() {
                let (wr, xt) = (&w[(r + rr) * k..][..k], &x[(t + u) * k..][..k]);
                let tail: f32 = wr[whole..].iter().zip(&xt[whole..]).map(|(&a, &b)| a * b).sum();
                out[(t + u) * rows + r + rr] = hsum_f32(*v) + tail;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Several tokens at once give each token [`dot_row`]'s bits on every level, for every
    /// float dtype, rows with a partial last group, and sums of zero of either sign.
    #[test]
    fn several_tokens_sum_as_one_token_does() {
        let mut seed = 0x9e37_79b9u64;
        let mut next = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as u32
        };
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let size = if dtype == DType::F32 { 4 } else { 2 };
            for k in [7usize, 32, 96, 131, 2560] {
                let rows = 5;
                let row_bytes = size * k;
                // Finite values: F16 and BF16 bits with the top exponent bit cleared.
                let mut w: Vec<u8> = (0..rows * row_bytes).map(|_| next() as u8).collect();
                for (i, b) in w.iter_mut().enumerate() {
                    if i % size == size - 1 {
                        *b &= 0xbf;
                    }
                }
                // Row 3 is all zeros: a sum of -0.0 products for negative activations.
                w[3 * row_bytes..4 * row_bytes].fill(0);
                let x: Vec<f32> = (0..4 * k).map(|i| (next() % 2001) as f32 / 1000.0 - 1.0 - (i % 2) as f32).collect();
                let xs: Vec<&[f32]> = x.chunks_exact(k).collect();
                for level in Simd::all_supported() {
                    for tokens in 1..=MAX_TOKENS {
                        let mut got = vec![0f32; rows * tokens];
                        dot_rows_tokens(level, dtype, &w, row_bytes, &xs[..tokens], &mut got);
                        for (i, &y) in got.iter().enumerate() {
                            let (t, r) = (i / rows, i % rows);
                            let want = dot_row(level, dtype, &w[r * row_bytes..(r + 1) * row_bytes], xs[t]);
                            assert_eq!(
                                y.to_bits(),
                                want.to_bits(),
                                "{level} {dtype:?} k {k}, {tokens} tokens, row {r}"
                            );
                        }
                    }
                }
            }
        }
    }
}
