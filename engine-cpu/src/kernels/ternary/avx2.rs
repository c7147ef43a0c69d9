//! BITLINEAR's integer core in AVX2 (with FMA and F16C), for [`SimdLevel::Avx2`]: `vpmaddubsw`
//! of the unsigned codes and the int8 activations into i16 pairs, widened to i32 every few
//! steps. The activation rounding here serves [`SimdLevel::Avx512Vnni`] too.
//!
//! [`SimdLevel::Avx2`]: crate::kernels::SimdLevel::Avx2
//! [`SimdLevel::Avx512Vnni`]: crate::kernels::SimdLevel::Avx512Vnni

use std::arch::x86_64::*;

use std::ops::Range;

use purebee_isa::ops::{bitlinear_act_scale, bitlinear_quantize};

use super::super::f16::f16_to_f32;
use super::super::hsum::hsum_i32;
use super::super::rounding::x86 as rounding;
use super::layout::{for_each_tile, group_sums, RowPair, TileSums, CHUNK_ELEMS};
use super::row_pairs::{in_row_pairs, prefetch_pair_stream};
use super::uniform::{pair_row_finish, pair_row_scale, shared_scale};

/// `ternary::quantize_row` in eight lanes (`super::super::rounding`), bit for bit.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn quantize_row(x: &[f32], q: &mut [i8], sums: &mut [i32]) -> f32 {
    let s = bitlinear_act_scale(rounding::abs_max(x));
    let n = x.len().min(q.len());
    let ((xs, x_tail), (qs, q_tail)) = (x[..n].as_chunks::<32>(), q[..n].as_chunks_mut::<32>());
    for (xr, qr) in xs.iter().zip(qs) {
        rounding::round_32(xr, s, qr);
    }
    for (qi, &xi) in q_tail.iter_mut().zip(x_tail) {
        *qi = bitlinear_quantize(xi, s);
    }
    group_sums(q, sums);
    s
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn packed_dot(chunks: &[u8], shifts: &[u32; 4], q: &[i8]) -> i32 {
    let n = (chunks.len() / 32).min(q.len() / CHUNK_ELEMS);
    let mask = _mm256_set1_epi8(3);
    let ones = _mm256_set1_epi16(1);
    let mut acc32 = _mm256_setzero_si256();
    let mut c = 0;
    while c < n {
        // Up to 8 chunks (32 pair sums of at most 768 per i16 lane) before widening.
        let end = (c + 8).min(n);
        let mut acc16 = _mm256_setzero_si256();
        while c < end {
            // As in `tq2_0_row_sum`.
            _mm_prefetch::<_MM_HINT_T0>(chunks.as_ptr().wrapping_add(32 * c + PREFETCH).cast());
            // SAFETY: chunk c is bytes 32c..32c+32 of `chunks` and its activations are
            // 128c..128c+128 of `q`; c < n keeps both inside their slices.
            let (v, qp) =
                unsafe { (_mm256_loadu_si256(chunks.as_ptr().add(32 * c).cast()), q.as_ptr().add(CHUNK_ELEMS * c)) };
            for (g, &shift) in shifts.iter().enumerate() {
                let codes = _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(shift as i32)), mask);
                // SAFETY: run g is activations 32g..32g+32 of this chunk's 128.
                let qv = unsafe { _mm256_loadu_si256(qp.add(32 * g).cast()) };
                acc16 = _mm256_add_epi16(acc16, _mm256_maddubs_epi16(codes, qv));
            }
            c += 1;
        }
        acc32 = _mm256_add_epi32(acc32, _mm256_madd_epi16(acc16, ones));
    }
    hsum_i32(acc32)
}

/// See `ternary::packed_dot_rows`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn packed_dot_rows(rows: &[u8], row_bytes: usize, shifts: &[u32; 4], q: &[i8], out: &mut [i32]) {
    in_row_pairs(rows, row_bytes, out, |r| packed_dot_pair(r, shifts, q), |r| packed_dot(r, shifts, q));
}

