//! BITLINEAR's integer core: int8 activations × 2-bit ternary codes, summed exactly.
//!
//! Every kernel here returns *raw* sums `Σ c_i · q_i` of the 2-bit codes `c ∈ {0, 1, 2, 3}`
//! (trit `t = c − 1`) against the int8 activations; the caller subtracts `Σ q_i` over the
//! same elements to get `Σ t_i · q_i`. Codes are unsigned, which is what `vpmaddubsw`
//! multiplies (u8 × i8 → i16 pairs): `|c·q + c'·q'| ≤ 2·3·128 = 768`, so no pair saturates,
//! and the i16 lanes hold at most 32 such sums (24 576) before they are widened to i32.
//!
//! The layouts (memory's `quant::tq2_0` and `quant::i2_s`) both store, in each 32-byte
//! chunk, four runs of 32 consecutive elements at four bit offsets:
//!
//! ```text
//! chunk byte m (m < 32):  bits 1..0 | 3..2 | 5..4 | 7..6
//! TQ2_0 (chunk c of a block, elements 128c + ..):   m      32+m   64+m   96+m
//! I2_S  (block of 128 elements):                     96+m   64+m   32+m   m
//! ```
//!
//! so `(chunk >> 2j) & 3` is 32 consecutive codes: no shuffles. TQ1_0 (base 3) is unpacked
//! to one code per byte first ([`unpack_tq1_0_block`]) and goes through [`codes_dot`].

use purebee_isa::ops::{bitlinear_act_scale, bitlinear_quantize};

use super::SimdLevel;

/// Elements per 32-byte chunk of 2-bit codes.
pub const CHUNK_ELEMS: usize = 128;

/// The shift of the run of 32 elements `32g..32g+32` of a chunk, per layout.
pub const TQ2_0_SHIFTS: [u32; 4] = [0, 2, 4, 6];
/// See [`TQ2_0_SHIFTS`].
pub const I2_S_SHIFTS: [u32; 4] = [6, 4, 2, 0];

/// Quantizes one row as BITLINEAR specifies: returns `s` and fills `q`, and `sums[g]` with
/// `Σ q` over elements `128g .. 128g + 128` (`q.len()` is a multiple of 128 when `sums`
/// is not empty).
pub fn quantize_row(level: SimdLevel, x: &[f32], q: &mut [i8], sums: &mut [i32]) -> f32 {
    match level {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `SimdLevel::Avx2` is only chosen when the CPU supports AVX2/FMA/F16C.
        SimdLevel::Avx2 => unsafe { x86::quantize_row(x, q, sums) },
        _ => quantize_row_portable(x, q, sums),
    }
}

#[inline(always)]
fn quantize_row_portable(x: &[f32], q: &mut [i8], sums: &mut [i32]) -> f32 {
    let s = bitlinear_act_scale(x.iter().fold(0f32, |a, &v| a.max(v.abs())));
    for (qi, &xi) in q.iter_mut().zip(x) {
        *qi = bitlinear_quantize(xi, s);
    }
    for (sum, group) in sums.iter_mut().zip(q.chunks_exact(CHUNK_ELEMS)) {
        *sum = group.iter().map(|&v| v as i32).sum();
    }
    s
}

/// Raw `Σ c·q` of consecutive 32-byte chunks of 2-bit codes (`chunks.len() = 32·n`)
/// against `q` (`128·n` activations), the chunk's runs at `shifts`.
pub fn packed_dot(level: SimdLevel, chunks: &[u8], shifts: &[u32; 4], q: &[i8]) -> i32 {
    match level {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `quantize_row`.
        SimdLevel::Avx2 => unsafe { x86::packed_dot(chunks, shifts, q) },
        _ => packed_dot_portable(chunks, shifts, q),
    }
}

fn packed_dot_portable(chunks: &[u8], shifts: &[u32; 4], q: &[i8]) -> i32 {
    let mut sum = 0i32;
    for (chunk, qc) in chunks.chunks_exact(32).zip(q.chunks_exact(CHUNK_ELEMS)) {
        for (g, &shift) in shifts.iter().enumerate() {
            let run = &qc[32 * g..32 * g + 32];
            sum += chunk.iter().zip(run).map(|(&b, &qi)| ((b >> shift) & 3) as i32 * qi as i32).sum::<i32>();
        }
    }
    sum
}

