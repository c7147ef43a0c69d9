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
//!
//! The activations' layouts, which every level reads, are in `layout`; the kernels in
//! `avx2` (AVX2, for the AVX-512 level too) and `neon`.

use purebee_memory::DType;

use super::f16::f16_to_f32;
use super::Simd;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use super::SimdLevel;

#[cfg(target_arch = "x86_64")]
mod avx2;
mod layout;
#[cfg(target_arch = "aarch64")]
mod neon;
#[cfg(test)]
mod tests;

pub use layout::{pair_layout, pair_layout_len, Int8Row, BLOCK};

/// The weight dtypes these kernels read.
pub fn supports(dtype: DType) -> bool {
    matches!(dtype, DType::Q4_0 | DType::Q4_1 | DType::Q8_0)
}

/// `out[j] = Σ_b (Σ_{i∈b} q_i · w_ji) / s_b` for `out.len()` consecutive weight rows `rows`
/// (their bytes) of a [`supports`] dtype against `a` (as many elements as a row).
pub fn dot_rows(level: Simd, dtype: DType, rows: &[u8], a: Int8Row, out: &mut [f32]) {
    match level.get() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Simd` of level `Avx2` or `Avx512Vnni` exists only where the CPU has AVX2/FMA/F16C.
        SimdLevel::Avx2 | SimdLevel::Avx512Vnni => unsafe { avx2::dot_rows(dtype, rows, a, out) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: a `Simd` of level `Neon` or `NeonDot` exists only where the CPU has NEON (and dotprod).
        SimdLevel::Neon | SimdLevel::NeonDot => unsafe { neon::dot_rows(level, dtype, rows, a, out) },
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
        SimdLevel::Avx2 | SimdLevel::Avx512Vnni => unsafe { avx2::quantize_row(x, q, scales) },
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
