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

use super::linear::f16_to_f32;
use super::SimdLevel;

/// Elements per activation block (`purebee_isa::ops::LINEAR_ACT_BLOCK`).
pub const BLOCK: usize = 32;

/// The weight dtypes these kernels read.
pub fn supports(dtype: DType) -> bool {
    matches!(dtype, DType::Q4_0 | DType::Q4_1 | DType::Q8_0)
}

/// One row of int8-block activations: `q` (a whole number of blocks), and per block
/// `1 / s_b` and `Σ q_i`.
#[derive(Clone, Copy)]
pub struct Int8Row<'a> {
    /// The codes, `BLOCK · inv_scale.len()` of them.
    pub q: &'a [i8],
    /// `1 / s_b` per block.
    pub inv_scale: &'a [f32],
    /// `Σ_{i∈b} q_i` per block (exact in f32: at most 32 · 127 in magnitude).
    pub sum: &'a [f32],
}

/// `out[j] = Σ_b (Σ_{i∈b} q_i · w_ji) / s_b` for `out.len()` consecutive weight rows `rows`
/// (their bytes) of a [`supports`] dtype against `a` (as many elements as a row).
pub fn dot_rows(level: SimdLevel, dtype: DType, rows: &[u8], a: Int8Row, out: &mut [f32]) {
    match level {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `SimdLevel::Avx2` is only chosen when the CPU supports AVX2/FMA/F16C.
        SimdLevel::Avx2 => unsafe { x86::dot_rows(dtype, rows, a, out) },
        // NEON has no kernel of its own yet: the portable one, which the compiler vectorizes
        // for NEON's baseline.
        _ => {
            let row_bytes = a.inv_scale.len() * block_bytes(dtype);
            for (y, row) in out.iter_mut().zip(rows.chunks_exact(row_bytes.max(1))) {
                *y = dot_row_portable(dtype, row, a);
            }
        }
    }
}

/// Rounds one row `x` to int8 blocks (`purebee_isa::ops::quantize_blocks`, the rule written
/// once): `q` (`x.len()` codes) and the scale `s_b` of each block.
pub fn quantize_row(level: SimdLevel, x: &[f32], q: &mut [i8], scales: &mut [f32]) {
    match level {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `SimdLevel::Avx2` is only chosen when the CPU supports AVX2/FMA/F16C.
        SimdLevel::Avx2 => unsafe { x86::quantize_row(x, q, scales) },
        _ => purebee_isa::ops::quantize_blocks(x, q, scales),
    }
}

/// Bytes per block of a [`supports`] dtype.
fn block_bytes(dtype: DType) -> usize {
    match dtype {
        DType::Q8_0 => 34,
        DType::Q4_0 => 18,
        _ => 20,
    }
}