/// Two rows of `packed_dot_rows`: [`packed_dot`]'s loop over both rows, each
/// activation load serving both.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn packed_dot_pair(rows: [&[u8]; 2], shifts: &[u32; 4], q: &[i8]) -> [i32; 2] {
    let n = (rows[0].len().min(rows[1].len()) / 32).min(q.len() / CHUNK_ELEMS);
    let mask = _mm256_set1_epi8(3);
    let ones = _mm256_set1_epi16(1);
    let (mut acc0, mut acc1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
    let mut c = 0;
    while c < n {
        // As in `packed_dot`: up to 8 chunks per i16 lane before widening.
        let end = (c + 8).min(n);
        let (mut lo0, mut lo1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        while c < end {
            prefetch_pair_stream(rows[0], 64 * c, 1);
            // SAFETY: chunk c is bytes 32c..32c+32 of each row and its activations are
            // 128c..128c+128 of `q`; c < n keeps all three inside their slices.
            let (v0, v1, qp) = unsafe {
                (
                    _mm256_loadu_si256(rows[0].as_ptr().add(32 * c).cast()),
                    _mm256_loadu_si256(rows[1].as_ptr().add(32 * c).cast()),
                    q.as_ptr().add(CHUNK_ELEMS * c),
                )
            };
            for (g, &shift) in shifts.iter().enumerate() {
                let count = _mm_cvtsi32_si128(shift as i32);
                // SAFETY: run g is activations 32g..32g+32 of this chunk's 128.
                let qv = unsafe { _mm256_loadu_si256(qp.add(32 * g).cast()) };
                let c0 = _mm256_and_si256(_mm256_srl_epi16(v0, count), mask);
                let c1 = _mm256_and_si256(_mm256_srl_epi16(v1, count), mask);
                lo0 = _mm256_add_epi16(lo0, _mm256_maddubs_epi16(c0, qv));
                lo1 = _mm256_add_epi16(lo1, _mm256_maddubs_epi16(c1, qv));
            }
            c += 1;
        }
        acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(lo0, ones));
        acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(lo1, ones));
    }
    [hsum_i32(acc0), hsum_i32(acc1)]
}

/// See [`super::tiles_2x4`], which checked the slices' lengths and the alignments.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn tiles_2x4(pairs: &[RowPair], sums: &mut [TileSums], q: &[i8], k: usize, at: Range<usize>, groups: usize) {
    for_each_tile(pairs, sums, q, k, groups, |p, tok, qs, s| tile_2x4(p.c, tok, at.clone(), p.block, p.d, qs, s));
}

