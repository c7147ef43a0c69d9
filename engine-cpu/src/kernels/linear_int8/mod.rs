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
//! `avx2`, `avx512` (AVX-512 VNNI) and `neon`.

use purebee_memory::DType;

use super::f16::f16_to_f32;
use super::Simd;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use super::SimdLevel;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod layout;
#[cfg(target_arch = "aarch64")]
mod neon;
#[cfg(test)]
mod tests;

pub use layout::{pair_layout, pair_layout_len, quad_layout, quad_layout_len, Int8Row, Int8RowBuf, BLOCK};

/// The weight dtypes these kernels read.
pub fn supports(dtype: DType) -> bool {
    matches!(dtype, DType::Q4_0 | DType::Q4_1 | DType::Q8_0)
}

/// `out[j] = Σ_b (Σ_{i∈b} q_i · w_ji) / s_b` for `out.len()` consecutive weight rows `rows`
/// (their bytes) of a [`supports`] dtype against `a` (as many elements as a row).
pub fn dot_rows(level: Simd, dtype: DType, rows: &[u8], a: Int8Row, out: &mut [f32]) {
    dot_rows_tokens(level, dtype, rows, &[a], out)
}

/// The most tokens [`dot_rows_tokens`] takes at once.
pub const MAX_TOKENS: usize = 4;

/// [`dot_rows`] for 1 to [`MAX_TOKENS`] tokens `a` at once, `out` token-major
/// (`[a.len(), rows]`): each weight block is read and unpacked once for all of them, and
/// each token's outputs are the bits [`dot_rows`] gives it alone.
pub fn dot_rows_tokens(level: Simd, dtype: DType, rows: &[u8], a: &[Int8Row], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        let avx512 = match level.get() {
            SimdLevel::Avx512Vnni => true,
            SimdLevel::Avx2 => false,
            _ => return per_token(level, dtype, rows, a, out),
        };
        match *a {
            [a0] => x86_tokens(avx512, dtype, rows, [a0], out),
            [a0, a1] => x86_tokens(avx512, dtype, rows, [a0, a1], out),
            [a0, a1, a2] => x86_tokens(avx512, dtype, rows, [a0, a1, a2], out),
            [a0, a1, a2, a3] => x86_tokens(avx512, dtype, rows, [a0, a1, a2, a3], out),
            _ => per_token(level, dtype, rows, a, out),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    per_token(level, dtype, rows, a, out)
}

/// `T` tokens on an x86 level: the AVX-512 kernels, else the AVX2 ones.
#[cfg(target_arch = "x86_64")]
fn x86_tokens<const T: usize>(avx512: bool, dtype: DType, rows: &[u8], a: [Int8Row; T], out: &mut [f32]) {
    match (avx512, dtype) {
        // SAFETY: a `Simd` of level `Avx512Vnni` exists only where the CPU has AVX-512 VNNI
        // (and AVX2/FMA/F16C).
        (true, DType::Q4_0) => unsafe { avx512::dot_rows_q4::<{ avx512::Q4_0 }, T>(rows, a, out) },
        // SAFETY: as above.
        (true, DType::Q4_1) => unsafe { avx512::dot_rows_q4::<{ avx512::Q4_1 }, T>(rows, a, out) },
        // SAFETY: as above.
        (true, DType::Q8_0) => unsafe { avx512::dot_rows_q8_0::<T>(rows, a, out) },
        // SAFETY: a `Simd` of level `Avx2` or `Avx512Vnni` exists only where the CPU has AVX2/FMA/F16C.
        _ => unsafe { avx2::dot_rows_tokens::<T>(dtype, rows, a, out) },
    }
}

/// Each token alone, on the levels without a several-token kernel.
fn per_token(level: Simd, dtype: DType, rows: &[u8], a: &[Int8Row], out: &mut [f32]) {
    let m = out.len() / a.len().max(1);
    for (t, o) in a.iter().zip(out.chunks_exact_mut(m.max(1))) {
        match level.get() {
            #[cfg(target_arch = "aarch64")]
            // SAFETY: a `Simd` of level `Neon` or `NeonDot` exists only where the CPU has NEON (and dotprod).
            SimdLevel::Neon | SimdLevel::NeonDot => unsafe { neon::dot_rows(level, dtype, rows, *t, o) },
            _ => {
                let row_bytes = t.inv_scale.len() * dtype.block_bytes();
                for (y, row) in o.iter_mut().zip(rows.chunks_exact(row_bytes.max(1))) {
                    *y = dot_row_portable(dtype, row, *t);
                }
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
