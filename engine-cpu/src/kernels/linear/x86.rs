//! LINEAR's x86_64 kernels: AVX2 with FMA and F16C for every row type, and the same float
//! rows of several tokens on AVX-512's 16-lane registers (the same bits).

use std::arch::x86_64::*;

use purebee_memory::DType;

use super::super::hsum::hsum_f32;
use super::portable::{decode_partial, dot_row_portable, dot_tile_portable};

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
        decode_partial(dtype, &row[whole * float_size(dtype)..], &mut w);
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
        _ => dot_row_portable(dtype, row, x),
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
        return dot_tile_portable(w, x, k, out);
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
