//! BITLINEAR's integer core: int8 activations × 2-bit ternary codes, summed exactly.
//!
//! Every kernel here returns *raw* sums `Σ c_i · q_i` of the 2-bit codes `c ∈ {0, 1, 2, 3}`
//! (trit `t = c − 1`) against the int8 activations; the caller subtracts `Σ q_i` over the
//! same elements to get `Σ t_i · q_i`. Codes are unsigned, which is what `vpmaddubsw`
//! multiplies (u8 × i8 → i16 pairs): `|c·q + c'·q'| ≤ 2·3·128 = 768`, so no pair saturates,
//! and the i16 lanes hold at most 32 such sums (24 576) before they are widened to i32.
//!
//! The dispatchers and the portable kernels are here; each SIMD level has its own file
//! (`avx2`, `avx512`, `neon`), and what the levels share is in `layout` (the 2-bit layouts
//! and the prefill tile's types), `row_pairs` (how the x86 decode kernels run through
//! rows) and `uniform` (the one-scale shortcut). TQ1_0 (base 3) is unpacked to one code per
//! byte first ([`unpack_tq1_0_block`]) and goes through [`codes_dot`]; [`tokens`] sums a few
//! tokens at once.

use std::ops::Range;

use purebee_isa::ops::{bitlinear_act_scale, bitlinear_quantize};

use super::f16::f16_to_f32;
use super::Simd;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use super::SimdLevel;
use layout::{for_each_tile, group_sums};

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod layout;
#[cfg(target_arch = "aarch64")]
mod neon;
#[cfg(target_arch = "x86_64")]
mod row_pairs;
#[cfg(test)]
mod tests;
pub mod tokens;
mod uniform;

pub use layout::{RowPair, TileSums, CHUNK_ELEMS, I2_S_SHIFTS, TQ2_0_SHIFTS};
pub use uniform::uniform_scale;

/// Quantizes one row as BITLINEAR specifies: returns `s` and fills `q`, and `sums[g]` with
/// `Σ q` over elements `128g .. 128g + 128` (`q.len()` is a multiple of 128 when `sums`
/// is not empty).
pub fn quantize_row(level: Simd, x: &[f32], q: &mut [i8], sums: &mut [i32]) -> f32 {
    match level.get() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Simd` of level `Avx2` or `Avx512Vnni` exists only where the CPU has AVX2/FMA/F16C.
        SimdLevel::Avx2 | SimdLevel::Avx512Vnni => unsafe { avx2::quantize_row(x, q, sums) },
        _ => quantize_row_portable(x, q, sums),
    }
}

fn quantize_row_portable(x: &[f32], q: &mut [i8], sums: &mut [i32]) -> f32 {
    let s = bitlinear_act_scale(x.iter().fold(0f32, |a, &v| a.max(v.abs())));
    for (qi, &xi) in q.iter_mut().zip(x) {
        *qi = bitlinear_quantize(xi, s);
    }
    group_sums(q, sums);
    s
}

/// Raw `Σ c·q` of consecutive 32-byte chunks of 2-bit codes (`chunks.len() = 32·n`)
/// against `q` (`128·n` activations), the chunk's runs at `shifts`.
pub fn packed_dot(level: Simd, chunks: &[u8], shifts: &[u32; 4], q: &[i8]) -> i32 {
    match level.get() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `quantize_row`.
        SimdLevel::Avx2 => unsafe { avx2::packed_dot(chunks, shifts, q) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Simd` of level `Avx512Vnni` exists only where the CPU has AVX-512 F, BW and VNNI.
        SimdLevel::Avx512Vnni => unsafe { avx512::packed_dot(chunks, shifts, q) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: a `Simd` of level `Neon` or `NeonDot` exists only where the CPU has NEON (and dotprod).
        SimdLevel::Neon | SimdLevel::NeonDot => unsafe { neon::packed_dot(level, chunks, shifts, q) },
        _ => packed_dot_portable(chunks, shifts, q),
    }
}

