//! x86_64 AVX-512 kernels with VNNI for [`SimdLevel::Avx512Vnni`]: BITLINEAR's integer
//! core with VNNI (the prefill tiles on 64-byte registers, the decode rows on 32-byte ones:
//! see [`chunk_dot`]). `vpdpbusd` multiplies u8 codes by i8 activations and adds
//! each group of four products into an i32 lane in one instruction, where AVX2 needs
//! `vpmaddubsw` (into i16), an add, and a widening `vpmaddwd` every few steps. The sums
//! are exact as on every level: a lane gains at most 4 · 3 · 128 = 1 536 per step, and a
//! row's raw total stays below 2³¹ for the row lengths `ternary` admits.
//!
//! Besides these and the several-token kernels (`tokens`), only LINEAR's float rows of
//! several tokens have an AVX-512 form; the other kernels (the rest of LINEAR, SILU, the
//! activation rounding) run their AVX2 versions on this level: every CPU with AVX-512 VNNI
//! has AVX2, FMA and F16C (`SimdLevel::is_supported` checks both), and those kernels are
//! either bandwidth-bound float work or a small share of a token.
//!
//! Where the CPU has no AVX-512, these kernels are checked inside the Bochs CPU emulator
//! (`scripts/test-avx512-emulated.sh`, through [`cross_check`](crate::kernels::cross_check));
//! the ordinary tests run them wherever the CPU has AVX-512 VNNI.
//!
//! [`SimdLevel::Avx512Vnni`]: crate::kernels::SimdLevel::Avx512Vnni

use std::arch::x86_64::*;
use std::ops::Range;

use super::super::f16::f16_to_f32;
use super::layout::{for_each_tile, RowPair, TileSums, CHUNK_ELEMS, TQ2_0_SHIFTS};
use super::row_pairs::{in_row_pairs, prefetch_pair_stream};
use super::uniform::{pair_row_finish, pair_row_scale, shared_scale};

/// How far ahead the GEMV kernels prefetch, in bytes (the AVX2 kernels' distance).
const PREFETCH: usize = 2048;

/// Four i32 accumulators of 8 lanes, one per run of a chunk: four independent
/// `vpdpbusd` chains (each waits on the previous one into its register, 4 cycles on Zen 4).
type Runs = [__m256i; 4];

/// Adds one 32-byte chunk of 2-bit codes `v` (run g at bits `shifts[g]`) against its 128
/// activations at `qp` to `acc`. The decode kernels work on 32-byte registers: the 64-byte
/// form (a chunk broadcast to both halves, two runs per instruction) was faster in cache
/// but slower from memory on Zen 4 (I2_S rows: 12.7 against 15.7 GB/s on one thread, and
/// 22–23 against 25–26 tokens/s for a decode of 2560- and 6912-element rows).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
fn chunk_dot(acc: Runs, v: __m256i, q: &[i8; CHUNK_ELEMS], shifts: &[__m128i; 4]) -> Runs {
    let mask = _mm256_set1_epi8(3);
    let mut acc = acc;
    for g in 0..4 {
        // SAFETY: run g is activations 32g..32g+32 of the 128 in `q`; an unaligned load.
        let qv = unsafe { _mm256_loadu_si256(q.as_ptr().add(32 * g).cast()) };
        let codes = _mm256_and_si256(_mm256_srl_epi16(v, shifts[g]), mask);
        acc[g] = _mm256_dpbusd_epi32(acc[g], codes, qv);
    }
    acc
}

/// The 128 activations of a chunk, from `start` (inside `q`: the callers' loop bounds).
#[inline]
fn activations(q: &[i8], start: usize) -> &[i8; CHUNK_ELEMS] {
    q[start..start + CHUNK_ELEMS].try_into().expect("a chunk's activations lie inside q")
}

/// The sum of all lanes of the four accumulators.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn sum_runs(acc: Runs) -> i32 {
    let s = _mm256_add_epi32(_mm256_add_epi32(acc[0], acc[1]), _mm256_add_epi32(acc[2], acc[3]));
    _mm512_reduce_add_epi32(_mm512_zextsi256_si512(s))
}

/// `shifts` as shift-count registers.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn shift_counts(shifts: &[u32; 4]) -> [__m128i; 4] {
    shifts.map(|s| _mm_cvtsi32_si128(s as i32))
}

