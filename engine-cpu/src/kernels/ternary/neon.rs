//! BITLINEAR's integer core on aarch64 NEON, for [`SimdLevel::Neon`] (widening multiplies)
//! and [`SimdLevel::NeonDot`] (`sdot`), with the x86 kernels' results: integer sums exact,
//! the f64 finishing of the sums bit for bit the portable one's.
//!
//! [`SimdLevel::Neon`]: crate::kernels::SimdLevel::Neon
//! [`SimdLevel::NeonDot`]: crate::kernels::SimdLevel::NeonDot

use std::arch::aarch64::*;
use std::ops::Range;

use super::super::f16::f16_to_f32;
use super::super::neon::{dot16, i8x16, sdot, u8x16};
use super::super::Simd;
use super::layout::{for_each_tile, RowPair, TileSums, CHUNK_ELEMS, TQ2_0_SHIFTS};
use super::uniform::uniform_scale;

/// `acc` plus the raw `Σ c·q` of consecutive 32-byte chunks of 2-bit codes (runs at
/// `shifts`, see `ternary`'s layouts) against `q`, its lanes not yet added.
#[inline]
#[target_feature(enable = "neon")]
fn chunks_dot<const SDOT: bool>(mut acc: int32x4_t, chunks: &[u8], shifts: &[u32; 4], q: &[i8]) -> int32x4_t {
    let mask = vdupq_n_u8(3);
    // `ushl` by a negative count shifts right.
    let right = shifts.map(|s| vdupq_n_s8(-(s as i8)));
    for (chunk, qc) in chunks.chunks_exact(32).zip(q.chunks_exact(CHUNK_ELEMS)) {
        for half in [0, 16] {
            let v = u8x16(&chunk[half..]);
            for (g, &r) in right.iter().enumerate() {
                let codes = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(v, r), mask));
                acc = dot16::<SDOT>(acc, codes, i8x16(&qc[32 * g + half..]));
            }
        }
    }
    acc
}

/// `ternary::packed_dot`.
#[target_feature(enable = "neon")]
pub(super) fn packed_dot(level: Simd, chunks: &[u8], shifts: &[u32; 4], q: &[i8]) -> i32 {
    let zero = vdupq_n_s32(0);
    let acc = if sdot(level) {
        chunks_dot::<true>(zero, chunks, shifts, q)
    } else {
        chunks_dot::<false>(zero, chunks, shifts, q)
    };
    vaddvq_s32(acc)
}

/// `ternary::tq2_0_row_sum`.
#[target_feature(enable = "neon")]
pub(super) fn tq2_0_row_sum(level: Simd, row: &[u8], q: &[i8], qsums: &[i32]) -> f64 {
    if sdot(level) {
        row_sum::<true>(row, q, qsums)
    } else {
        row_sum::<false>(row, q, qsums)
    }
}

#[inline]
#[target_feature(enable = "neon")]
fn row_sum<const SDOT: bool>(row: &[u8], q: &[i8], qsums: &[i32]) -> f64 {
    let zero = vdupq_n_s32(0);
    let block = |acc, b: usize| chunks_dot::<SDOT>(acc, &row[66 * b..66 * b + 64], &TQ2_0_SHIFTS, &q[256 * b..][..256]);
    let d_bits = |b: usize| u16::from_le_bytes([row[66 * b + 64], row[66 * b + 65]]);
    // As the x86 kernel: blocks sharing one scale sum their integers across the row and
    // multiply once ([`uniform_scale`] says why that is the reference's bits), unless
    // the total is zero, whose sign only the long way gets right.
    if let Some(d) = uniform_scale((0..qsums.len()).map(d_bits)) {
        // Each lane stays below 2³¹: at most 8192 blocks of |Σ c·q| ≤ 256·3·128.
        let raw = vaddlvq_s32((0..qsums.len()).fold(zero, block));
        let total = raw - qsums.iter().map(|&v| v as i64).sum::<i64>();
        if total != 0 {
            return d * total as f64;
        }
    }
    // The portable sum: block by block from `Iterator::sum`'s zero, each product exact.
    let y0: f64 = std::iter::empty::<f64>().sum();
    qsums.iter().enumerate().fold(y0, |y, (b, &qsum)| {
        let raw = vaddvq_s32(block(zero, b));
        y + f16_to_f32(d_bits(b)) as f64 * (raw - qsum) as f64
    })
}

