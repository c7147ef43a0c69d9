//! BITLINEAR's integer core for a few tokens at once (a batched decode step, a verify
//! pass): each row's 2-bit codes are loaded and unpacked once, then multiplied against
//! every token's int8 activations, so the unpacking and the row's bytes are paid once
//! per pass instead of once per token.
//!
//! The results are the raw integer sums `Σ c·q` of each (row, token), exact on every level,
//! so a token's result never depends on which other tokens share the call. Every level of
//! this kernel family lives in this file (dispatcher, portable, AVX2, AVX-512 VNNI); the
//! 2-bit layouts are the ternary family's (`layout`), and the levels without a kernel here
//! loop over its one-token [`packed_dot`].

use super::super::{Simd, SimdLevel};
use super::layout::{CHUNK_ELEMS, I2_S_SHIFTS, TQ2_0_SHIFTS};
use super::packed_dot;

/// The most tokens one call sums (each token keeps its own accumulators in registers).
pub const MAX_TOKENS: usize = 4;

/// The longest row the kernels sum: `|Σ c·q| ≤ 3 · 128 · k` stays below 2³¹.
pub const MAX_ROW_ELEMS: usize = 1 << 21;

/// Where a row's 32-byte chunks of codes lie: `chunks_per_block` consecutive chunks at the
/// start of each of `blocks` blocks of `block_bytes` (TQ2_0: two chunks, then the block's
/// scale), chunk `i` of the row multiplying activations `128i .. 128i + 128`.
#[derive(Clone, Copy, Debug)]
pub struct ChunkLayout {
    /// The run shifts of a chunk ([`TQ2_0_SHIFTS`] or [`I2_S_SHIFTS`]).
    pub shifts: &'static [u32; 4],
    /// Bytes from one block's start to the next.
    pub block_bytes: usize,
    /// Chunks at the start of each block.
    pub chunks_per_block: usize,
    /// Blocks per row.
    pub blocks: usize,
}

impl ChunkLayout {
    /// A TQ2_0 row of `k` elements (blocks of 256: 64 bytes of codes, then 2 of scale).
    pub fn tq2_0(k: usize) -> ChunkLayout {
        ChunkLayout { shifts: &TQ2_0_SHIFTS, block_bytes: 66, chunks_per_block: 2, blocks: k / 256 }
    }

    /// An I2_S row of `k` elements: one run of chunks.
    pub fn i2_s(k: usize) -> ChunkLayout {
        ChunkLayout {
            shifts: &I2_S_SHIFTS,
            block_bytes: 32 * (k / CHUNK_ELEMS),
            chunks_per_block: k / CHUNK_ELEMS,
            blocks: 1,
        }
    }

    /// Elements of a row.
    pub fn elems(&self) -> usize {
        CHUNK_ELEMS * self.chunks_per_block * self.blocks
    }

    /// Bytes of a row that hold codes: the end of the last block's chunks.
    fn code_bytes(&self) -> usize {
        match self.blocks {
            0 => 0,
            b => (b - 1) * self.block_bytes + 32 * self.chunks_per_block,
        }
    }

    /// Each chunk's byte offset in its row and its first activation, in row order.
    #[inline(always)]
    fn chunks(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        (0..self.blocks).flat_map(move |b| {
            (0..self.chunks_per_block)
                .map(move |c| (b * self.block_bytes + 32 * c, CHUNK_ELEMS * (b * self.chunks_per_block + c)))
        })
    }
}