/// [`packed_dot`] of each of consecutive rows against the same activations: `out[i]` is
/// row i's, the chunks `rows[i·row_bytes .. (i+1)·row_bytes]`. The x86 levels sum the rows
/// two at a time in one call, as [`tq2_0_rows_sum`] does.
pub fn packed_dot_rows(level: Simd, rows: &[u8], row_bytes: usize, shifts: &[u32; 4], q: &[i8], out: &mut [i32]) {
    assert!(rows.len() >= out.len() * row_bytes, "packed_dot_rows: fewer rows than sums");
    match level.get() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `quantize_row`.
        SimdLevel::Avx2 => unsafe { avx2::packed_dot_rows(rows, row_bytes, shifts, q, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Simd` of level `Avx512Vnni` exists only where the CPU has AVX-512 F, BW and VNNI.
        SimdLevel::Avx512Vnni => unsafe { avx512::packed_dot_rows(rows, row_bytes, shifts, q, out) },
        _ => {
            for (i, y) in out.iter_mut().enumerate() {
                *y = packed_dot(level, &rows[i * row_bytes..(i + 1) * row_bytes], shifts, q);
            }
        }
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
pub fn tq2_0_row_sum(level: Simd, row: &[u8], q: &[i8], qsums: &[i32]) -> f64 {
    match level.get() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `quantize_row`.
        SimdLevel::Avx2 => unsafe { avx2::tq2_0_row_sum(row, q, qsums) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Simd` of level `Avx512Vnni` exists only where the CPU has AVX-512 F, BW and VNNI.
        SimdLevel::Avx512Vnni => unsafe { avx512::tq2_0_row_sum(row, q, qsums) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: a `Simd` of level `Neon` or `NeonDot` exists only where the CPU has NEON (and dotprod).
        SimdLevel::Neon | SimdLevel::NeonDot => unsafe { neon::tq2_0_row_sum(level, row, q, qsums) },
        _ => {
            let zero: f64 = std::iter::empty::<f64>().sum();
            qsums.iter().enumerate().fold(zero, |y, (b, &qsum)| {
                let raw = packed_dot_portable(&row[66 * b..66 * b + 64], &TQ2_0_SHIFTS, &q[256 * b..256 * b + 256]);
                let d = f16_to_f32(u16::from_le_bytes([row[66 * b + 64], row[66 * b + 65]]));
                y + d as f64 * (raw - qsum) as f64
            })
        }
    }
}

/// [`tq2_0_row_sum`] of each of consecutive rows against the same activations: `out[i]` is
/// row i's, `rows[i·row_bytes .. (i+1)·row_bytes]`, the same bits as one call per row.
///
/// The x86 levels sum the rows two at a time (each activation loaded once for both, the
/// pair prefetched as one stream; rows whose blocks do not all
/// share one scale go one at a time), and the whole run in one call, so the pair kernel
/// inlines into the loop. Measured with `kernel_speed` on a Zen 4, AVX-512 VNNI, one
/// thread, rows of 2560 in cache: 3.1 ns per 256 weights one row per call, 2.6 a pair per
/// call, 2.3 a run per call.
pub fn tq2_0_rows_sum(level: Simd, rows: &[u8], row_bytes: usize, q: &[i8], qsums: &[i32], out: &mut [f64]) {
    assert!(rows.len() >= out.len() * row_bytes, "tq2_0_rows_sum: fewer rows than sums");
    match level.get() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `quantize_row`.
        SimdLevel::Avx2 => unsafe { avx2::tq2_0_rows_sum(rows, row_bytes, q, qsums, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Simd` of level `Avx512Vnni` exists only where the CPU has AVX-512 F, BW and VNNI.
        SimdLevel::Avx512Vnni => unsafe { avx512::tq2_0_rows_sum(rows, row_bytes, q, qsums, out) },
        _ => {
            for (i, y) in out.iter_mut().enumerate() {
                *y = tq2_0_row_sum(level, &rows[i * row_bytes..(i + 1) * row_bytes], q, qsums);
            }
        }
    }
}

/// Adds elements `at` of every pair of rows times every token's activations (`q`: `[n,
/// k]`; a group's missing tokens repeat the last one) to `sums` (`[pairs, groups]`), finishing every
/// block that ends inside `at`; `at`'s ends are multiples of 32. Each 2-row × 4-token tile
/// shares every load by four or two products; prefill runs this over panels of a few KiB,
/// so that one group's activations stay in L1 while every pair goes past them.
pub fn tiles_2x4(level: Simd, pairs: &[RowPair], sums: &mut [TileSums], q: &[i8], k: usize, at: Range<usize>) {
    assert!(at.start.is_multiple_of(32) && at.end.is_multiple_of(32) && at.end <= k, "tiles_2x4: unaligned panel");
    let groups = (q.len() / k.max(1)).div_ceil(4);
    assert!(q.len().is_multiple_of(k.max(1)) && sums.len() == pairs.len() * groups);
    for p in pairs {
        let blocks = k.div_ceil(p.block.max(1));
        assert!(p.block % 32 == 0 && p.c.iter().all(|s| s.len() >= k) && p.d.iter().all(|s| s.len() >= blocks));
        assert!(p.qsums.len() >= groups * blocks);
    }
    match level.get() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `quantize_row`.
        SimdLevel::Avx2 => unsafe { avx2::tiles_2x4(pairs, sums, q, k, at, groups) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Simd` of level `Avx512Vnni` exists only where the CPU has AVX-512 F, BW and VNNI.
        SimdLevel::Avx512Vnni => unsafe { avx512::tiles_2x4(pairs, sums, q, k, at, groups) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: a `Simd` of level `Neon` or `NeonDot` exists only where the CPU has NEON (and dotprod).
        SimdLevel::Neon | SimdLevel::NeonDot => unsafe { neon::tiles_2x4(level, pairs, sums, q, k, at, groups) },
        _ => for_each_tile(pairs, sums, q, k, groups, |p, tok, qs, s| {
            tile_2x4_portable(p.c, tok, at.clone(), p.block, p.d, qs, s)
        }),
    }
}

/// One tile of [`tiles_2x4`], in scalar code.
fn tile_2x4_portable(
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
        for lane in 0..8 {
            let (r, t) = (lane / 4, lane % 4);
            let raw: i32 = c[r][i..end].iter().zip(&q[t][i..end]).map(|(&a, &b)| a as i32 * b as i32).sum();
            sums.raw[lane] += raw;
            if end == (b + 1) * block {
                sums.y[lane] += d[r][b] * (sums.raw[lane] - qsums[b][t]) as f64;
                sums.raw[lane] = 0;
            }
        }
        i = end;
    }
}

/// Raw `Σ c·q` of codes stored one per byte (`codes.len() = q.len()`, a multiple of 32).
pub fn codes_dot(level: Simd, codes: &[u8], q: &[i8]) -> i32 {
    match level.get() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `quantize_row`.
        SimdLevel::Avx2 => unsafe { avx2::codes_dot(codes, q) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Simd` of level `Avx512Vnni` exists only where the CPU has AVX-512 F, BW and VNNI.
        SimdLevel::Avx512Vnni => unsafe { avx512::codes_dot(codes, q) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: a `Simd` of level `Neon` or `NeonDot` exists only where the CPU has NEON (and dotprod).
        SimdLevel::Neon | SimdLevel::NeonDot => unsafe { neon::codes_dot(level, codes, q) },
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