/// One TQ2_0 row's `Σ_b d_b · (Σ_{i∈b} c_i·q_i − qsums[b])` (BITLINEAR's `y · s`), the
/// products exact in f64 and added in block order starting from `Iterator::sum`'s zero:
/// bit for bit the reference engine's sum.
pub fn tq2_0_row_sum(level: SimdLevel, row: &[u8], q: &[i8], qsums: &[i32]) -> f64 {
    match level {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `quantize_row`.
        SimdLevel::Avx2 => unsafe { x86::tq2_0_row_sum(row, q, qsums) },
        _ => {
            let zero: f64 = std::iter::empty::<f64>().sum();
            qsums.iter().enumerate().fold(zero, |y, (b, &qsum)| {
                let raw = packed_dot_portable(&row[66 * b..66 * b + 64], &TQ2_0_SHIFTS, &q[256 * b..256 * b + 256]);
                let d = super::linear::f16_to_f32(u16::from_le_bytes([row[66 * b + 64], row[66 * b + 65]]));
                y + d as f64 * (raw - qsum) as f64
            })
        }
    }
}

/// A 2-row × 4-token tile of BITLINEAR sums over whole rows of codes (one per byte):
/// `out[4r + t] = Σ_b d[r][b] · (Σ_{i∈b} c_ri·q_ti − qsums[b][t])`, with blocks of `block`
/// elements (a multiple of 128), the f64 products exact and added in block order from
/// `Iterator::sum`'s zero (the reference's bits). Every load is shared by four or two
/// products (prefill's weight-stationary kernel).
pub fn tile_2x4(
    level: SimdLevel,
    c: [&[u8]; 2],
    q: [&[i8]; 4],
    block: usize,
    d: [&[f64]; 2],
    qsums: &[[i32; 4]],
) -> [f64; 8] {
    match level {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `quantize_row`.
        SimdLevel::Avx2 => unsafe { x86::tile_2x4(c, q, block, d, qsums) },
        _ => {
            let mut out = [std::iter::empty::<f64>().sum(); 8];
            for (b, qs) in qsums.iter().enumerate() {
                let at = b * block..(b + 1) * block;
                for (lane, y) in out.iter_mut().enumerate() {
                    let (r, t) = (lane / 4, lane % 4);
                    let raw: i32 =
                        c[r][at.clone()].iter().zip(&q[t][at.clone()]).map(|(&a, &b)| a as i32 * b as i32).sum();
                    *y += d[r][b] * (raw - qs[t]) as f64;
                }
            }
            out
        }
    }
}

/// Raw `Σ c·q` of codes stored one per byte (`codes.len() = q.len()`, a multiple of 32).
pub fn codes_dot(level: SimdLevel, codes: &[u8], q: &[i8]) -> i32 {
    match level {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `quantize_row`.
        SimdLevel::Avx2 => unsafe { x86::codes_dot(codes, q) },
        _ => codes.iter().zip(q).map(|(&c, &qi)| c as i32 * qi as i32).sum(),
    }
}

/// Unpacks 32-byte chunks of 2-bit codes (runs at `shifts`) to one code per byte.
pub fn unpack_chunks(chunks: &[u8], shifts: &[u32; 4], codes: &mut [u8]) {
    for (chunk, out) in chunks.chunks_exact(32).zip(codes.chunks_exact_mut(CHUNK_ELEMS)) {
        for (g, &shift) in shifts.iter().enumerate() {
            for (o, &b) in out[32 * g..32 * g + 32].iter_mut().zip(chunk) {
                *o = (b >> shift) & 3;
            }
        }
    }
}

