//! LINEAR's int8-block kernels for Q4_0 and Q4_1 weights with AVX-512 VNNI, for the
//! `Avx512Vnni` level: four blocks at a time on 64-byte registers against the activations'
//! [`quad_layout`](super::quad_layout). One load of the four blocks' packed codes and one
//! AND (and one shift) unpack 128 nibbles; per token, two `vpdpbusd` give each block's
//! products summed four at a time in i32 lanes (exact: a lane holds at most 8 · 15 · 127),
//! and one multiply-add scales them by `d_b / s_b`, where AVX2 needs four integer
//! instructions and five float ones for every two blocks. The constant term (`m_b · Σq_b /
//! s_b`, Q4_0's `−8 · d_b · Σq_b / s_b`) takes one more multiply-add per four blocks.
//!
//! Q8_0 ([`dot_rows_q8_0`]) four blocks at a time too: `vpdpbusd` takes unsigned bytes
//! against signed ones, so the activations are offset to `q + 128` (one XOR) and the
//! offset's share, `128 · Σ c` per lane, is computed once per four weight blocks and starts
//! every token's sums, which are then exact `Σ c q`.

use std::arch::x86_64::*;

use purebee_memory::DType;

use super::layout::{Int8Row, BLOCK};

/// The Q4 layouts, as const parameters (one compiled loop each, no dtype branch per block).
pub(super) const Q4_0: u8 = 0;
pub(super) const Q4_1: u8 = 1;

/// How far ahead of the weight bytes being read they are prefetched (the AVX2 kernel's).
const PREFETCH: usize = 512;

/// The four blocks of group `g` of the row at `r` (`nb` blocks of `bb` bytes); blocks past
/// the row's end repeat its last block, which the callers weigh by zero activations and
/// scales (a non-finite `d` makes the row's sum non-finite either way). Prefetches ahead.
#[target_feature(enable = "avx2")]
#[inline]
fn group_blocks(r: *const u8, g: usize, nb: usize, bb: usize) -> [*const u8; 4] {
    // Every block index is below nb (the callers' rows hold nb blocks), so each pointer
    // stays inside the row; `wrapping_add` keeps the arithmetic itself free of UB.
    let b = [0, 1, 2, 3].map(|s| r.wrapping_add((4 * g + s).min(nb - 1) * bb));
    _mm_prefetch::<_MM_HINT_T0>(b[0].wrapping_add(PREFETCH).cast());
    _mm_prefetch::<_MM_HINT_T0>(b[0].wrapping_add(PREFETCH + 64).cast());
    b
}

/// `out[t · m + j]`: row `j` of `rows` against token `t` of `a`, for `T` tokens at once
/// (each token's arithmetic the same whatever `T` is, so each gets the bits it gets alone).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn dot_rows_q4<const KIND: u8, const T: usize>(rows: &[u8], a: [Int8Row; T], out: &mut [f32]) {
    let bb = if KIND == Q4_0 { DType::Q4_0 } else { DType::Q4_1 }.block_bytes();
    let nb = a[0].inv_scale.len();
    let ng = nb.div_ceil(4);
    let m = out.len() / T;
    assert!(nb > 0 && rows.len() >= m * nb * bb && out.len() == m * T);
    for t in &a {
        assert!(t.quads.len() >= ng * 4 * BLOCK && t.quad_scales.len() >= ng * 20);
    }
    let w = rows.as_ptr();
    let nibble = _mm512_set1_epi8(15);
    // Lane l of the products belongs to block l / 4.
    let spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    for j in 0..m {
        // SAFETY: row j < m lies inside `rows` (asserted above).
        let r = unsafe { w.add(j * nb * bb) };
        let (mut acc, mut cst) = ([_mm512_setzero_ps(); T], [_mm_setzero_ps(); T]);
        for g in 0..ng {
            let [b0, b1, b2, b3] = group_blocks(r, g, nb, bb);
            // SAFETY: each block lies inside the row (`group_blocks`) and holds d (and
            // Q4_1's m) in its first four bytes and its 16 code bytes last.
            let (v, dm01, dm23) = unsafe {
                let codes = |b: *const u8| _mm_loadu_si128(b.add(bb - 16).cast());
                let low = _mm256_set_m128i(codes(b1), codes(b0));
                let high = _mm256_set_m128i(codes(b3), codes(b2));
                let dm = |b: *const u8, c: *const u8| {
                    _mm_unpacklo_ps(_mm_cvtph_ps(_mm_loadu_si32(b)), _mm_cvtph_ps(_mm_loadu_si32(c)))
                };
                (_mm512_inserti64x4::<1>(_mm512_castsi256_si512(low), high), dm(b0, b1), dm(b2, b3))
            };
            let lo = _mm512_and_si512(v, nibble);
            let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(v), nibble);
            // [d0, d1, d2, d3] and [m0, m1, m2, m3] (Q4_0: d again, times −8 at the end).
            let d4 = _mm_movelh_ps(dm01, dm23);
            let m4 = if KIND == Q4_0 { d4 } else { _mm_movehl_ps(dm23, dm01) };
            let d = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(d4));
            for (tk, (acc, cst)) in a.iter().zip(acc.iter_mut().zip(cst.iter_mut())) {
                // SAFETY: group g's 128 codes and 20 scales lie inside the token's `quads`
                // and `quad_scales` (asserted above).
                let (qa, qb, inv, qs) = unsafe {
                    let q = tk.quads.as_ptr().add(g * 4 * BLOCK);
                    let s = tk.quad_scales.as_ptr().add(g * 20);
                    (
                        _mm512_loadu_si512(q.cast()),
                        _mm512_loadu_si512(q.add(2 * BLOCK).cast()),
                        _mm512_loadu_ps(s),
                        _mm_loadu_ps(s.add(16)),
                    )
                };
                let sums = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, qa), hi, qb);
                *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_mul_ps(d, inv), *acc);
                *cst = _mm_fmadd_ps(m4, qs, *cst);
            }
        }
        for t in 0..T {
            let c = _mm_add_ps(cst[t], _mm_movehl_ps(cst[t], cst[t]));
            let c = _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
            out[t * m + j] = _mm512_reduce_add_ps(acc[t]) + if KIND == Q4_0 { -8.0 * c } else { c };
        }
    }
}