/// `ternary::tiles_2x4`, after its checks (`groups` tile groups of four tokens).
#[target_feature(enable = "neon")]
pub(super) fn tiles_2x4(
    level: Simd,
    pairs: &[RowPair],
    sums: &mut [TileSums],
    q: &[i8],
    k: usize,
    at: Range<usize>,
    groups: usize,
) {
    if sdot(level) {
        tiles::<true>(pairs, sums, q, k, at, groups)
    } else {
        tiles::<false>(pairs, sums, q, k, at, groups)
    }
}

#[inline]
#[target_feature(enable = "neon")]
fn tiles<const SDOT: bool>(
    pairs: &[RowPair],
    sums: &mut [TileSums],
    q: &[i8],
    k: usize,
    at: Range<usize>,
    groups: usize,
) {
    for_each_tile(pairs, sums, q, k, groups, |p, tok, qs, s| tile::<SDOT>(p, tok, at.clone(), qs, s));
}

/// One 2-row × 4-token tile over elements `at`: eight vector sums (lane `4r + t`) per
/// stretch of a block, then finished as `ternary`'s portable tile does, lane by lane.
#[inline]
#[target_feature(enable = "neon")]
fn tile<const SDOT: bool>(p: &RowPair, q: [&[i8]; 4], at: Range<usize>, qsums: &[[i32; 4]], sums: &mut TileSums) {
    let mut i = at.start;
    while i < at.end {
        let b = i / p.block;
        let end = at.end.min((b + 1) * p.block);
        let mut acc = [vdupq_n_s32(0); 8];
        while i < end {
            let c = p.c.map(|r| vreinterpretq_s8_u8(u8x16(&r[i..])));
            for t in 0..4 {
                let qv = i8x16(&q[t][i..]);
                acc[t] = dot16::<SDOT>(acc[t], c[0], qv);
                acc[4 + t] = dot16::<SDOT>(acc[4 + t], c[1], qv);
            }
            i += 16;
        }
        for (lane, a) in acc.into_iter().enumerate() {
            let (r, t) = (lane / 4, lane % 4);
            sums.raw[lane] += vaddvq_s32(a);
            if end == (b + 1) * p.block {
                sums.y[lane] += p.d[r][b] * (sums.raw[lane] - qsums[b][t]) as f64;
                sums.raw[lane] = 0;
            }
        }
    }
}

/// `ternary::codes_dot` (codes 0..=3, as there).
#[target_feature(enable = "neon")]
pub(super) fn codes_dot(level: Simd, codes: &[u8], q: &[i8]) -> i32 {
    if sdot(level) {
        codes_dot_k::<true>(codes, q)
    } else {
        codes_dot_k::<false>(codes, q)
    }
}

#[inline]
#[target_feature(enable = "neon")]
fn codes_dot_k<const SDOT: bool>(codes: &[u8], q: &[i8]) -> i32 {
    let n = codes.len().min(q.len());
    let (c, q) = (codes[..n].chunks_exact(16), q[..n].chunks_exact(16));
    let tail: i32 = c.remainder().iter().zip(q.remainder()).map(|(&c, &qi)| c as i32 * qi as i32).sum();
    let acc = c.zip(q).fold(vdupq_n_s32(0), |acc, (c, q)| dot16::<SDOT>(acc, vreinterpretq_s8_u8(u8x16(c)), i8x16(q)));
    vaddvq_s32(acc) + tail
}