/// The codes of the 256 elements of a TQ1_0 block (its first 52 bytes: `qs` and `qh`),
/// one per byte, through a table of each byte's five base-3 digits (memory's `tq1_0`
/// gives the layout and the digit extraction this table precomputes).
pub fn unpack_tq1_0_block(block: &[u8], codes: &mut [u8; 256]) {
    let table = tq1_0_digits();
    // qs[0..32]: digit n of byte m is element m + 32n.
    for m in 0..32 {
        let d = &table[block[m] as usize];
        for n in 0..5 {
            codes[m + 32 * n] = d[n];
        }
    }
    // qs[32..48]: digit n of byte 32 + m is element 160 + m + 16n.
    for m in 0..16 {
        let d = &table[block[32 + m] as usize];
        for n in 0..5 {
            codes[160 + m + 16 * n] = d[n];
        }
    }
    // qh[0..4]: digit n (< 4) of byte 48 + j is element 240 + j + 4n.
    for j in 0..4 {
        let d = &table[block[48 + j] as usize];
        for n in 0..4 {
            codes[240 + j + 4 * n] = d[n];
        }
    }
}

/// The five base-3 digits of every byte, as TQ1_0 extracts them.
fn tq1_0_digits() -> &'static [[u8; 5]; 256] {
    static TABLE: std::sync::OnceLock<[[u8; 5]; 256]> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = [[0u8; 5]; 256];
        for (q, digits) in t.iter_mut().enumerate() {
            for (n, d) in digits.iter_mut().enumerate() {
                *d = purebee_memory::quant::tq1_0::digit(q as u8, n);
            }
        }
        t
    })
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::CHUNK_ELEMS;

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn quantize_row(x: &[f32], q: &mut [i8], sums: &mut [i32]) -> f32 {
        // The portable body, compiled with AVX2 (vectorized max, vroundps, packs).
        super::quantize_row_portable(x, q, sums)
    }

    /// Horizontal sum of eight i32 lanes.
    #[target_feature(enable = "avx2")]
    fn hsum_i32(v: __m256i) -> i32 {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
        _mm_cvtsi128_si32(s)
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
                // SAFETY: chunk c is bytes 32c..32c+32 of `chunks` and its activations are
                // 128c..128c+128 of `q`; c < n keeps both inside their slices.
                let (v, qp) = unsafe {
                    (_mm256_loadu_si256(chunks.as_ptr().add(32 * c).cast()), q.as_ptr().add(CHUNK_ELEMS * c))
                };
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

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn tile_2x4(c: [&[u8]; 2], q: [&[i8]; 4], block: usize, d: [&[f64]; 2], qsums: &[[i32; 4]]) -> [f64; 8] {
        let blocks = qsums.len();
        let need = blocks * block;
        assert!(block % CHUNK_ELEMS == 0 && c.iter().all(|s| s.len() >= need) && q.iter().all(|s| s.len() >= need));
        assert!(d.iter().all(|s| s.len() >= blocks));
        let ones = _mm256_set1_epi16(1);
        let zero: f64 = std::iter::empty::<f64>().sum();
        let mut y = [_mm256_set1_pd(zero); 2]; // row r: tokens 0..4
        for (b, qs) in qsums.iter().enumerate() {
            let mut acc = [_mm256_setzero_si256(); 8];
            let steps = block / 32;
            for seg in (0..steps).step_by(32) {
                // Up to 32 steps of at most 768 per i16 lane (24 576), then widened.
                let mut acc16 = [_mm256_setzero_si256(); 8];
                for step in seg..(seg + 32).min(steps) {
                    let i = b * block + 32 * step;
                    // SAFETY: i + 32 ≤ blocks · block ≤ every slice's length (asserted).
                    let (c0, c1) = unsafe {
                        (
                            _mm256_loadu_si256(c[0].as_ptr().add(i).cast()),
                            _mm256_loadu_si256(c[1].as_ptr().add(i).cast()),
                        )
                    };
                    for t in 0..4 {
                        // SAFETY: as above.
                        let qv = unsafe { _mm256_loadu_si256(q[t].as_ptr().add(i).cast()) };
                        acc16[t] = _mm256_add_epi16(acc16[t], _mm256_maddubs_epi16(c0, qv));
                        acc16[4 + t] = _mm256_add_epi16(acc16[4 + t], _mm256_maddubs_epi16(c1, qv));
                    }
                }
                for (a, a16) in acc.iter_mut().zip(acc16) {
                    *a = _mm256_add_epi32(*a, _mm256_madd_epi16(a16, ones));
                }
            }
            // Eight vectors to eight sums: a tree of horizontal adds, then the two halves.
            let h0 = _mm256_hadd_epi32(_mm256_hadd_epi32(acc[0], acc[1]), _mm256_hadd_epi32(acc[2], acc[3]));
            let h1 = _mm256_hadd_epi32(_mm256_hadd_epi32(acc[4], acc[5]), _mm256_hadd_epi32(acc[6], acc[7]));
            // SAFETY: `qs` holds four i32.
            let qv = unsafe { _mm_loadu_si128(qs.as_ptr().cast()) };
            for (r, h) in [h0, h1].into_iter().enumerate() {
                let raw = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
                let isum = _mm256_cvtepi32_pd(_mm_sub_epi32(raw, qv));
                // d (an f16's 11 bits, or I2_S's f32) × isum (< 2^29) is exact in f64; one
                // add per lane per block keeps each lane's sum in block order.
                y[r] = _mm256_add_pd(y[r], _mm256_mul_pd(_mm256_set1_pd(d[r][b]), isum));
            }
        }
        let mut out = [0f64; 8];
        // SAFETY: `out` holds eight f64: two stores of four.
        unsafe {
            _mm256_storeu_pd(out.as_mut_ptr(), y[0]);
            _mm256_storeu_pd(out.as_mut_ptr().add(4), y[1]);
        }
        out
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

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn tq2_0_row_sum(row: &[u8], q: &[i8], qsums: &[i32]) -> f64 {
        let n = qsums.len();
        let block = |b: usize| tq2_0_block(&row[66 * b..66 * b + 64], &q[256 * b..256 * b + 256]);
        let d_bits = |b: usize| u16::from_le_bytes([row[66 * b + 64], row[66 * b + 65]]) as i64;
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
            let d = super::super::linear::f16_to_f32(d_bits(b) as u16);
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn levels() -> impl Iterator<Item = SimdLevel> {
        SimdLevel::ALL.into_iter().filter(|l| l.is_supported())
    }

    #[test]
    fn packed_and_unpacked_dots_agree_on_every_level() {
        let mut seed = 0x1234_5678u64;
        let mut next = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as u32
        };
        for n_chunks in [1usize, 3, 9, 17, 21] {
            let chunks: Vec<u8> = (0..32 * n_chunks).map(|_| next() as u8).collect();
            let q: Vec<i8> = (0..128 * n_chunks).map(|i| if i % 7 == 0 { -128 } else { next() as i8 }).collect();
            for shifts in [&TQ2_0_SHIFTS, &I2_S_SHIFTS] {
                let mut codes = vec![0u8; 128 * n_chunks];
                unpack_chunks(&chunks, shifts, &mut codes);
                let want: i32 = codes.iter().zip(&q).map(|(&c, &qi)| c as i32 * qi as i32).sum();
                for level in levels() {
                    if shifts == &TQ2_0_SHIFTS && n_chunks % 2 == 1 {
                        // As TQ2_0 blocks: 64 bytes of codes and 2 of scale each.
                        let blocks = n_chunks / 2 + 1;
                        let mut row = vec![0u8; 66 * blocks];
                        let mut qq = vec![0i8; 256 * blocks];
                        qq[..q.len()].copy_from_slice(&q);
                        for b in 0..blocks {
                            let c = (64 * b..64 * b + 64).map(|i| chunks.get(i).copied().unwrap_or(0x55));
                            row[66 * b..66 * b + 64].iter_mut().zip(c).for_each(|(d, s)| *d = s);
                            // A scale d = ±(0.5 + b/64) as f16 bits.
                            let d = half::f16::from_f32(if b % 2 == 0 { 0.5 } else { -0.5 } * (1.0 + b as f32 / 64.0));
                            row[66 * b + 64..66 * b + 66].copy_from_slice(&d.to_bits().to_le_bytes());
                        }
                        let qsums: Vec<i32> = qq.chunks_exact(256).map(|b| b.iter().map(|&v| v as i32).sum()).collect();
                        // The reference engine's sum: trits from memory's decoder, i64 sums,
                        // f64 products added in block order.
                        let m = purebee_memory::quant::QuantMatrix::new(
                            purebee_memory::DType::TQ2_0,
                            &row,
                            1,
                            256 * blocks,
                        )
                        .expect("one row");
                        let (mut trits, mut d) = (vec![0i8; 256 * blocks], vec![0f32; blocks]);
                        m.ternary_row(0, &mut trits, &mut d).expect("ternary");
                        let want: f64 = d
                            .iter()
                            .enumerate()
                            .map(|(b, &db)| {
                                let isum: i64 =
                                    (0..256).map(|e| trits[256 * b + e] as i64 * qq[256 * b + e] as i64).sum();
                                db as f64 * isum as f64
                            })
                            .sum();
                        let got = tq2_0_row_sum(level, &row, &qq, &qsums);
                        assert_eq!(
                            got.to_bits(),
                            want.to_bits(),
                            "{level} TQ2_0 row of {blocks} blocks: {got} vs {want}"
                        );
                    }
                    assert_eq!(packed_dot(level, &chunks, shifts, &q), want, "{level} packed, {n_chunks} chunks");
                    assert_eq!(codes_dot(level, &codes, &q), want, "{level} codes, {n_chunks} chunks");
                    // Rows: the codes and a shifted copy; tokens: q and three rotations;
                    // blocks of 128 with scales (b + 1 + r)/8 and arbitrary subtrahends.
                    let c1: Vec<u8> = codes.iter().map(|&c| (c + 1) & 3).collect();
                    let qs: Vec<Vec<i8>> =
                        (0..4).map(|t| q.iter().cycle().skip(t * 5).take(q.len()).copied().collect()).collect();
                    let d: Vec<Vec<f64>> =
                        (0..2).map(|r| (0..n_chunks).map(|b| (b + 1 + r) as f64 / 8.0).collect()).collect();
                    let sub: Vec<[i32; 4]> = (0..n_chunks).map(|b| [b as i32, -3, 7 * b as i32, 1]).collect();
                    let got =
                        tile_2x4(level, [&codes, &c1], [&qs[0], &qs[1], &qs[2], &qs[3]], 128, [&d[0], &d[1]], &sub);
                    for (r, cr) in [&codes, &c1].iter().enumerate() {
                        for (tok, qt) in qs.iter().enumerate() {
                            let want: f64 = (0..n_chunks)
                                .map(|b| {
                                    let at = 128 * b..128 * b + 128;
                                    let raw: i64 =
                                        cr[at.clone()].iter().zip(&qt[at]).map(|(&a, &b)| a as i64 * b as i64).sum();
                                    d[r][b] * (raw - sub[b][tok] as i64) as f64
                                })
                                .sum();
                            let g = got[4 * r + tok];
                            assert_eq!(g.to_bits(), want.to_bits(), "{level} 2x4 row {r} token {tok}: {g} vs {want}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn quantize_row_matches_the_isa_on_every_level() {
        let x: Vec<f32> = (0..256).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.173).collect();
        let mut want_q = vec![0i8; 256];
        let want_s = bitlinear_act_scale(x.iter().fold(0f32, |a, &v| a.max(v.abs())));
        for (q, &v) in want_q.iter_mut().zip(&x) {
            *q = bitlinear_quantize(v, want_s);
        }
        for level in levels() {
            let (mut q, mut sums) = (vec![0i8; 256], vec![0i32; 2]);
            let s = quantize_row(level, &x, &mut q, &mut sums);
            assert_eq!((s.to_bits(), &q), (want_s.to_bits(), &want_q), "{level}");
            assert_eq!(sums[1], want_q[128..].iter().map(|&v| v as i32).sum::<i32>());
        }
    }
}
