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

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dot_rows(dtype: DType, rows: &[u8], a: Int8Row, out: &mut [f32]) {
    match dtype {
        DType::Q8_0 => dot_rows_q8_0(rows, a, out),
        DType::Q4_0 => dot_rows_q4::<Q4_0>(rows, a, out),
        _ => dot_rows_q4::<Q4_1>(rows, a, out),
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
/// total. (Two rows at a time, sharing each activation load, read 17 GB/s from memory on
/// two Zen 4 threads where this loop reads 30: two interleaved row streams defeat the
/// prefetchers.)
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_rows_q8_0(rows: &[u8], a: Int8Row, out: &mut [f32]) {
    let bb = DType::Q8_0.block_bytes();
    let nb = a.inv_scale.len();
    assert!(rows.len() >= out.len() * nb * bb && a.q.len() >= nb * BLOCK);
    let (w, q, inv) = (rows.as_ptr(), a.q.as_ptr(), a.inv_scale.as_ptr());
    let ones = _mm256_set1_epi16(1);
    // Block i of the row at `r`, times `d / s_i`, added to `acc`.
    let block = |r: *const u8, i: usize, acc: __m256| {
        // SAFETY: block i < nb of a row lies inside `rows`, its 32 activation codes and
        // `1 / s_i` inside `a.q` and `a.inv_scale` (asserted above; the caller keeps
        // i < nb). d, then the 32 codes at bytes 2..34; a 4-byte load for d.
        let (b, qv, inv) = unsafe {
            let b = r.add(i * bb);
            (b, _mm256_loadu_si256(q.add(i * BLOCK).cast()), _mm_load_ss(inv.add(i)))
        };
        // The bytes PREFETCH ahead: the hardware prefetcher alone leaves the loop waiting
        // on memory (a hint: addresses past the rows do not fault).
        _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(PREFETCH).cast());
        // SAFETY: as above.
        let (d, c) = unsafe { (_mm_cvtph_ps(_mm_loadu_si32(b)), _mm256_loadu_si256(b.add(2).cast())) };
        // |c| as unsigned (−128 gives 128) times q carrying c's sign: with |q| ≤ 127 a
        // pair's sum, ≤ 2 · 128 · 127, cannot saturate vpmaddubsw.
        let p = _mm256_maddubs_epi16(_mm256_sign_epi8(c, c), _mm256_sign_epi8(qv, c));
        let s = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
        _mm256_fmadd_ps(s, _mm256_broadcastss_ps(_mm_mul_ss(d, inv)), acc)
    };
    for (j, y) in out.iter_mut().enumerate() {
        // SAFETY: row j < out.len() lies inside `rows` (asserted above).
        let r = unsafe { w.add(j * nb * bb) };
        let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut i = 0;
        while i + 1 < nb {
            acc0 = block(r, i, acc0);
            acc1 = block(r, i + 1, acc1);
            i += 2;
        }
        if i < nb {
            acc0 = block(r, i, acc0);
        }
        *y = hsum_f32(_mm256_add_ps(acc0, acc1));
    }
}

/// Q4_0 and Q4_1: one row at a time (as Q8_0), two blocks `b`, `c` of each at a time against
/// `a`'s [`pair_layout`](super::pair_layout): one 32-byte register holds both blocks'
/// packed codes, so one AND (and one shift) unpacks 64 nibbles, two `vpmaddubsw` and one
/// `vpmaddwd` give four partial sums per block, and one multiply forms
/// `[d_b/s_b, d_c/s_c, m_b·Σq_b/s_b, m_c·Σq_c/s_c]` (Q4_0: `d` in place of `m`, the
/// constant's −8 applied once at the end, exactly). An odd last block is paired with
/// itself against zero activations and scales (a non-finite `d` makes the row's sum
/// non-finite either way).
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_rows_q4<const KIND: u8>(rows: &[u8], a: Int8Row, out: &mut [f32]) {
    let bb = if KIND == Q4_0 { DType::Q4_0 } else { DType::Q4_1 }.block_bytes();
    let nb = a.inv_scale.len();
    let np = nb.div_ceil(2);
    let m = out.len();
    assert!(rows.len() >= m * nb * bb && a.pairs.len() >= np * 2 * BLOCK && a.pair_scales.len() >= np * 4);
    let (w, q, sc) = (rows.as_ptr(), a.pairs.as_ptr(), a.pair_scales.as_ptr());
    let ones = _mm256_set1_epi16(1);
    let nibble = _mm256_set1_epi8(15);
    let spread = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    // Blocks at `b`, `c` of one row against the pair's codes `qa`, `qb` and scales `s`:
    // the eight partial sums (four per block), their factors, and the scale vector whose
    // lanes 2 and 3 are the constant terms.
    let pair = |b: *const u8, c: *const u8, qa: __m256i, qb: __m256i, s: __m128| {
        // SAFETY: `b` and `c` start blocks of `bb` bytes inside `rows` (see the caller):
        // d (and Q4_1's m) in the first four bytes, the 16 code bytes last.
        let (v, dm) = unsafe {
            let v = _mm256_set_m128i(_mm_loadu_si128(c.add(bb - 16).cast()), _mm_loadu_si128(b.add(bb - 16).cast()));
            (v, _mm_unpacklo_ps(_mm_cvtph_ps(_mm_loadu_si32(b)), _mm_cvtph_ps(_mm_loadu_si32(c))))
        };
        let lo = _mm256_and_si256(v, nibble);
        let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), nibble);
        // Each i16 lane ≤ 2 · 2 · 15 · 127: no saturation.
        let p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, qa), _mm256_maddubs_epi16(hi, qb));
        let sums = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
        // [d_b, d_c, m_b, m_c] (Q4_0: [d_b, d_c, d_b, d_c]) times the pair's scales.
        let dm = if KIND == Q4_0 { _mm_movelh_ps(dm, dm) } else { dm };
        let t = _mm_mul_ps(dm, s);
        (sums, _mm256_permutevar8x32_ps(_mm256_castps128_ps256(t), spread), t)
    };
    let constant = |t: __m128| {
        let high = _mm_movehl_ps(t, t); // [t2, t3, ..]
        let c = _mm_cvtss_f32(_mm_add_ss(high, _mm_movehdup_ps(high)));
        if KIND == Q4_0 {
            -8.0 * c
        } else {
            c
        }
    };
    for (j, y) in out.iter_mut().enumerate() {
        // SAFETY: row j < m lies inside `rows` (asserted above).
        let r = unsafe { w.add(j * nb * bb) };
        let (mut acc, mut cst) = (_mm256_setzero_ps(), _mm_setzero_ps());
        for p in 0..np {
            let (i, i1) = (2 * p, (2 * p + 1).min(nb - 1));
            // SAFETY: blocks i, i1 < nb of a row lie inside it, and pair p's 64 codes and
            // 4 scales inside `a.pairs` and `a.pair_scales` (asserted above).
            let (qa, qb, s, b, c) = unsafe {
                (
                    _mm256_loadu_si256(q.add(p * 2 * BLOCK).cast()),
                    _mm256_loadu_si256(q.add(p * 2 * BLOCK + BLOCK).cast()),
                    _mm_loadu_ps(sc.add(4 * p)),
                    r.add(i * bb),
                    r.add(i1 * bb),
                )
            };
            _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(PREFETCH).cast());
            let (sums, d, t) = pair(b, c, qa, qb, s);
            acc = _mm256_fmadd_ps(sums, d, acc);
            cst = _mm_add_ps(cst, t);
        }
        *y = hsum_f32(acc) + constant(cst);
    }
}
