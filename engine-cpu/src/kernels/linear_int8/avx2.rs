//! LINEAR's int8-block kernels in AVX2 (with FMA and F16C), for the AVX2 and AVX-512 VNNI
//! levels: `vpmaddubsw` of the codes and the int8 activations per block of 32, then one
//! scaling per block.

use std::arch::x86_64::*;

use purebee_memory::DType;

use super::super::hsum::hsum_f32;
use super::super::rounding::x86 as rounding;
use super::layout::{Int8Row, BLOCK};

/// The Q4 layouts, as const parameters of [`dot_rows_q4`] (one compiled loop each, no
/// dtype branch per block).
const Q4_0: u8 = 0;
const Q4_1: u8 = 1;

/// How far ahead of the weight bytes being read they are prefetched (best of 256 to
/// 1024 on two Zen 4 threads).
const PREFETCH: usize = 512;

/// LINEAR's int8 rows for `T` tokens at once, `out` token-major (`[T, rows]`): each weight block
/// is loaded and unpacked once for every token, and each token's arithmetic is the
/// one-token kernel's, op for op, so each gets the bits it gets alone.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dot_rows_tokens<const T: usize>(dtype: DType, rows: &[u8], a: [Int8Row; T], out: &mut [f32]) {
    match dtype {
        DType::Q8_0 => dot_rows_q8_0::<T>(rows, a, out),
        DType::Q4_0 => dot_rows_q4::<Q4_0, T>(rows, a, out),
        _ => dot_rows_q4::<Q4_1, T>(rows, a, out),
    }
}

/// The ISA's rule (`purebee_isa::ops::quantize_blocks`) in eight lanes
/// (`super::super::rounding`), bit for bit; a short last block as the ISA writes it.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn quantize_row(x: &[f32], q: &mut [i8], scales: &mut [f32]) {
    let (xs, qs) = (x.as_chunks::<BLOCK>().0, q.as_chunks_mut::<BLOCK>().0);
    let full = xs.len().min(qs.len()).min(scales.len());
    for ((xb, qb), s) in xs.iter().zip(qs.iter_mut()).zip(scales.iter_mut()) {
        *s = purebee_isa::ops::bitlinear_act_scale(rounding::abs_max(xb));
        rounding::round_32(xb, *s, qb);
    }
    let at = full * BLOCK;
    // The rest (a short last block): `full` blocks lie inside all three slices.
    purebee_isa::ops::quantize_blocks(&x[at..], &mut q[at..], &mut scales[full..]);
}

/// Q8_0: one row at a time, its blocks alternating between two FMA chains. Per block:
/// the eight partial sums `Σ c q` (exact i32, then f32) times `d / s_b` into a vector
/// total; with `T` tokens, each block's codes and scale are loaded once for all of them.
/// (Two rows at a time, sharing each activation load, read 17 GB/s from memory on two
/// Zen 4 threads where this loop reads 30: two interleaved row streams defeat the
/// prefetchers.)
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_rows_q8_0<const T: usize>(rows: &[u8], a: [Int8Row; T], out: &mut [f32]) {
    let bb = DType::Q8_0.block_bytes();
    let nb = a[0].inv_scale.len();
    let m = out.len() / T;
    assert!(rows.len() >= m * nb * bb && out.len() == m * T);
    for t in &a {
        assert!(t.q.len() >= nb * BLOCK && t.inv_scale.len() >= nb);
    }
    let w = rows.as_ptr();
    let ones = _mm256_set1_epi16(1);
    // Block i of the row at `r`, times `d / s_i` of each token, added to its `acc`.
    let block = |r: *const u8, i: usize, acc: &mut [__m256; T]| {
        // SAFETY: block i < nb of a row lies inside `rows` (asserted above; the caller
        // keeps i < nb): d, then the 32 codes at bytes 2..34; a 4-byte load for d.
        let b = unsafe { r.add(i * bb) };
        // The bytes PREFETCH ahead: the hardware prefetcher alone leaves the loop waiting
        // on memory (a hint: addresses past the rows do not fault).
        _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(PREFETCH).cast());
        // SAFETY: as above.
        let (d, c) = unsafe { (_mm_cvtph_ps(_mm_loadu_si32(b)), _mm256_loadu_si256(b.add(2).cast())) };
        let abs_c = _mm256_sign_epi8(c, c);
        for (t, acc) in a.iter().zip(acc.iter_mut()) {
            // SAFETY: token t's 32 codes of block i and its `1 / s_i` lie inside its
            // `q` and `inv_scale` (asserted above).
            let (qv, inv) = unsafe {
                (_mm256_loadu_si256(t.q.as_ptr().add(i * BLOCK).cast()), _mm_load_ss(t.inv_scale.as_ptr().add(i)))
            };
            // |c| as unsigned (−128 gives 128) times q carrying c's sign: with |q| ≤ 127
            // a pair's sum, ≤ 2 · 128 · 127, cannot saturate vpmaddubsw.
            let p = _mm256_maddubs_epi16(abs_c, _mm256_sign_epi8(qv, c));
            let s = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
            *acc = _mm256_fmadd_ps(s, _mm256_broadcastss_ps(_mm_mul_ss(d, inv)), *acc);
        }
    };
    for j in 0..m {
        // SAFETY: row j < m lies inside `rows` (asserted above).
        let r = unsafe { w.add(j * nb * bb) };
        let (mut acc0, mut acc1) = ([_mm256_setzero_ps(); T], [_mm256_setzero_ps(); T]);
        let mut i = 0;
        while i + 1 < nb {
            block(r, i, &mut acc0);
            block(r, i + 1, &mut acc1);
            i += 2;
        }
        if i < nb {
            block(r, i, &mut acc0);
        }
        for t in 0..T {
            out[t * m + j] = hsum_f32(_mm256_add_ps(acc0[t], acc1[t]));
        }
    }
}

