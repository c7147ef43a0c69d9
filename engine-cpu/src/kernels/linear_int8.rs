//! LINEAR's kernels for int8-block activations (`LinearActivations::Int8Blocks`) against
//! Q4_0, Q4_1 and Q8_0 weight rows: integer products per block of 32, then one float
//! scaling per block, as ggml's `vec_dot_q4_0_q8_0` and its kin compute them.
//!
//! A block `b` of weight codes `c_i` (scale `d`, Q4_1's offset `m`) against activation
//! codes `q_i` (scale `s_b`) contributes, in exact arithmetic, exactly what the ISA's
//! formula `Σ_{i∈b} q_i · w_i / s_b` gives:
//! - Q8_0: `d · Σ c_i q_i / s_b`;
//! - Q4_0: `d · (Σ c_i q_i − 8 · Σ q_i) / s_b` (codes stored as `c + 8`);
//! - Q4_1: `(d · Σ c_i q_i + m · Σ q_i) / s_b`.
//!
//! The integer sums are exact (|Σ c q| ≤ 32 · 128 · 127 < 2²⁴, so they also convert to f32
//! exactly); `d / s_b` is formed as `d · (1 / s_b)` and the block terms are summed in f32
//! in any order, which LINEAR allows (each term carries a few roundings more than an f32
//! dot product of the decoded weights: the tests' bound says how many).

use purebee_memory::DType;

use super::f16::f16_to_f32;
use super::Simd;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use super::SimdLevel;

/// Elements per activation block, and per Q4_0/Q4_1/Q8_0 weight block.
pub const BLOCK: usize = purebee_isa::ops::LINEAR_ACT_BLOCK;

/// The weight dtypes these kernels read.
pub fn supports(dtype: DType) -> bool {
    matches!(dtype, DType::Q4_0 | DType::Q4_1 | DType::Q8_0)
}

/// One row of int8-block activations: `q` (a whole number of blocks), and per block
/// `1 / s_b` and `Σ q_i`; and the same in the layout of the AVX2 Q4 kernels
/// ([`pair_layout`]).
#[derive(Clone, Copy)]
pub struct Int8Row<'a> {
    /// The codes, `BLOCK · inv_scale.len()` of them.
    pub q: &'a [i8],
    /// `1 / s_b` per block.
    pub inv_scale: &'a [f32],
    /// `Σ_{i∈b} q_i` per block (exact in f32: at most 32 · 127 in magnitude).
    pub sum: &'a [f32],
    /// Per pair of blocks, 64 codes ([`pair_layout`]).
    pub pairs: &'a [i8],
    /// Per pair of blocks `(b, c)`: `[1/s_b, 1/s_c, Σq_b / s_b, Σq_c / s_c]`.
    pub pair_scales: &'a [f32],
}

/// Bytes of [`Int8Row::pairs`] and elements of [`Int8Row::pair_scales`] for `blocks` blocks.
pub fn pair_layout_len(blocks: usize) -> (usize, usize) {
    (blocks.div_ceil(2) * 2 * BLOCK, blocks.div_ceil(2) * 4)
}

/// The activations of a row as the AVX2 Q4 kernels read them, two blocks `b`, `c` at a time:
/// `b`'s codes 0..16, `c`'s 0..16, `b`'s 16..32, `c`'s 16..32 (the order in which one
/// 32-byte load of both blocks' packed nibbles unpacks: low nibbles, then high), and their
/// scales; an odd last block is paired with zeros.
pub fn pair_layout(q: &[i8], inv_scale: &[f32], sum: &[f32], pairs: &mut [i8], pair_scales: &mut [f32]) {
    const H: usize = BLOCK / 2;
    pairs.fill(0);
    pair_scales.fill(0.0);
    for (b, ((qb, &inv), &qsum)) in q.chunks_exact(BLOCK).zip(inv_scale).zip(sum).enumerate() {
        let (p, second) = (b / 2, b % 2);
        let out = &mut pairs[p * 2 * BLOCK..(p + 1) * 2 * BLOCK];
        out[second * H..][..H].copy_from_slice(&qb[..H]);
        out[BLOCK + second * H..][..H].copy_from_slice(&qb[H..]);
        pair_scales[4 * p + second] = inv;
        pair_scales[4 * p + 2 + second] = qsum * inv;
    }
}

/// `out[j] = Σ_b (Σ_{i∈b} q_i · w_ji) / s_b` for `out.len()` consecutive weight rows `rows`
/// (their bytes) of a [`supports`] dtype against `a` (as many elements as a row).
pub fn dot_rows(level: Simd, dtype: DType, rows: &[u8], a: Int8Row, out: &mut [f32]) {
    match level.get() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Simd` of level `Avx2` or `Avx512Vnni` exists only where the CPU has AVX2/FMA/F16C.
        SimdLevel::Avx2 | SimdLevel::Avx512Vnni => unsafe { x86::dot_rows(dtype, rows, a, out) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: a `Simd` of level `Neon` or `NeonDot` exists only where the CPU has NEON (and dotprod).
        SimdLevel::Neon | SimdLevel::NeonDot => unsafe { super::neon::dot_rows_int8(level, dtype, rows, a, out) },
        _ => {
            let row_bytes = a.inv_scale.len() * dtype.block_bytes();
            for (y, row) in out.iter_mut().zip(rows.chunks_exact(row_bytes.max(1))) {
                *y = dot_row_portable(dtype, row, a);
            }
        }
    }
}

/// Rounds one row `x` to int8 blocks (`purebee_isa::ops::quantize_blocks`, the rule written
/// once): `q` (`x.len()` codes) and the scale `s_b` of each block.
pub fn quantize_row(level: Simd, x: &[f32], q: &mut [i8], scales: &mut [f32]) {
    match level.get() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Simd` of level `Avx2` or `Avx512Vnni` exists only where the CPU has AVX2/FMA/F16C.
        SimdLevel::Avx2 | SimdLevel::Avx512Vnni => unsafe { x86::quantize_row(x, q, scales) },
        _ => purebee_isa::ops::quantize_blocks(x, q, scales),
    }
}