/// `Σ c·q` of consecutive 32-byte chunks of 2-bit codes against `q` (see
/// `ternary::packed_dot`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn packed_dot(chunks: &[u8], shifts: &[u32; 4], q: &[i8]) -> i32 {
    let n = (chunks.len() / 32).min(q.len() / CHUNK_ELEMS);
    let sh = shift_counts(shifts);
    let mut acc = [_mm256_setzero_si256(); 4];
    for c in 0..n {
        _mm_prefetch::<_MM_HINT_T0>(chunks.as_ptr().wrapping_add(32 * c + PREFETCH).cast());
        // SAFETY: chunk c is bytes 32c..32c+32 of `chunks` (c < n); an unaligned load.
        let v = unsafe { _mm256_loadu_si256(chunks.as_ptr().add(32 * c).cast()) };
        acc = chunk_dot(acc, v, activations(q, CHUNK_ELEMS * c), &sh);
    }
    sum_runs(acc)
}

/// See `ternary::packed_dot_rows`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn packed_dot_rows(rows: &[u8], row_bytes: usize, shifts: &[u32; 4], q: &[i8], out: &mut [i32]) {
    in_row_pairs(rows, row_bytes, out, |r| packed_dot_pair(r, shifts, q), |r| packed_dot(r, shifts, q));
}

/// Two rows of `packed_dot_rows`: [`packed_dot`]'s loop over both rows.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
fn packed_dot_pair(rows: [&[u8]; 2], shifts: &[u32; 4], q: &[i8]) -> [i32; 2] {
    let n = (rows[0].len().min(rows[1].len()) / 32).min(q.len() / CHUNK_ELEMS);
    let sh = shift_counts(shifts);
    let (mut acc0, mut acc1) = ([_mm256_setzero_si256(); 4], [_mm256_setzero_si256(); 4]);
    for c in 0..n {
        prefetch_pair_stream(rows[0], 64 * c, 1);
        // SAFETY: chunk c is bytes 32c..32c+32 of each row (c < n); unaligned loads.
        let (v0, v1) = unsafe {
            (
                _mm256_loadu_si256(rows[0].as_ptr().add(32 * c).cast()),
                _mm256_loadu_si256(rows[1].as_ptr().add(32 * c).cast()),
            )
        };
        // The second call's activation loads repeat the first's, which the compiler shares.
        let qc = activations(q, CHUNK_ELEMS * c);
        acc0 = chunk_dot(acc0, v0, qc, &sh);
        acc1 = chunk_dot(acc1, v1, qc, &sh);
    }
    [sum_runs(acc0), sum_runs(acc1)]
}

/// One TQ2_0 row's `Σ_b d_b · (Σ_{i∈b} c_i·q_i − qsums[b])`, bit for bit as
/// `ternary::tq2_0_row_sum` specifies.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn tq2_0_row_sum(row: &[u8], q: &[i8], qsums: &[i32]) -> f64 {
    let n = qsums.len();
    assert!(row.len() >= 66 * n && q.len() >= 256 * n, "tq2_0_row_sum: short row");
    let sh = shift_counts(&TQ2_0_SHIFTS);
    // Adds block b's products to `acc`.
    let block = |acc: Runs, b: usize| {
        _mm_prefetch::<_MM_HINT_T0>(row.as_ptr().wrapping_add(66 * b + PREFETCH).cast());
        let mut acc = acc;
        for c in 0..2 {
            // SAFETY: chunk c of block b is bytes 66b + 32c .. + 32 of `row` (asserted above,
            // b < n); an unaligned load.
            let v = unsafe { _mm256_loadu_si256(row.as_ptr().add(66 * b + 32 * c).cast()) };
            acc = chunk_dot(acc, v, activations(q, 256 * b + CHUNK_ELEMS * c), &sh);
        }
        acc
    };
    let d_bits = |b: usize| u16::from_le_bytes([row[66 * b + 64], row[66 * b + 65]]);
    // As the AVX2 kernel: a row whose first and last blocks share a scale is summed as if
    // every block did (one integer total, one product), checked on the way.
    if n > 0 && d_bits(0) == d_bits(n - 1) {
        let d0 = d_bits(0);
        let (mut acc, mut differ) = ([_mm256_setzero_si256(); 4], 0);
        for b in 0..n {
            acc = block(acc, b);
            differ |= d_bits(b) ^ d0;
        }
        let total = sum_runs(acc) as i64 - qsums.iter().map(|&v| v as i64).sum::<i64>();
        if let Some(d) = shared_scale(d0, n).filter(|_| differ == 0 && total != 0) {
            return d * total as f64;
        }
    }
    // The long way: the reference's products, added in block order.
    let mut y: f64 = std::iter::empty::<f64>().sum();
    for (b, &qsum) in qsums.iter().enumerate() {
        let raw = sum_runs(block([_mm256_setzero_si256(); 4], b));
        y += f16_to_f32(d_bits(b)) as f64 * (raw - qsum) as f64;
    }
    y
}

