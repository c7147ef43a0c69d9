//! x86_64 AVX-512 kernels with VNNI for [`SimdLevel::Avx512Vnni`]: BITLINEAR's integer
//! core on 64-byte registers. `vpdpbusd` multiplies u8 codes by i8 activations and adds
//! each group of four products into an i32 lane in one instruction, where AVX2 needs
//! `vpmaddubsw` (into i16), an add, and a widening `vpmaddwd` every few steps. The sums
//! are exact as on every level: a lane gains at most 4 · 3 · 128 = 1 536 per step, and a
//! row's raw total stays below 2³¹ for the row lengths `ternary` admits.
//!
//! Only the ternary kernels are here. The other kernels (LINEAR, SILU, the activation
//! rounding) run their AVX2 versions on this level: every CPU with AVX-512 VNNI has AVX2,
//! FMA and F16C (`SimdLevel::is_supported` checks both), and those kernels are either
//! bandwidth-bound float work or a small share of a token.
//!
//! This machine's CPUs have no AVX-512: these kernels are checked inside the Bochs CPU
//! emulator (`scripts/test-avx512-emulated.sh`, through [`super::emulation`]), and by the
//! ordinary tests wherever the CPU has AVX-512 VNNI.

use std::arch::x86_64::*;
use std::ops::Range;

use super::ternary::{self, RowPair, TileSums, CHUNK_ELEMS, TQ2_0_SHIFTS};

/// How far ahead the GEMV kernels prefetch, in bytes (the AVX2 kernels' distance; not
/// measured on an AVX-512 machine yet).
const PREFETCH: usize = 2048;

/// The shifts that bring runs `shifts[lo]` and `shifts[lo + 1]` of a chunk broadcast to
/// both halves of a register down to bits 1..0: the low half's 16-bit lanes by the first,
/// the high half's by the second.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
fn half_shifts(shifts: &[u32; 4], lo: usize) -> __m512i {
    let (a, b) = (shifts[lo] as i16, shifts[lo + 1] as i16);
    _mm512_inserti64x4::<1>(_mm512_set1_epi16(a), _mm256_set1_epi16(b))
}

/// `Σ c·q` of consecutive 32-byte chunks of 2-bit codes against `q` (see
/// `ternary::packed_dot`).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
pub(super) fn packed_dot(chunks: &[u8], shifts: &[u32; 4], q: &[i8]) -> i32 {
    let n = (chunks.len() / 32).min(q.len() / CHUNK_ELEMS);
    let (s01, s23) = (half_shifts(shifts, 0), half_shifts(shifts, 2));
    let mask = _mm512_set1_epi8(3);
    // Two accumulators: consecutive `vpdpbusd` into one register would wait on each other.
    let (mut acc01, mut acc23) = (_mm512_setzero_si512(), _mm512_setzero_si512());
    for c in 0..n {
        _mm_prefetch::<_MM_HINT_T0>(chunks.as_ptr().wrapping_add(32 * c + PREFETCH).cast());
        // SAFETY: chunk c is bytes 32c..32c+32 of `chunks`, its activations 128c..128c+128
        // of `q`; c < n keeps both inside their slices. Unaligned loads.
        let (v, q01, q23) = unsafe {
            let qp = q.as_ptr().add(CHUNK_ELEMS * c);
            (
                _mm512_broadcast_i64x4(_mm256_loadu_si256(chunks.as_ptr().add(32 * c).cast())),
                _mm512_loadu_si512(qp.cast()),
                _mm512_loadu_si512(qp.add(64).cast()),
            )
        };
        // The chunk in both halves, shifted per half: runs 0 and 1, then runs 2 and 3,
        // which are the chunk's activations in order.
        acc01 = _mm512_dpbusd_epi32(acc01, _mm512_and_si512(_mm512_srlv_epi16(v, s01), mask), q01);
        acc23 = _mm512_dpbusd_epi32(acc23, _mm512_and_si512(_mm512_srlv_epi16(v, s23), mask), q23);
    }
    _mm512_reduce_add_epi32(_mm512_add_epi32(acc01, acc23))
}