/// `out[t · rows + r]` = raw `Σ c·q` of row `r` of `rows` (rows of `row_bytes`, codes at
/// `layout`) against token `t`'s activations `q[t]` (1 to [`MAX_TOKENS`] tokens, each at
/// least `layout.elems()` long, which is at most [`MAX_ROW_ELEMS`]).
pub fn packed_rows_tokens(
    level: Simd,
    rows: &[u8],
    row_bytes: usize,
    layout: &ChunkLayout,
    q: &[&[i8]],
    out: &mut [i32],
) {
    let tokens = q.len();
    assert!((1..=MAX_TOKENS).contains(&tokens), "packed_rows_tokens: 1 to {MAX_TOKENS} tokens");
    let n_rows = out.len() / tokens;
    assert!(
        out.len() == n_rows * tokens && rows.len() >= n_rows * row_bytes,
        "packed_rows_tokens: fewer rows than sums"
    );
    assert!(layout.code_bytes() <= row_bytes && layout.elems() <= MAX_ROW_ELEMS, "packed_rows_tokens: bad layout");
    assert!(q.iter().all(|t| t.len() >= layout.elems()), "packed_rows_tokens: short activations");
    match level.get() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Simd` of level `Avx2` or `Avx512Vnni` exists only where the CPU has AVX2/FMA/F16C.
        SimdLevel::Avx2 => unsafe { avx2::rows_tokens(rows, row_bytes, layout, q, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Simd` of level `Avx512Vnni` exists only where the CPU has AVX-512 F, BW and VNNI.
        SimdLevel::Avx512Vnni => unsafe { avx512::rows_tokens(rows, row_bytes, layout, q, out) },
        _ => {
            for (t, qt) in q.iter().enumerate() {
                for r in 0..n_rows {
                    let row = &rows[r * row_bytes..(r + 1) * row_bytes];
                    out[t * n_rows + r] = layout
                        .chunks()
                        .map(|(at, qi)| packed_dot(level, &row[at..at + 32], layout.shifts, &qt[qi..qi + CHUNK_ELEMS]))
                        .sum();
                }
            }
        }
    }
}

/// Whether `level` has a kernel of its own here: elsewhere [`packed_rows_tokens`] loops
/// over the tokens, and callers do better with the one-token kernels.
pub fn has_kernel(level: Simd) -> bool {
    matches!(level.get(), SimdLevel::Avx2 | SimdLevel::Avx512Vnni)
}

/// How far ahead in the run of rows the kernels prefetch, in bytes (the one-token
/// kernels' distance).
#[cfg(target_arch = "x86_64")]
const PREFETCH: usize = 2048;