fn dot_row_portable(dtype: DType, row: &[u8], a: Int8Row) -> f32 {
    let blocks = row.chunks_exact(block_bytes(dtype)).zip(a.q.chunks_exact(BLOCK));
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

    use super::super::linear::x86::hsum;
    use super::{block_bytes, Int8Row, BLOCK};

    /// The weight layouts, as const parameters (one compiled loop each, no dtype branch per
    /// block).
    const Q8_0: u8 = 0;
    const Q4_0: u8 = 1;
    const Q4_1: u8 = 2;

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn dot_rows(dtype: DType, rows: &[u8], a: Int8Row, out: &mut [f32]) {
        match dtype {
            DType::Q8_0 => dot_rows_of::<Q8_0>(rows, a, out),
            DType::Q4_0 => dot_rows_of::<Q4_0>(rows, a, out),
            _ => dot_rows_of::<Q4_1>(rows, a, out),
        }
    }

    /// The ISA's rule compiled for AVX2: its rounding is one `vroundss`, not a call to
    /// `rintf` (the baseline x86_64 target has no rounding instruction).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn quantize_row(x: &[f32], q: &mut [i8], scales: &mut [f32]) {
        purebee_isa::ops::quantize_blocks(x, q, scales)
    }

    /// Two rows at a time against `a` (each activation block loaded once for both; the two
    /// rows are two independent FMA chains); an odd last row is paired with itself. Per
    /// block and row: the eight partial sums `Σ c q` (exact i32, then f32) times `d / s_b`
    /// into a vector total, and the constant term (Q4_0's `−8 · d · Σq / s_b`, Q4_1's
    /// `m · Σq / s_b`) into a scalar one.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn dot_rows_of<const KIND: u8>(rows: &[u8], a: Int8Row, out: &mut [f32]) {
        let dtype = match KIND {
            Q8_0 => DType::Q8_0,
            Q4_0 => DType::Q4_0,
            _ => DType::Q4_1,
        };
        let bb = block_bytes(dtype);
        let nb = a.inv_scale.len();
        let m = out.len();
        assert!(rows.len() >= m * nb * bb && a.q.len() >= nb * BLOCK && a.sum.len() >= nb);
        let (w, q) = (rows.as_ptr(), a.q.as_ptr());
        let ones = _mm256_set1_epi16(1);
        let nibble = _mm_set1_epi8(15);
        // One row's block at `b` against the activation block `qv` (scale `inv`, sum `qsum`).
        let block = |b: *const u8, qv: __m256i, inv: __m128, qsum: __m128| {
            // d and the next f16 (Q4_1's m) widened together from one 4-byte load (a full
            // register write: no wait on earlier work), over s_b.
            // SAFETY: `b` starts a block of `bb` ≥ 18 bytes inside `rows` (see the caller).
            let dm = _mm_mul_ps(unsafe { _mm_cvtph_ps(_mm_loadu_si32(b)) }, inv);
            let (u, s) = match KIND {
                Q8_0 => {
                    // SAFETY: a Q8_0 block's 32 codes are its bytes 2..34.
                    let c = unsafe { _mm256_loadu_si256(b.add(2).cast()) };
                    // |c| as unsigned (−128 gives 128) times q carrying c's sign: with
                    // |q| ≤ 127 a pair's sum, ≤ 2 · 128 · 127, cannot saturate vpmaddubsw.
                    (_mm256_sign_epi8(c, c), _mm256_sign_epi8(qv, c))
                }
                _ => {
                    // SAFETY: a Q4 block's 16 code bytes end with the block (bb − 16..bb).
                    let v = unsafe { _mm_loadu_si128(b.add(bb - 16).cast()) };
                    let lo_hi = _mm256_set_m128i(_mm_srli_epi16::<4>(v), v);
                    (_mm256_and_si256(lo_hi, _mm256_set_m128i(nibble, nibble)), qv)
                }
            };
            let sums = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(u, s), ones));
            let constant = match KIND {
                Q4_0 => _mm_mul_ss(_mm_mul_ss(dm, _mm_set_ss(-8.0)), qsum),
                Q4_1 => _mm_mul_ss(_mm_movehdup_ps(dm), qsum),
                _ => _mm_setzero_ps(),
            };
            (sums, _mm256_broadcastss_ps(dm), constant)
        };
        for j in (0..m).step_by(2) {
            let j1 = (j + 1).min(m - 1);
            // SAFETY: rows j, j1 < m lie inside `rows` (asserted above).
            let (r0, r1) = unsafe { (w.add(j * nb * bb), w.add(j1 * nb * bb)) };
            let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            let (mut c0, mut c1) = (_mm_setzero_ps(), _mm_setzero_ps());
            for i in 0..nb {
                // SAFETY: block i < nb of a row lies inside it, and its 32 codes inside
                // `a.q` (asserted above); unaligned loads.
                let (b0, b1, qv) =
                    unsafe { (r0.add(i * bb), r1.add(i * bb), _mm256_loadu_si256(q.add(i * BLOCK).cast())) };
                let (inv, qsum) = (_mm_set1_ps(a.inv_scale[i]), _mm_set_ss(a.sum[i]));
                let (s, d, c) = block(b0, qv, inv, qsum);
                acc0 = _mm256_fmadd_ps(s, d, acc0);
                c0 = _mm_add_ss(c0, c);
                let (s, d, c) = block(b1, qv, inv, qsum);
                acc1 = _mm256_fmadd_ps(s, d, acc1);
                c1 = _mm_add_ss(c1, c);
            }
            out[j] = hsum(acc0) + _mm_cvtss_f32(c0);
            if j1 > j {
                out[j1] = hsum(acc1) + _mm_cvtss_f32(c1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            let bb = block_bytes(dtype);
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
            let a = Int8Row { q: &q, inv_scale: &inv, sum: &sum };
            let mut want = 0f64;
            let mut w = vec![0f32; nb * BLOCK];
            purebee_memory::quant::QuantMatrix::new(dtype, &row, 1, nb * BLOCK)
                .and_then(|m| m.dequantize_row(0, &mut w))
                .expect("decodes");
            for (i, (&qi, &wi)) in q.iter().zip(&w).enumerate() {
                want += qi as f64 * wi as f64 * inv[i / BLOCK] as f64;
            }
            for level in SimdLevel::ALL.into_iter().filter(|l| l.is_supported()) {
                let mut got = [0f32; 3];
                let rows = [row.clone(), row.clone(), row.clone()].concat();
                dot_rows(level, dtype, &rows, a, &mut got);
                let got = got[2] as f64;
                assert!((got - want).abs() <= 1e-4 * want.abs().max(1.0), "{dtype} {level}: {got} vs {want}");
            }
        }
    }
}