/// One TQ2_0 row's `Σ_b d_b · (Σ_{i∈b} c_i·q_i − qsums[b])`, bit for bit as
/// `ternary::tq2_0_row_sum` specifies.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
pub(super) fn tq2_0_row_sum(row: &[u8], q: &[i8], qsums: &[i32]) -> f64 {
    let n = qsums.len();
    assert!(row.len() >= 66 * n && q.len() >= 256 * n, "tq2_0_row_sum: short row");
    let (s01, s23) = (half_shifts(&TQ2_0_SHIFTS, 0), half_shifts(&TQ2_0_SHIFTS, 2));
    let mask = _mm512_set1_epi8(3);
    // Adds block b's products to `acc` (16 lanes, not yet added together).
    let block = |acc: __m512i, b: usize| {
        _mm_prefetch::<_MM_HINT_T0>(row.as_ptr().wrapping_add(66 * b + PREFETCH).cast());
        let mut acc = acc;
        for c in 0..2 {
            // SAFETY: chunk c of block b is bytes 66b + 32c .. + 32 of `row` and its
            // activations 256b + 128c .. + 128 of `q` (both asserted above, b < n).
            let (v, q01, q23) = unsafe {
                let qp = q.as_ptr().add(256 * b + CHUNK_ELEMS * c);
                (
                    _mm512_broadcast_i64x4(_mm256_loadu_si256(row.as_ptr().add(66 * b + 32 * c).cast())),
                    _mm512_loadu_si512(qp.cast()),
                    _mm512_loadu_si512(qp.add(64).cast()),
                )
            };
            acc = _mm512_dpbusd_epi32(acc, _mm512_and_si512(_mm512_srlv_epi16(v, s01), mask), q01);
            acc = _mm512_dpbusd_epi32(acc, _mm512_and_si512(_mm512_srlv_epi16(v, s23), mask), q23);
        }
        acc
    };
    let d_bits = |b: usize| u16::from_le_bytes([row[66 * b + 64], row[66 * b + 65]]);
    // As the AVX2 kernel: a row whose first and last blocks share a scale is summed as if
    // every block did (one integer total, one product), checked on the way.
    if n > 0 && d_bits(0) == d_bits(n - 1) {
        let d0 = d_bits(0);
        let (mut acc, mut differ) = (_mm512_setzero_si512(), 0);
        for b in 0..n {
            acc = block(acc, b);
            differ |= d_bits(b) ^ d0;
        }
        let total = _mm512_reduce_add_epi32(acc) as i64 - qsums.iter().map(|&v| v as i64).sum::<i64>();
        if let Some(d) = ternary::shared_scale(d0, n).filter(|_| differ == 0 && total != 0) {
            return d * total as f64;
        }
    }
    // The long way: the reference's products, added in block order.
    let mut y: f64 = std::iter::empty::<f64>().sum();
    for (b, &qsum) in qsums.iter().enumerate() {
        let raw = _mm512_reduce_add_epi32(block(_mm512_setzero_si512(), b));
        y += super::linear::f16_to_f32(d_bits(b)) as f64 * (raw - qsum) as f64;
    }
    y
}

/// `Σ c·q` of codes stored one per byte (see `ternary::codes_dot`).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
pub(super) fn codes_dot(codes: &[u8], q: &[i8]) -> i32 {
    let n = codes.len().min(q.len());
    let mut acc = _mm512_setzero_si512();
    let mut i = 0;
    while i < n {
        // 64 elements, or the last 1..63 through masked loads (masked-off bytes are not read).
        let mask: __mmask64 = if n - i >= 64 { !0 } else { (1u64 << (n - i)) - 1 };
        // SAFETY: the mask enables only bytes i..min(i + 64, n), inside both slices.
        let (c, qv) = unsafe {
            (
                _mm512_maskz_loadu_epi8(mask, codes.as_ptr().add(i).cast()),
                _mm512_maskz_loadu_epi8(mask, q.as_ptr().add(i)),
            )
        };
        acc = _mm512_dpbusd_epi32(acc, c, qv);
        i += 64;
    }
    _mm512_reduce_add_epi32(acc)
}

/// See `ternary::tiles_2x4`, which checked the slices' lengths and the alignments.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
pub(super) fn tiles_2x4(pairs: &[RowPair], sums: &mut [TileSums], q: &[i8], k: usize, at: Range<usize>, groups: usize) {
    ternary::for_each_tile(pairs, sums, q, k, groups, |p, tok, qs, s| {
        tile_2x4(p.c, tok, at.clone(), p.block, p.d, qs, s)
    });
}

/// One 2-row × 4-token tile of [`tiles_2x4`]: eight i32 accumulators of 16 lanes, each
/// code and activation load shared by four or two `vpdpbusd`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
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
    let mut i = at.start;
    while i < at.end {
        let b = i / block;
        let end = at.end.min((b + 1) * block);
        let mut acc = [_mm512_setzero_si512(); 8];
        while i < end {
            // 64 elements, or the block's or panel's last 32 (ends are multiples of 32).
            let mask: __mmask64 = if end - i >= 64 { !0 } else { (1u64 << (end - i)) - 1 };
            // SAFETY: the mask enables bytes i..min(i + 64, end), and end ≤ at.end ≤ every
            // slice's length (checked by `ternary::tiles_2x4`).
            let (c0, c1) = unsafe {
                (
                    _mm512_maskz_loadu_epi8(mask, c[0].as_ptr().add(i).cast()),
                    _mm512_maskz_loadu_epi8(mask, c[1].as_ptr().add(i).cast()),
                )
            };
            for t in 0..4 {
                // SAFETY: as above.
                let qv = unsafe { _mm512_maskz_loadu_epi8(mask, q[t].as_ptr().add(i)) };
                acc[t] = _mm512_dpbusd_epi32(acc[t], c0, qv);
                acc[4 + t] = _mm512_dpbusd_epi32(acc[4 + t], c1, qv);
            }
            i += 64;
        }
        i = end;
        for (lane, a) in acc.into_iter().enumerate() {
            sums.raw[lane] += _mm512_reduce_add_epi32(a);
        }
        if end == (b + 1) * block {
            for lane in 0..8 {
                let (r, t) = (lane / 4, lane % 4);
                // d × isum is exact in f64 (as in the AVX2 tile); one add per lane per
                // block keeps each lane's sum in block order.
                sums.y[lane] += d[r][b] * (sums.raw[lane] - qsums[b][t]) as f64;
                sums.raw[lane] = 0;
            }
        }
    }
}
