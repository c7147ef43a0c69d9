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

fn f16_at(b: &[u8], i: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[i], b[i + 1]]))
}

/// An f16's value as f32 (exact), inline: the `half` crate's conversion is a call through
/// a run-time feature check, too slow for one scale per 32 or 256 weights.
#[inline(always)]
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h as u32) & 0x8000) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let mant = (h & 0x3ff) as u32;
    match exp {
        // ±0 and subnormals: mant · 2⁻²⁴, exact in f32.
        0 => f32::from_bits(sign | (mant as f32 * (1.0 / 16_777_216.0)).to_bits()),
        // ±∞ and NaN (payload kept).
        0x1f => f32::from_bits(sign | 0x7f80_0000 | (mant << 13)),
        _ => f32::from_bits(sign | ((exp + 112) << 23) | (mant << 13)),
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

    /// The f16 at bytes `i..i + 2` of `b`, widened with F16C (exact, as every widening).
    #[target_feature(enable = "avx2,fma,f16c")]
    fn f16_at(b: &[u8], i: usize) -> f32 {
        let h = u16::from_le_bytes([b[i], b[i + 1]]);
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
    }

    /// The sum of a vector's eight lanes.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::kernels) fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
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

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn dot_row(dtype: DType, row: &[u8], x: &[f32]) -> f32 {
        let k = x.len();
        match dtype {
            DType::F32 | DType::F16 | DType::BF16 => {
                let mut acc = [_mm256_setzero_ps(); 4];
                let whole = k / 32 * 32;
                let mut i = 0;
                while i < whole {
                    for (u, a) in acc.iter_mut().enumerate() {
                        let j = i + 8 * u;
                        // SAFETY: (all three arms) elements j..j+8 (j + 8 ≤ whole ≤ k) of a
                        // row of k elements of 4 or 2 bytes lie inside `row`.
                        let w = match dtype {
                            DType::F32 => unsafe { _mm256_loadu_ps(row.as_ptr().add(4 * j).cast()) },
                            DType::F16 => unsafe { _mm256_cvtph_ps(_mm_loadu_si128(row.as_ptr().add(2 * j).cast())) },
                            _ => unsafe {
                                let h = _mm_loadu_si128(row.as_ptr().add(2 * j).cast());
                                _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
                            },
                        };
                        *a = _mm256_fmadd_ps(load(x, j), w, *a);
                    }
                    i += 32;
                }
                let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
                let mut w = [0f32; 32];
                let mut tail = 0f32;
                if whole < k {
                    let size = if dtype == DType::F32 { 4 } else { 2 };
                    super::decode_partial(dtype, &row[whole * size..], &mut w);
                    tail = x[whole..].iter().zip(&w).map(|(&a, &b)| a * b).sum();
                }
                hsum(sum) + tail
            }
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
                hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])))
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
        hsum(_mm256_add_ps(t0, t1))
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
                out[(t + u) * rows + r + rr] = hsum(*v) + tail;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_conversion_is_exact_for_every_bit_pattern() {
        for h in 0..=u16::MAX {
            let want = half::f16::from_bits(h).to_f32();
            let got = f16_to_f32(h);
            assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "{h:#06x}: {got} vs {want}");
        }
    }
}