/// See `ternary::tq2_0_rows_sum`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn tq2_0_rows_sum(rows: &[u8], row_bytes: usize, q: &[i8], qsums: &[i32], out: &mut [f64]) {
    in_row_pairs(rows, row_bytes, out, |r| tq2_0_row_pair_sum(r, q, qsums), |r| tq2_0_row_sum(r, q, qsums));
}

/// Two rows of `tq2_0_rows_sum` (the pair kernel). The codes stay in place: run g is masked with
/// `3 << 2g` instead of shifted down and masked, and `vpdpbusd` multiplies `4^g · c` (at most
/// 192, still a u8) by the activations, so run g's lanes hold `4^g` times its sums, which an
/// arithmetic shift by `2g` undoes exactly. A lane gains at most 4 · 192 · 128 = 98 304 per
/// chunk: below 2³¹ over `MAX_UNIFORM_BLOCKS` blocks of two chunks, the longest row this
/// kernel sums ([`pair_row_scale`]). (A 64-byte form, a block's two chunks in one register
/// and the activations of run g of both in another, ran 10 % faster alone on one thread
/// but 3–16 % slower in a 2-thread decode of such rows on Zen 4, as the one-row 64-byte
/// form did.)
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
fn tq2_0_row_pair_sum(rows: [&[u8]; 2], q: &[i8], qsums: &[i32]) -> [f64; 2] {
    let n = qsums.len();
    assert!(rows.iter().all(|r| r.len() >= 66 * n) && q.len() >= 256 * n, "tq2_0_row_pair_sum: short row");
    let (Some(d0), Some(d1)) = (pair_row_scale(rows[0], n), pair_row_scale(rows[1], n)) else {
        return rows.map(|r| tq2_0_row_sum(r, q, qsums));
    };
    let d_bits = |r: &[u8], b: usize| u16::from_le_bytes([r[66 * b + 64], r[66 * b + 65]]);
    let masks = TQ2_0_SHIFTS.map(|s| _mm256_set1_epi8((3u8 << s) as i8));
    let (mut acc, mut differ) = ([[_mm256_setzero_si256(); 4]; 2], [0u16; 2]);
    for b in 0..n {
        prefetch_pair_stream(rows[0], 132 * b, 2);
        for c in 0..2 {
            // SAFETY: chunk c of block b is bytes 66b + 32c .. + 32 of each row (asserted
            // above, b < n); an unaligned load.
            let v = unsafe {
                [
                    _mm256_loadu_si256(rows[0].as_ptr().add(66 * b + 32 * c).cast()),
                    _mm256_loadu_si256(rows[1].as_ptr().add(66 * b + 32 * c).cast()),
                ]
            };
            let qc = activations(q, 256 * b + CHUNK_ELEMS * c);
            for g in 0..4 {
                // SAFETY: run g is activations 32g..32g+32 of the chunk's 128; an unaligned load.
                let qv = unsafe { _mm256_loadu_si256(qc.as_ptr().add(32 * g).cast()) };
                for r in 0..2 {
                    acc[r][g] = _mm256_dpbusd_epi32(acc[r][g], _mm256_and_si256(v[r], masks[g]), qv);
                }
            }
        }
        differ[0] |= d_bits(rows[0], b) ^ d0;
        differ[1] |= d_bits(rows[1], b) ^ d1;
    }
    let finish = |r: usize, d: u16| {
        let a = acc[r];
        let runs = [a[0], _mm256_srai_epi32::<2>(a[1]), _mm256_srai_epi32::<4>(a[2]), _mm256_srai_epi32::<6>(a[3])];
        pair_row_finish(d, differ[r], n, sum_runs(runs) as i64, qsums)
            .unwrap_or_else(|| tq2_0_row_sum(rows[r], q, qsums))
    };
    [finish(0, d0), finish(1, d1)]
}

/// `Σ c·q` of codes stored one per byte (see `ternary::codes_dot`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
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
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn tiles_2x4(pairs: &[RowPair], sums: &mut [TileSums], q: &[i8], k: usize, at: Range<usize>, groups: usize) {
    for_each_tile(pairs, sums, q, k, groups, |p, tok, qs, s| tile_2x4(p.c, tok, at.clone(), p.block, p.d, qs, s));
}

/// One 2-row × 4-token tile of [`tiles_2x4`]: eight i32 accumulators of 16 lanes, each
/// code and activation load shared by four or two `vpdpbusd`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
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