/// One tile of [`tiles_2x4`].
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn tile_2x4(
    c: [&[u8]; 2],
    q: [&[i8]; 4],
    at: Range<usize>,
    block: usize,
    d: [&[f64]; 2],
    qsums: &[[i32; 4]],
    sums: &mut TileSums,
) {
    let ones = _mm256_set1_epi16(1);
    // SAFETY: `sums.y` holds eight f64 and `sums.raw` eight i32: two loads of four each.
    let (mut y, mut raw) = unsafe {
        (
            [_mm256_loadu_pd(sums.y.as_ptr()), _mm256_loadu_pd(sums.y.as_ptr().add(4))],
            [_mm_loadu_si128(sums.raw.as_ptr().cast()), _mm_loadu_si128(sums.raw.as_ptr().add(4).cast())],
        )
    };
    let mut i = at.start;
    while i < at.end {
        let b = i / block;
        let end = at.end.min((b + 1) * block);
        let mut acc = [_mm256_setzero_si256(); 8];
        while i < end {
            // Up to 32 steps of at most 768 per i16 lane (24 576), then widened.
            let seg_end = end.min(i + 32 * 32);
            let mut acc16 = [_mm256_setzero_si256(); 8];
            while i < seg_end {
                // SAFETY: i + 32 ≤ at.end ≤ every slice's length (checked by the caller).
                let (c0, c1) = unsafe {
                    (_mm256_loadu_si256(c[0].as_ptr().add(i).cast()), _mm256_loadu_si256(c[1].as_ptr().add(i).cast()))
                };
                for t in 0..4 {
                    // SAFETY: as above.
                    let qv = unsafe { _mm256_loadu_si256(q[t].as_ptr().add(i).cast()) };
                    acc16[t] = _mm256_add_epi16(acc16[t], _mm256_maddubs_epi16(c0, qv));
                    acc16[4 + t] = _mm256_add_epi16(acc16[4 + t], _mm256_maddubs_epi16(c1, qv));
                }
                i += 32;
            }
            for (a, a16) in acc.iter_mut().zip(acc16) {
                *a = _mm256_add_epi32(*a, _mm256_madd_epi16(a16, ones));
            }
        }
        // Eight vectors to eight sums: a tree of horizontal adds, then the two halves.
        let h0 = _mm256_hadd_epi32(_mm256_hadd_epi32(acc[0], acc[1]), _mm256_hadd_epi32(acc[2], acc[3]));
        let h1 = _mm256_hadd_epi32(_mm256_hadd_epi32(acc[4], acc[5]), _mm256_hadd_epi32(acc[6], acc[7]));
        for (r, h) in [h0, h1].into_iter().enumerate() {
            raw[r] = _mm_add_epi32(raw[r], _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h)));
        }
        if end == (b + 1) * block {
            // SAFETY: `qsums[b]` holds four i32 (b < the blocks checked by the caller).
            let qv = unsafe { _mm_loadu_si128(qsums[b].as_ptr().cast()) };
            for r in 0..2 {
                let isum = _mm256_cvtepi32_pd(_mm_sub_epi32(raw[r], qv));
                // d (an f16's 11 bits, or I2_S's f32) × isum (< 2^29) is exact in f64;
                // one add per lane per block keeps each lane's sum in block order.
                y[r] = _mm256_add_pd(y[r], _mm256_mul_pd(_mm256_set1_pd(d[r][b]), isum));
                raw[r] = _mm_setzero_si128();
            }
        }
    }
    // SAFETY: as the loads above.
    unsafe {
        _mm256_storeu_pd(sums.y.as_mut_ptr(), y[0]);
        _mm256_storeu_pd(sums.y.as_mut_ptr().add(4), y[1]);
        _mm_storeu_si128(sums.raw.as_mut_ptr().cast(), raw[0]);
        _mm_storeu_si128(sums.raw.as_mut_ptr().add(4).cast(), raw[1]);
    }
}

/// The eight i32 lanes of one TQ2_0 block's `Σ c·q`, not yet added together.
#[target_feature(enable = "avx2,fma,f16c")]
fn tq2_0_block(block: &[u8], q: &[i8]) -> __m256i {
    assert!(block.len() >= 64 && q.len() >= 256);
    let mask = _mm256_set1_epi8(3);
    let mut acc16 = _mm256_setzero_si256();
    for c in 0..2 {
        // SAFETY: chunk c is bytes 32c..32c+32 of the block's first 64 (asserted).
        let v = unsafe { _mm256_loadu_si256(block.as_ptr().add(32 * c).cast()) };
        let codes = [
            _mm256_and_si256(v, mask),
            _mm256_and_si256(_mm256_srli_epi16::<2>(v), mask),
            _mm256_and_si256(_mm256_srli_epi16::<4>(v), mask),
            _mm256_and_si256(_mm256_srli_epi16::<6>(v), mask),
        ];
        for (g, codes) in codes.into_iter().enumerate() {
            // SAFETY: activations 128c + 32g .. + 32 lie in the first 256 (asserted).
            let qv = unsafe { _mm256_loadu_si256(q.as_ptr().add(128 * c + 32 * g).cast()) };
            acc16 = _mm256_add_epi16(acc16, _mm256_maddubs_epi16(codes, qv));
        }
    }
    _mm256_madd_epi16(acc16, _mm256_set1_epi16(1))
}