/// Q4_0 and Q4_1: one row at a time (as Q8_0), two blocks `b`, `c` of each at a time against
/// `a`'s [`pair_layout`](super::pair_layout): one 32-byte register holds both blocks'
/// packed codes, so one AND (and one shift) unpacks 64 nibbles, two `vpmaddubsw` and one
/// `vpmaddwd` give four partial sums per block, and one multiply forms
/// `[d_b/s_b, d_c/s_c, m_b·Σq_b/s_b, m_c·Σq_c/s_c]` (Q4_0: `d` in place of `m`, the
/// constant's −8 applied once at the end, exactly). An odd last block is paired with
/// itself against zero activations and scales (a non-finite `d` makes the row's sum
/// non-finite either way). With `T` tokens the unpacked codes serve every token.
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_rows_q4<const KIND: u8, const T: usize>(rows: &[u8], a: [Int8Row; T], out: &mut [f32]) {
    let bb = if KIND == Q4_0 { DType::Q4_0 } else { DType::Q4_1 }.block_bytes();
    let nb = a[0].inv_scale.len();
    let np = nb.div_ceil(2);
    let m = out.len() / T;
    assert!(rows.len() >= m * nb * bb && out.len() == m * T);
    for t in &a {
        assert!(t.pairs.len() >= np * 2 * BLOCK && t.pair_scales.len() >= np * 4);
    }
    let w = rows.as_ptr();
    let ones = _mm256_set1_epi16(1);
    let nibble = _mm256_set1_epi8(15);
    let spread = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    let constant = |t: __m128| {
        let high = _mm_movehl_ps(t, t); // [t2, t3, ..]
        let c = _mm_cvtss_f32(_mm_add_ss(high, _mm_movehdup_ps(high)));
        if KIND == Q4_0 {
            -8.0 * c
        } else {
            c
        }
    };
    for j in 0..m {
        // SAFETY: row j < m lies inside `rows` (asserted above).
        let r = unsafe { w.add(j * nb * bb) };
        let (mut acc, mut cst) = ([_mm256_setzero_ps(); T], [_mm_setzero_ps(); T]);
        for p in 0..np {
            let (i, i1) = (2 * p, (2 * p + 1).min(nb - 1));
            // SAFETY: blocks i, i1 < nb of a row lie inside it (asserted above): d (and
            // Q4_1's m) in the first four bytes, the 16 code bytes last.
            let (b, c) = unsafe { (r.add(i * bb), r.add(i1 * bb)) };
            _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(PREFETCH).cast());
            // SAFETY: as above.
            let (v, dm) = unsafe {
                let v =
                    _mm256_set_m128i(_mm_loadu_si128(c.add(bb - 16).cast()), _mm_loadu_si128(b.add(bb - 16).cast()));
                (v, _mm_unpacklo_ps(_mm_cvtph_ps(_mm_loadu_si32(b)), _mm_cvtph_ps(_mm_loadu_si32(c))))
            };
            let lo = _mm256_and_si256(v, nibble);
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), nibble);
            // [d_b, d_c, m_b, m_c] (Q4_0: [d_b, d_c, d_b, d_c]).
            let dm = if KIND == Q4_0 { _mm_movelh_ps(dm, dm) } else { dm };
            for (tk, (acc, cst)) in a.iter().zip(acc.iter_mut().zip(cst.iter_mut())) {
                // SAFETY: pair p's 64 codes and 4 scales lie inside the token's `pairs` and
                // `pair_scales` (asserted above).
                let (qa, qb, s) = unsafe {
                    let q = tk.pairs.as_ptr().add(p * 2 * BLOCK);
                    (
                        _mm256_loadu_si256(q.cast()),
                        _mm256_loadu_si256(q.add(BLOCK).cast()),
                        _mm_loadu_ps(tk.pair_scales.as_ptr().add(4 * p)),
                    )
                };
                // Each i16 lane ≤ 2 · 2 · 15 · 127: no saturation.
                let prod = _mm256_add_epi16(_mm256_maddubs_epi16(lo, qa), _mm256_maddubs_epi16(hi, qb));
                let sums = _mm256_cvtepi32_ps(_mm256_madd_epi16(prod, ones));
                // The pair's factors times the token's scales; lanes 2 and 3 are the
                // constant terms.
                let t = _mm_mul_ps(dm, s);
                let d = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(t), spread);
                *acc = _mm256_fmadd_ps(sums, d, *acc);
                *cst = _mm_add_ps(*cst, t);
            }
        }
        for t in 0..T {
            out[t * m + j] = hsum_f32(acc[t]) + constant(cst[t]);
        }
    }
}