/// Q8_0 rows: `out[t · m + j]`, as [`dot_rows_q4`] (each token's arithmetic the same
/// whatever `T` is). Blocks past the row's end are read as zeros on the activations' side
/// (masked loads) and repeat the row's last block on the weights'.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn dot_rows_q8_0<const T: usize>(rows: &[u8], a: [Int8Row; T], out: &mut [f32]) {
    let bb = DType::Q8_0.block_bytes();
    let nb = a[0].inv_scale.len();
    let ng = nb.div_ceil(4);
    let m = out.len() / T;
    assert!(nb > 0 && rows.len() >= m * nb * bb && out.len() == m * T);
    for t in &a {
        assert!(t.q.len() >= nb * BLOCK && t.quad_scales.len() >= ng * 20);
    }
    let w = rows.as_ptr();
    let spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    // Lanes 2l and 2l + 1 of the two blocks-pairs' sums: four lanes per block after adding.
    let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    let offset = _mm512_set1_epi8(-128);
    for j in 0..m {
        // SAFETY: row j < m lies inside `rows` (asserted above).
        let r = unsafe { w.add(j * nb * bb) };
        let mut acc = [_mm512_setzero_ps(); T];
        for g in 0..ng {
            let [b0, b1, b2, b3] = group_blocks(r, g, nb, bb);
            // SAFETY: each block lies inside the row (`group_blocks`) and holds d in its
            // first two bytes, then its 32 codes; a 4-byte load for d stays inside it.
            let (c01, c23, d4) = unsafe {
                let codes = |b: *const u8| _mm256_loadu_si256(b.add(2).cast());
                let pair =
                    |b: *const u8, c: *const u8| _mm512_inserti64x4::<1>(_mm512_castsi256_si512(codes(b)), codes(c));
                let d = |b: *const u8, c: *const u8| {
                    _mm_unpacklo_ps(_mm_cvtph_ps(_mm_loadu_si32(b)), _mm_cvtph_ps(_mm_loadu_si32(c)))
                };
                (pair(b0, b1), pair(b2, b3), _mm_movelh_ps(d(b0, b1), d(b2, b3)))
            };
            // −128 · Σ c per lane: each token's sums start from it.
            let zero = _mm512_setzero_si512();
            let bias01 = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, offset, c01));
            let bias23 = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, offset, c23));
            let d = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(d4));
            // The activations of blocks past the row's end are not there: masked to zero.
            let valid = (nb - 4 * g).min(4);
            let mask = |first: usize| -> u64 {
                match valid.saturating_sub(first) {
                    0 => 0,
                    1 => u64::MAX >> 32,
                    _ => u64::MAX,
                }
            };
            let (m01, m23) = (mask(0), mask(2));
            for (tk, acc) in a.iter().zip(acc.iter_mut()) {
                let q = tk.q.as_ptr().wrapping_add(g * 4 * BLOCK);
                // SAFETY: the unmasked bytes are blocks below nb of the token's codes, inside
                // `q` (asserted above); masked-out bytes are not read. Group g's 20 scales
                // lie inside `quad_scales`.
                let (q01, q23, inv) = unsafe {
                    (
                        _mm512_maskz_loadu_epi8(m01, q.cast()),
                        _mm512_maskz_loadu_epi8(m23, q.wrapping_add(2 * BLOCK).cast()),
                        _mm512_loadu_ps(tk.quad_scales.as_ptr().add(g * 20)),
                    )
                };
                // (q + 128) as unsigned against c, from −128 · Σ c: exactly Σ c q per lane.
                let s01 = _mm512_dpbusd_epi32(bias01, _mm512_xor_si512(q01, offset), c01);
                let s23 = _mm512_dpbusd_epi32(bias23, _mm512_xor_si512(q23, offset), c23);
                let sums = _mm512_add_epi32(
                    _mm512_permutex2var_epi32(s01, even, s23),
                    _mm512_permutex2var_epi32(s01, odd, s23),
                );
                *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_mul_ps(d, inv), *acc);
            }
        }
        for t in 0..T {
            out[t * m + j] = _mm512_reduce_add_ps(acc[t]);
        }
    }
}