/// [`tq2_0_block`] for the same block of two rows: each activation load serves both.
#[target_feature(enable = "avx2,fma,f16c")]
fn tq2_0_block_pair(blocks: [&[u8]; 2], q: &[i8]) -> [__m256i; 2] {
    assert!(blocks.iter().all(|b| b.len() >= 64) && q.len() >= 256);
    let mask = _mm256_set1_epi8(3);
    let (mut acc0, mut acc1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
    for c in 0..2 {
        // SAFETY: chunk c is bytes 32c..32c+32 of each block's first 64 (asserted).
        let (v0, v1) = unsafe {
            (
                _mm256_loadu_si256(blocks[0].as_ptr().add(32 * c).cast()),
                _mm256_loadu_si256(blocks[1].as_ptr().add(32 * c).cast()),
            )
        };
        for (g, qv) in q[128 * c..128 * c + 128].chunks_exact(32).enumerate() {
            // SAFETY: qv is 32 activations; an unaligned load.
            let qv = unsafe { _mm256_loadu_si256(qv.as_ptr().cast()) };
            let shift = _mm_cvtsi32_si128(2 * g as i32);
            let c0 = _mm256_and_si256(_mm256_srl_epi16(v0, shift), mask);
            let c1 = _mm256_and_si256(_mm256_srl_epi16(v1, shift), mask);
            acc0 = _mm256_add_epi16(acc0, _mm256_maddubs_epi16(c0, qv));
            acc1 = _mm256_add_epi16(acc1, _mm256_maddubs_epi16(c1, qv));
        }
    }
    let ones = _mm256_set1_epi16(1);
    [_mm256_madd_epi16(acc0, ones), _mm256_madd_epi16(acc1, ones)]
}

/// Two rows of `ternary::tq2_0_rows_sum` (the pair kernel).
/// See `ternary::tq2_0_rows_sum`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn tq2_0_rows_sum(rows: &[u8], row_bytes: usize, q: &[i8], qsums: &[i32], out: &mut [f64]) {
    in_row_pairs(rows, row_bytes, out, |r| tq2_0_row_pair_sum(r, q, qsums), |r| tq2_0_row_sum(r, q, qsums));
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn tq2_0_row_pair_sum(rows: [&[u8]; 2], q: &[i8], qsums: &[i32]) -> [f64; 2] {
    let n = qsums.len();
    assert!(rows.iter().all(|r| r.len() >= 66 * n) && q.len() >= 256 * n, "tq2_0_row_pair_sum: short row");
    let (Some(d0), Some(d1)) = (pair_row_scale(rows[0], n), pair_row_scale(rows[1], n)) else {
        return rows.map(|r| tq2_0_row_sum(r, q, qsums));
    };
    let d_bits = |r: &[u8], b: usize| u16::from_le_bytes([r[66 * b + 64], r[66 * b + 65]]);
    let (mut acc, mut differ) = ([_mm256_setzero_si256(); 2], [0u16; 2]);
    for b in 0..n {
        prefetch_pair_stream(rows[0], 132 * b, 2);
        let blocks = [&rows[0][66 * b..66 * b + 64], &rows[1][66 * b..66 * b + 64]];
        let sums = tq2_0_block_pair(blocks, &q[256 * b..256 * b + 256]);
        for r in 0..2 {
            acc[r] = _mm256_add_epi32(acc[r], sums[r]);
        }
        differ[0] |= d_bits(rows[0], b) ^ d0;
        differ[1] |= d_bits(rows[1], b) ^ d1;
    }
    let finish = |r: usize, d: u16| {
        pair_row_finish(d, differ[r], n, hsum_i32(acc[r]) as i64, qsums)
            .unwrap_or_else(|| tq2_0_row_sum(rows[r], q, qsums))
    };
    [finish(0, d0), finish(1, d1)]
}

/// How far ahead the GEMV kernels prefetch, in bytes (best of 512 to 8192 here).
const PREFETCH: usize = 2048;

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn tq2_0_row_sum(row: &[u8], q: &[i8], qsums: &[i32]) -> f64 {
    let n = qsums.len();
    let block = |b: usize| {
        // The rows of a task follow each other in memory: ask for the bytes a few
        // blocks ahead now, so that they arrive while these are summed (measured: the
        // hardware prefetcher alone leaves this loop waiting on memory).
        _mm_prefetch::<_MM_HINT_T0>(row.as_ptr().wrapping_add(66 * b + PREFETCH).cast());
        tq2_0_block(&row[66 * b..66 * b + 64], &q[256 * b..256 * b + 256])
    };
    let d_bits = |b: usize| u16::from_le_bytes([row[66 * b + 64], row[66 * b + 65]]) as i64;
    // A row whose first and last blocks share a scale: first as if every block did
    // (integer sums across blocks, one product), checking that on the way; the long
    // way when it does not.
    if n > 0 && d_bits(0) == d_bits(n - 1) {
        let d0 = d_bits(0);
        let (mut acc, mut differ) = (_mm256_setzero_si256(), 0);
        for b in 0..n {
            acc = _mm256_add_epi32(acc, block(b));
            differ |= d_bits(b) ^ d0;
        }
        let total = hsum_i32(acc) as i64 - qsums.iter().map(|&v| v as i64).sum::<i64>();
        if let Some(d) = shared_scale(d0 as u16, n).filter(|_| differ == 0 && total != 0) {
            return d * total as f64;
        }
    }
    let mut y: f64 = std::iter::empty::<f64>().sum();
    let mut b = 0;
    while b + 4 <= n {
        let h01 = _mm256_hadd_epi32(block(b), block(b + 1));
        let h23 = _mm256_hadd_epi32(block(b + 2), block(b + 3));
        let h = _mm256_hadd_epi32(h01, h23);
        let raw = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
        // SAFETY: qsums[b..b + 4] exists (b + 4 ≤ n).
        let qs = unsafe { _mm_loadu_si128(qsums.as_ptr().add(b).cast()) };
        let isum = _mm256_cvtepi32_pd(_mm_sub_epi32(raw, qs));
        let bits = d_bits(b) | d_bits(b + 1) << 16 | d_bits(b + 2) << 32 | d_bits(b + 3) << 48;
        let d = _mm256_cvtps_pd(_mm_cvtph_ps(_mm_cvtsi64_si128(bits)));
        // d (11 bits) × isum (< 2^18) is exact in f64; the adds stay in block order.
        let p = _mm256_mul_pd(d, isum);
        let (lo, hi) = (_mm256_castpd256_pd128(p), _mm256_extractf128_pd::<1>(p));
        y += _mm_cvtsd_f64(lo);
        y += _mm_cvtsd_f64(_mm_unpackhi_pd(lo, lo));
        y += _mm_cvtsd_f64(hi);
        y += _mm_cvtsd_f64(_mm_unpackhi_pd(hi, hi));
        b += 4;
    }
    while b < n {
        let d = f16_to_f32(d_bits(b) as u16);
        y += d as f64 * (hsum_i32(block(b)) - qsums[b]) as f64;
        b += 1;
    }
    y
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn codes_dot(codes: &[u8], q: &[i8]) -> i32 {
    let n = codes.len().min(q.len()) / 32;
    let ones = _mm256_set1_epi16(1);
    let mut acc32 = _mm256_setzero_si256();
    let mut i = 0;
    while i < n {
        // Up to 32 steps of at most 768 per i16 lane before widening.
        let end = (i + 32).min(n);
        let mut acc16 = _mm256_setzero_si256();
        while i < end {
            // SAFETY: elements 32i..32i+32 lie inside both slices (i < n).
            let (c, qv) = unsafe {
                (
                    _mm256_loadu_si256(codes.as_ptr().add(32 * i).cast()),
                    _mm256_loadu_si256(q.as_ptr().add(32 * i).cast()),
                )
            };
            acc16 = _mm256_add_epi16(acc16, _mm256_maddubs_epi16(c, qv));
            i += 1;
        }
        acc32 = _mm256_add_epi32(acc32, _mm256_madd_epi16(acc16, ones));
    }
    let tail: i32 = codes[32 * n..].iter().zip(&q[32 * n..]).map(|(&c, &qi)| c as i32 * qi as i32).sum();
    hsum_i32(acc32) + tail
}