fn dot_row_portable(dtype: DType, row: &[u8], a: Int8Row) -> f32 {
    let blocks = row.chunks_exact(dtype.block_bytes()).zip(a.q.chunks_exact(BLOCK));
    let mut acc = 0f32;
    for ((b, q), (&inv, &qsum)) in blocks.zip(a.inv_scale.iter().zip(a.sum)) {
        let d = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
        acc += match dtype {
            DType::Q8_0 => {
                let dot: i32 = b[2..34].iter().zip(q).map(|(&c, &q)| (c as i8) as i32 * q as i32).sum();
                d * inv * dot as f32
            }
            DType::Q4_0 => (d * inv) * nibble_dot(&b[2..18], q) as f32 + (d * inv) * (-8.0 * qsum),
            _ => {
                let m = f16_to_f32(u16::from_le_bytes([b[2], b[3]]));
                (d * inv) * nibble_dot(&b[4..20], q) as f32 + (m * inv) * qsum
            }
        };
    }
    acc
}

/// `Σ c_i q_i` for a Q4 block's 16 bytes: element `i < 16` is byte `i`'s low nibble,
/// element `16 + i` its high nibble.
fn nibble_dot(qs: &[u8], q: &[i8]) -> i32 {
    let (lo, hi) = q.split_at(16);
    qs.iter().zip(lo.iter().zip(hi)).map(|(&c, (&l, &h))| (c & 15) as i32 * l as i32 + (c >> 4) as i32 * h as i32).sum()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use purebee_memory::DType;

    use super::super::hsum::hsum_f32;
    use super::super::rounding::x86 as rounding;
    use super::{Int8Row, BLOCK};

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
                let v =
                    _mm256_set_m128i(_mm_loadu_si128(c.add(bb - 16).cast()), _mm_loadu_si128(b.add(bb - 16).cast()));
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every level rounds activations to int8 blocks as the ISA's `quantize_blocks` does,
    /// bit for bit.
    #[test]
    fn quantize_row_matches_the_isa_on_every_level() {
        for x in super::super::rounding::cases() {
            let blocks = x.len().div_ceil(BLOCK);
            let (mut want_q, mut want_s) = (vec![0i8; x.len()], vec![0f32; blocks]);
            purebee_isa::ops::quantize_blocks(&x, &mut want_q, &mut want_s);
            for level in Simd::all_supported() {
                let (mut q, mut s) = (vec![0i8; x.len()], vec![0f32; blocks]);
                quantize_row(level, &x, &mut q, &mut s);
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!((bits(&s), &q), (bits(&want_s), &want_q), "{level}, a row of {}", x.len());
            }
        }
    }

    /// The portable and AVX2 kernels agree with the formula computed in f64 on random blocks.
    #[test]
    fn kernels_match_the_block_formula() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for dtype in [DType::Q8_0, DType::Q4_0, DType::Q4_1] {
            let nb = 7;
            let bb = dtype.block_bytes();
            let mut row: Vec<u8> = (0..nb * bb).map(|_| next() as u8).collect();
            for b in row.chunks_exact_mut(bb) {
                b[0..2].copy_from_slice(&half::f16::from_f32(0.01 * (next() % 100) as f32 - 0.5).to_le_bytes());
                if dtype == DType::Q4_1 {
                    b[2..4].copy_from_slice(&half::f16::from_f32(0.02 * (next() % 100) as f32 - 1.0).to_le_bytes());
                }
            }
            let q: Vec<i8> = (0..nb * BLOCK).map(|_| (next() % 255) as i8).map(|v| v.max(-127)).collect();
            let inv: Vec<f32> = (0..nb).map(|_| 1.0 / (1.0 + (next() % 1000) as f32)).collect();
            let sum: Vec<f32> = q.chunks(BLOCK).map(|c| c.iter().map(|&v| v as f32).sum()).collect();
            let (pl, sl) = pair_layout_len(nb);
            let (mut pairs, mut pair_scales) = (vec![0i8; pl], vec![0f32; sl]);
            pair_layout(&q, &inv, &sum, &mut pairs, &mut pair_scales);
            let a = Int8Row { q: &q, inv_scale: &inv, sum: &sum, pairs: &pairs, pair_scales: &pair_scales };
            let mut want = 0f64;
            let mut w = vec![0f32; nb * BLOCK];
            purebee_memory::quant::QuantMatrix::new(dtype, &row, 1, nb * BLOCK)
                .and_then(|m| m.dequantize_row(0, &mut w))
                .expect("decodes");
            for (i, (&qi, &wi)) in q.iter().zip(&w).enumerate() {
                want += qi as f64 * wi as f64 * inv[i / BLOCK] as f64;
            }
            for level in Simd::all_supported() {
                let mut got = [0f32; 3];
                let rows = [row.clone(), row.clone(), row.clone()].concat();
                dot_rows(level, dtype, &rows, a, &mut got);
                let got = got[2] as f64;
                assert!((got - want).abs() <= 1e-4 * want.abs().max(1.0), "{dtype} {level}: {got} vs {want}");
            }
        }
    }
}