/// Calls `kernel::<T>` for the number of tokens `T = q.len()` (1 to 4), so each keeps its
/// accumulators in registers.
#[cfg(target_arch = "x86_64")]
macro_rules! by_token_count {
    ($kernel:ident, $rows:expr, $row_bytes:expr, $layout:expr, $q:expr, $out:expr) => {
        match $q {
            [a] => $kernel::<1>($rows, $row_bytes, $layout, [a], $out),
            [a, b] => $kernel::<2>($rows, $row_bytes, $layout, [a, b], $out),
            [a, b, c] => $kernel::<3>($rows, $row_bytes, $layout, [a, b, c], $out),
            [a, b, c, d] => $kernel::<4>($rows, $row_bytes, $layout, [a, b, c, d], $out),
            _ => unreachable!("packed_rows_tokens checked 1 to 4 tokens"),
        }
    };
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{ChunkLayout, PREFETCH};
    use crate::kernels::hsum::hsum_i32;

    /// See `packed_rows_tokens`, which checked the lengths.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn rows_tokens(rows: &[u8], row_bytes: usize, layout: &ChunkLayout, q: &[&[i8]], out: &mut [i32]) {
        by_token_count!(rows_t, rows, row_bytes, layout, q, out)
    }

    /// `vpmaddubsw` multiplies codes (0..=3, shifted down) by activations into i16 pairs of
    /// at most 768, so an i16 lane holds 8 chunks' four runs (24 576) before it is widened.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn rows_t<const T: usize>(rows: &[u8], row_bytes: usize, layout: &ChunkLayout, q: [&&[i8]; T], out: &mut [i32]) {
        let n_rows = out.len() / T;
        let shifts = layout.shifts.map(|s| _mm_cvtsi32_si128(s as i32));
        let (mask, ones) = (_mm256_set1_epi8(3), _mm256_set1_epi16(1));
        for r in 0..n_rows {
            let row = &rows[r * row_bytes..(r + 1) * row_bytes];
            let (mut acc16, mut acc32) = ([_mm256_setzero_si256(); T], [_mm256_setzero_si256(); T]);
            for (i, (at, qi)) in layout.chunks().enumerate() {
                _mm_prefetch::<_MM_HINT_T0>(row.as_ptr().wrapping_add(at + PREFETCH).cast());
                // SAFETY: a chunk's 32 bytes end within the layout's code bytes, which the
                // caller checked fit a row.
                let v = unsafe { _mm256_loadu_si256(row.as_ptr().add(at).cast()) };
                let codes = shifts.map(|s| _mm256_and_si256(_mm256_srl_epi16(v, s), mask));
                for t in 0..T {
                    for (g, &c) in codes.iter().enumerate() {
                        // SAFETY: run g is activations qi + 32g .. + 32, inside the chunk's 128,
                        // which lie inside the row's `layout.elems()` (checked by the caller).
                        let qv = unsafe { _mm256_loadu_si256(q[t].as_ptr().add(qi + 32 * g).cast()) };
                        acc16[t] = _mm256_add_epi16(acc16[t], _mm256_maddubs_epi16(c, qv));
                    }
                }
                if i % 8 == 7 {
                    for t in 0..T {
                        acc32[t] = _mm256_add_epi32(acc32[t], _mm256_madd_epi16(acc16[t], ones));
                        acc16[t] = _mm256_setzero_si256();
                    }
                }
            }
            for t in 0..T {
                out[t * n_rows + r] = hsum_i32(_mm256_add_epi32(acc32[t], _mm256_madd_epi16(acc16[t], ones)));
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{ChunkLayout, I2_S_SHIFTS, PREFETCH, TQ2_0_SHIFTS};
    use crate::kernels::hsum::hsum_i32;

    /// See `packed_rows_tokens`, which checked the lengths.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(super) fn rows_tokens(rows: &[u8], row_bytes: usize, layout: &ChunkLayout, q: &[&[i8]], out: &mut [i32]) {
        by_token_count!(rows_t, rows, row_bytes, layout, q, out)
    }

    /// Rows two at a time ([`rows_sums`]), an odd last row alone.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    #[inline]
    fn rows_t<const T: usize>(rows: &[u8], row_bytes: usize, layout: &ChunkLayout, q: [&&[i8]; T], out: &mut [i32]) {
        let n_rows = out.len() / T;
        assert!(*layout.shifts == TQ2_0_SHIFTS || *layout.shifts == I2_S_SHIFTS, "a 2-bit layout");
        let reversed = *layout.shifts == I2_S_SHIFTS;
        let sums = |rows: &[u8]| match reversed {
            false => rows_sums::<2, T, false>(rows, row_bytes, layout, q),
            true => rows_sums::<2, T, true>(rows, row_bytes, layout, q),
        };
        let sum_one = |rows: &[u8]| match reversed {
            false => rows_sums::<1, T, false>(rows, row_bytes, layout, q),
            true => rows_sums::<1, T, true>(rows, row_bytes, layout, q),
        };
        let mut r = 0;
        while r + 2 <= n_rows {
            let sums = sums(&rows[r * row_bytes..(r + 2) * row_bytes]);
            for (i, sums) in sums.iter().enumerate() {
                for (t, &y) in sums.iter().enumerate() {
                    out[t * n_rows + r + i] = y;
                }
            }
            r += 2;
        }
        if r < n_rows {
            let [sums] = sum_one(&rows[r * row_bytes..(r + 1) * row_bytes]);
            for (t, &y) in sums.iter().enumerate() {
                out[t * n_rows + r] = y;
            }
        }
    }

    /// The raw sums of the `R` rows of `rows` against `T` tokens; each activation load
    /// serves the `R` rows. A chunk is shifted once, by 4: masking the chunk and its shift
    /// with 3 and with 12 gives the runs at bits 0 and 4 as codes `c` and those at bits 2
    /// and 6 as `4c` (TQ2_0 holds runs 0 to 3 at bits 0 to 6, I2_S the other way round:
    /// `REVERSED`), so the latter are summed in their own accumulator, four times over,
    /// and shifted down exactly at the end.
    /// `vpdpbusd` adds four products of a code and an activation into an i32 lane: at
    /// most 4 · 12 · 128 a step, below 2³¹ over the 2¹⁴ chunks of the longest row. On
    /// 32-byte registers, as the one-token kernels.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    #[inline]
    fn rows_sums<const R: usize, const T: usize, const REVERSED: bool>(
        rows: &[u8],
        row_bytes: usize,
        layout: &ChunkLayout,
        q: [&&[i8]; T],
    ) -> [[i32; T]; R] {
        assert!(rows.len() >= R * row_bytes);
        let (low, high) = (_mm256_set1_epi8(3), _mm256_set1_epi8(12));
        let mut acc = [[[_mm256_setzero_si256(); 2]; T]; R];
        for (at, qi) in layout.chunks() {
            // The R rows are one stream of R · 32 bytes per chunk: one line ahead each.
            _mm_prefetch::<_MM_HINT_T0>(rows.as_ptr().wrapping_add(R * at + PREFETCH).cast());
            let mut v = [_mm256_setzero_si256(); R];
            for (i, v) in v.iter_mut().enumerate() {
                // SAFETY: a chunk's 32 bytes end within the layout's code bytes, which the
                // caller checked fit a row, and row i < R lies inside `rows` (asserted).
                *v = unsafe { _mm256_loadu_si256(rows.as_ptr().add(i * row_bytes + at).cast()) };
            }
            // Each row's codes by bit position 0, 2, 4, 6 (the last two shifted down by 4).
            let codes: [[__m256i; 4]; R] = std::array::from_fn(|i| {
                let shifted = _mm256_srli_epi16::<4>(v[i]);
                [
                    _mm256_and_si256(v[i], low),
                    _mm256_and_si256(v[i], high),
                    _mm256_and_si256(shifted, low),
                    _mm256_and_si256(shifted, high),
                ]
            });
            for g in 0..4 {
                // Run g's bit position: 2g, or 6 − 2g in I2_S's reversed order.
                let p = if REVERSED { 3 - g } else { g };
                for t in 0..T {
                    // SAFETY: run g is activations qi + 32g .. + 32, inside the chunk's 128,
                    // which lie inside the row's `layout.elems()` (checked by the caller).
                    let qv = unsafe { _mm256_loadu_si256(q[t].as_ptr().add(qi + 32 * g).cast()) };
                    for i in 0..R {
                        acc[i][t][p % 2] = _mm256_dpbusd_epi32(acc[i][t][p % 2], codes[i][p], qv);
                    }
                }
            }
        }
        let mut sums = [[0i32; T]; R];
        for i in 0..R {
            for t in 0..T {
                let fours = _mm256_srai_epi32::<2>(acc[i][t][1]);
                sums[i][t] = hsum_i32(_mm256_add_epi32(acc[i][t][0], fours));
            }
        }
        sums
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::ternary;

    /// Every level against the rows unpacked to one code per byte, on both layouts, 1 to 4 tokens, odd row counts, extreme activations.
    #[test]
    fn every_level_sums_as_the_portable_kernel() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for (k, n_rows) in [(256usize, 1usize), (512, 3), (2560, 5), (1280, 2)] {
            for layout in [ChunkLayout::tq2_0(k), ChunkLayout::i2_s(k)] {
                let row_bytes = layout.code_bytes() + 7;
                let rows: Vec<u8> = (0..n_rows * row_bytes).map(|_| next() as u8).collect();
                let q_all: Vec<i8> =
                    (0..MAX_TOKENS * k).map(|i| if i % 13 == 0 { -128 } else { next() as i8 }).collect();
                let q: Vec<&[i8]> = q_all.chunks_exact(k).collect();
                // Each row unpacked to one code per byte, block by block.
                let codes: Vec<Vec<u8>> = (0..n_rows)
                    .map(|r| {
                        let row = &rows[r * row_bytes..(r + 1) * row_bytes];
                        let mut codes = vec![0u8; k];
                        let per_block = 32 * layout.chunks_per_block;
                        for (b, c) in codes.chunks_exact_mut(CHUNK_ELEMS * layout.chunks_per_block).enumerate() {
                            let at = b * layout.block_bytes;
                            ternary::unpack_chunks(&row[at..at + per_block], layout.shifts, c);
                        }
                        codes
                    })
                    .collect();
                for tokens in 1..=MAX_TOKENS {
                    let want: Vec<i32> = (0..tokens * n_rows)
                        .map(|i| codes[i % n_rows].iter().zip(q[i / n_rows]).map(|(&c, &v)| c as i32 * v as i32).sum())
                        .collect();
                    for level in Simd::all_supported() {
                        let mut got = vec![0i32; n_rows * tokens];
                        packed_rows_tokens(level, &rows, row_bytes, &layout, &q[..tokens], &mut got);
                        assert_eq!(got, want, "{level}, {layout:?}, {tokens} tokens, {n_rows} rows");
                    }
                }
            }
        }
    }
}
