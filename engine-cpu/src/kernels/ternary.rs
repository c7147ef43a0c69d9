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

use std::ops::Range;

use purebee_isa::ops::{bitlinear_act_scale, bitlinear_quantize};

use super::{Simd, SimdLevel};

/// Elements per 32-byte chunk of 2-bit codes.
pub const CHUNK_ELEMS: usize = 128;

/// The shift of the run of 32 elements `32g..32g+32` of a chunk, per layout.
pub const TQ2_0_SHIFTS: [u32; 4] = [0, 2, 4, 6];
/// See [`TQ2_0_SHIFTS`].
pub const I2_S_SHIFTS: [u32; 4] = [6, 4, 2, 0];

/// Quantizes one row as BITLINEAR specifies: returns `s` and fills `q`, and `sums[g]` with
/// `Σ q` over elements `128g .. 128g + 128` (`q.len()` is a multiple of 128 when `sums`
/// is not empty).
pub fn quantize_row(level: Simd, x: &[f32], q: &mut [i8], sums: &mut [i32]) -> f32 {
    match level.get() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Simd` of level `Avx2` or `Avx512Vnni` exists only where the CPU has AVX2/FMA/F16C.
        SimdLevel::Avx2 | SimdLevel::Avx512Vnni => unsafe { x86::quantize_row(x, q, sums) },
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

/// `sums[g] = Σ q` over elements `128g .. 128g + 128`.
#[inline(always)]
fn group_sums(q: &[i8], sums: &mut [i32]) {
    for (sum, group) in sums.iter_mut().zip(q.chunks_exact(CHUNK_ELEMS)) {
        *sum = group.iter().map(|&v| v as i32).sum();
    }
}

/// Raw `Σ c·q` of consecutive 32-byte chunks of 2-bit codes (`chunks.len() = 32·n`)
/// against `q` (`128·n` activations), the chunk's runs at `shifts`.
pub fn packed_dot(level: Simd, chunks: &[u8], shifts: &[u32; 4], q: &[i8]) -> i32 {
    match level.get() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `quantize_row`.
        SimdLevel::Avx2 => unsafe { x86::packed_dot(chunks, shifts, q) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Simd` of level `Avx512Vnni` exists only where the CPU has AVX-512 F, BW and VNNI.
        SimdLevel::Avx512Vnni => unsafe { super::avx512::packed_dot(chunks, shifts, q) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: a `Simd` of level `Neon` or `NeonDot` exists only where the CPU has NEON (and dotprod).
        SimdLevel::Neon | SimdLevel::NeonDot => unsafe { super::neon::packed_dot(level, chunks, shifts, q) },
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
        SimdLevel::Avx2 => unsafe { x86::packed_dot_rows(rows, row_bytes, shifts, q, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Simd` of level `Avx512Vnni` exists only where the CPU has AVX-512 F, BW and VNNI.
        SimdLevel::Avx512Vnni => unsafe { super::avx512::packed_dot_rows(rows, row_bytes, shifts, q, out) },
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
        SimdLevel::Avx2 => unsafe { x86::tq2_0_row_sum(row, q, qsums) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Simd` of level `Avx512Vnni` exists only where the CPU has AVX-512 F, BW and VNNI.
        SimdLevel::Avx512Vnni => unsafe { super::avx512::tq2_0_row_sum(row, q, qsums) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: a `Simd` of level `Neon` or `NeonDot` exists only where the CPU has NEON (and dotprod).
        SimdLevel::Neon | SimdLevel::NeonDot => unsafe { super::neon::tq2_0_row_sum(level, row, q, qsums) },
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

/// [`tq2_0_row_sum`] of each of consecutive rows against the same activations: `out[i]` is
/// row i's, `rows[i·row_bytes .. (i+1)·row_bytes]`, the same bits as one call per row.
///
/// The x86 levels sum the rows two at a time (each activation loaded once for both, the
/// pair prefetched as one stream: [`prefetch_pair_stream`]; rows whose blocks do not all
/// share one scale go one at a time), and the whole run in one call, so the pair kernel
/// inlines into the loop. Measured with `kernel_speed` on a Zen 4, AVX-512 VNNI, one
/// thread, rows of 2560 in cache: 3.1 ns per 256 weights one row per call, 2.6 a pair per
/// call, 2.3 a run per call.
pub fn tq2_0_rows_sum(level: Simd, rows: &[u8], row_bytes: usize, q: &[i8], qsums: &[i32], out: &mut [f64]) {
    assert!(rows.len() >= out.len() * row_bytes, "tq2_0_rows_sum: fewer rows than sums");
    match level.get() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `quantize_row`.
        SimdLevel::Avx2 => unsafe { x86::tq2_0_rows_sum(rows, row_bytes, q, qsums, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Simd` of level `Avx512Vnni` exists only where the CPU has AVX-512 F, BW and VNNI.
        SimdLevel::Avx512Vnni => unsafe { super::avx512::tq2_0_rows_sum(rows, row_bytes, q, qsums, out) },
        _ => {
            for (i, y) in out.iter_mut().enumerate() {
                *y = tq2_0_row_sum(level, &rows[i * row_bytes..(i + 1) * row_bytes], q, qsums);
            }
        }
    }
}

/// `out[i]` for row `i` of the run `rows` (rows of `row_bytes`): two rows per `pair` call,
/// the odd last row through `one`, after asking for the run's first bytes
/// ([`prefetch_run_start`]). The x86 rows kernels call it inside their `target_feature`
/// functions, so that their pair kernels inline into this loop.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) fn in_row_pairs<T: Copy>(
    rows: &[u8],
    row_bytes: usize,
    out: &mut [T],
    pair: impl Fn([&[u8]; 2]) -> [T; 2],
    one: impl Fn(&[u8]) -> T,
) {
    // SAFETY: SSE is part of x86_64.
    unsafe { prefetch_run_start(rows) };
    let row = |i: usize| &rows[i * row_bytes..(i + 1) * row_bytes];
    let last = out.len().saturating_sub(1);
    let mut pairs = out.chunks_exact_mut(2);
    for (p, two) in (&mut pairs).enumerate() {
        two.copy_from_slice(&pair([row(2 * p), row(2 * p + 1)]));
    }
    if let [y] = pairs.into_remainder() {
        *y = one(row(last));
    }
}

/// How the x86 pair kernels prefetch: the two rows of a pair are consecutive rows of one
/// matrix, read together, so the bytes of this pair and the next form one stream, which
/// these kernels fetch `PAIR_STREAM_AHEAD` bytes ahead: `lines` cache lines from `at`, the
/// bytes of the pair read so far (both rows': twice one row's offset). Prefetching each row on
/// its own, as the one-row kernels do, left the AVX-512 TQ2_0 pair kernel at 5.8–6.3 ns per
/// 256 weights from memory (one thread), against 2.7–2.9 for the stream and 3.2–5.3 for
/// one row at a time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse")]
#[inline]
pub(super) fn prefetch_pair_stream(first_row: &[u8], at: usize, lines: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    for line in 0..lines {
        // A hint: an address past the matrix is harmless (wrapping_add, never dereferenced).
        _mm_prefetch::<_MM_HINT_T0>(first_row.as_ptr().wrapping_add(at + 64 * line + PAIR_STREAM_AHEAD).cast());
    }
}

/// The first `PAIR_STREAM_AHEAD` bytes of a run of rows, which the kernels' prefetches, that
/// far ahead of what they read, never ask for: without this they arrive one demand miss
/// after another at the start of every run. (A decode of 2560- and 6912-element TQ2_0 rows,
/// 6 alternated rounds: BITLINEAR 34.5 -> 36.1 GB/s in this VM's fast-memory phases, 27.6
/// -> 29.1 in its slow ones.)
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse")]
#[inline]
fn prefetch_run_start(rows: &[u8]) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    for at in (0..rows.len().min(PAIR_STREAM_AHEAD)).step_by(64) {
        // A hint, for an address inside `rows`.
        _mm_prefetch::<_MM_HINT_T0>(rows.as_ptr().wrapping_add(at).cast());
    }
}

/// See [`prefetch_pair_stream`] (2 to 6 KiB measured alike).
#[cfg(target_arch = "x86_64")]
const PAIR_STREAM_AHEAD: usize = 2048;

/// The scale of a row that a pair kernel may sum with the integer shortcut: its first and
/// last blocks' `d` bits when they agree and the row has 1 to `MAX_UNIFORM_BLOCKS` blocks
/// (the kernel checks the blocks between on the way).
#[cfg(target_arch = "x86_64")]
pub(super) fn pair_row_scale(row: &[u8], blocks: usize) -> Option<u16> {
    let d_bits = |b: usize| u16::from_le_bytes([row[66 * b + 64], row[66 * b + 65]]);
    (blocks > 0 && blocks <= MAX_UNIFORM_BLOCKS && d_bits(0) == d_bits(blocks - 1)).then(|| d_bits(0))
}

/// A pair kernel's result for one row summed as if every block had scale `d0`: `None` when
/// the shortcut does not hold (`differ` ≠ 0: some block's scale is not `d0`), and the row
/// must be summed the long way.
#[cfg(target_arch = "x86_64")]
pub(super) fn pair_row_finish(d0: u16, differ: u16, blocks: usize, raw: i64, qsums: &[i32]) -> Option<f64> {
    let total = raw - qsums.iter().map(|&v| v as i64).sum::<i64>();
    shared_scale(d0, blocks).filter(|_| differ == 0 && total != 0).map(|d| d * total as f64)
}

/// The scale of a row whose blocks all share one (the f16 bits of each block's `d`), when
/// it is finite and nonzero and the row has at most `MAX_UNIFORM_BLOCKS` blocks.
///
/// Ternary weights trained with one scale per tensor (the usual case) carry the same `d`
/// in every TQ2_0 block of a row. Then the reference's terms are `d · isum_b`, and every
/// partial sum of them is `d` times an integer of magnitude below 2³¹ (at most 256 · 3 ·
/// 128 per block): an 11-bit by 31-bit product, which f64 holds exactly. No addition
/// rounds, so the reference's sum is exactly `d · Σ_b isum_b`, one product of an integer
/// total. The one case where the order still shows is a total of zero (its sign of zero
/// depends on the terms), which callers recompute the long way.
pub fn uniform_scale(bits: impl IntoIterator<Item = u16>) -> Option<f64> {
    let mut bits = bits.into_iter();
    let first = bits.next()?;
    let mut count = 1;
    for b in bits {
        if b != first {
            return None;
        }
        count += 1;
    }
    shared_scale(first, count)
}

/// `d` (f16 bits) as the one scale of a row of `blocks` blocks, if [`uniform_scale`]'s
/// shortcut holds for it.
pub(super) fn shared_scale(d: u16, blocks: usize) -> Option<f64> {
    let d = super::linear::f16_to_f32(d);
    (d.is_finite() && d != 0.0 && blocks <= MAX_UNIFORM_BLOCKS).then_some(d as f64)
}

/// Blocks of 256 elements whose raw integer sums stay below 2³¹ in total.
const MAX_UNIFORM_BLOCKS: usize = 8192;

/// The running sums of a 2-row × 4-token tile (lane `4r + t`: row `r`, token `t`), carried
/// from one panel of elements to the next by [`tiles_2x4`].
#[derive(Clone, Copy, Debug)]
pub struct TileSums {
    /// `Σ_b d[r][b] · (Σ_{i∈b} c_ri·q_ti − qsums[b][t])` over the finished blocks, in block
    /// order from `Iterator::sum`'s zero (the reference's bits).
    pub y: [f64; 8],
    /// The raw `Σ c·q` of the block not finished yet.
    pub raw: [i32; 8],
}

impl Default for TileSums {
    fn default() -> TileSums {
        TileSums { y: [std::iter::empty::<f64>().sum(); 8], raw: [0; 8] }
    }
}

/// One pair of weight rows in [`tiles_2x4`].
pub struct RowPair<'a> {
    /// The two rows' codes, whole rows, one code per byte.
    pub c: [&'a [u8]; 2],
    /// Elements per scale block (a multiple of 32).
    pub block: usize,
    /// Each row's scale per block.
    pub d: [&'a [f64]; 2],
    /// `Σ q` per group of four tokens and block (`[groups, blocks]`).
    pub qsums: &'a [[i32; 4]],
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
        SimdLevel::Avx2 => unsafe { x86::tiles_2x4(pairs, sums, q, k, at, groups) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Simd` of level `Avx512Vnni` exists only where the CPU has AVX-512 F, BW and VNNI.
        SimdLevel::Avx512Vnni => unsafe { super::avx512::tiles_2x4(pairs, sums, q, k, at, groups) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: a `Simd` of level `Neon` or `NeonDot` exists only where the CPU has NEON (and dotprod).
        SimdLevel::Neon | SimdLevel::NeonDot => unsafe { super::neon::tiles_2x4(level, pairs, sums, q, k, at, groups) },
        _ => for_each_tile(pairs, sums, q, k, groups, |p, tok, qs, s| {
            tile_2x4_portable(p.c, tok, at.clone(), p.block, p.d, qs, s)
        }),
    }
}

/// Calls `tile(pair, tokens, Σq per block, sums)` for every group of four tokens (outer;
/// a missing token repeats the last) and every pair of rows (inner): the order that keeps
/// one group's activations in L1. Inlined into each SIMD level's kernel.
#[inline(always)]
pub(super) fn for_each_tile(
    pairs: &[RowPair],
    sums: &mut [TileSums],
    q: &[i8],
    k: usize,
    groups: usize,
    mut tile: impl FnMut(&RowPair, [&[i8]; 4], &[[i32; 4]], &mut TileSums),
) {
    let n = q.len() / k;
    for g in 0..groups {
        let tok = [0, 1, 2, 3].map(|t| &q[(4 * g + t).min(n - 1) * k..][..k]);
        for (i, p) in pairs.iter().enumerate() {
            let blocks = k.div_ceil(p.block);
            tile(p, tok, &p.qsums[g * blocks..(g + 1) * blocks], &mut sums[i * groups + g]);
        }
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
        SimdLevel::Avx2 => unsafe { x86::codes_dot(codes, q) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Simd` of level `Avx512Vnni` exists only where the CPU has AVX-512 F, BW and VNNI.
        SimdLevel::Avx512Vnni => unsafe { super::avx512::codes_dot(codes, q) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: a `Simd` of level `Neon` or `NeonDot` exists only where the CPU has NEON (and dotprod).
        SimdLevel::Neon | SimdLevel::NeonDot => unsafe { super::neon::codes_dot(level, codes, q) },
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

    use std::ops::Range;

    use super::super::rounding::x86 as rounding;
    use super::{bitlinear_act_scale, bitlinear_quantize, RowPair, TileSums, CHUNK_ELEMS};

    /// `ternary::quantize_row` in eight lanes (`super::super::rounding`), bit for bit.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn quantize_row(x: &[f32], q: &mut [i8], sums: &mut [i32]) -> f32 {
        let s = bitlinear_act_scale(rounding::abs_max(x));
        let n = x.len().min(q.len());
        let ((xs, x_tail), (qs, q_tail)) = (x[..n].as_chunks::<32>(), q[..n].as_chunks_mut::<32>());
        for (xr, qr) in xs.iter().zip(qs) {
            rounding::round_32(xr, s, qr);
        }
        for (qi, &xi) in q_tail.iter_mut().zip(x_tail) {
            *qi = bitlinear_quantize(xi, s);
        }
        super::group_sums(q, sums);
        s
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
                // As in `tq2_0_row_sum`.
                _mm_prefetch::<_MM_HINT_T0>(chunks.as_ptr().wrapping_add(32 * c + PREFETCH).cast());
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

    /// See `ternary::packed_dot_rows`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn packed_dot_rows(rows: &[u8], row_bytes: usize, shifts: &[u32; 4], q: &[i8], out: &mut [i32]) {
        super::in_row_pairs(rows, row_bytes, out, |r| packed_dot_pair(r, shifts, q), |r| packed_dot(r, shifts, q));
    }

    /// Two rows of `packed_dot_rows`: [`packed_dot`]'s loop over both rows, each
    /// activation load serving both.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn packed_dot_pair(rows: [&[u8]; 2], shifts: &[u32; 4], q: &[i8]) -> [i32; 2] {
        let n = (rows[0].len().min(rows[1].len()) / 32).min(q.len() / CHUNK_ELEMS);
        let mask = _mm256_set1_epi8(3);
        let ones = _mm256_set1_epi16(1);
        let (mut acc0, mut acc1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        let mut c = 0;
        while c < n {
            // As in `packed_dot`: up to 8 chunks per i16 lane before widening.
            let end = (c + 8).min(n);
            let (mut lo0, mut lo1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
            while c < end {
                super::prefetch_pair_stream(rows[0], 64 * c, 1);
                // SAFETY: chunk c is bytes 32c..32c+32 of each row and its activations are
                // 128c..128c+128 of `q`; c < n keeps all three inside their slices.
                let (v0, v1, qp) = unsafe {
                    (
                        _mm256_loadu_si256(rows[0].as_ptr().add(32 * c).cast()),
                        _mm256_loadu_si256(rows[1].as_ptr().add(32 * c).cast()),
                        q.as_ptr().add(CHUNK_ELEMS * c),
                    )
                };
                for (g, &shift) in shifts.iter().enumerate() {
                    let count = _mm_cvtsi32_si128(shift as i32);
                    // SAFETY: run g is activations 32g..32g+32 of this chunk's 128.
                    let qv = unsafe { _mm256_loadu_si256(qp.add(32 * g).cast()) };
                    let c0 = _mm256_and_si256(_mm256_srl_epi16(v0, count), mask);
                    let c1 = _mm256_and_si256(_mm256_srl_epi16(v1, count), mask);
                    lo0 = _mm256_add_epi16(lo0, _mm256_maddubs_epi16(c0, qv));
                    lo1 = _mm256_add_epi16(lo1, _mm256_maddubs_epi16(c1, qv));
                }
                c += 1;
            }
            acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(lo0, ones));
            acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(lo1, ones));
        }
        [hsum_i32(acc0), hsum_i32(acc1)]
    }

    /// See [`super::tiles_2x4`], which checked the slices' lengths and the alignments.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn tiles_2x4(
        pairs: &[RowPair],
        sums: &mut [TileSums],
        q: &[i8],
        k: usize,
        at: Range<usize>,
        groups: usize,
    ) {
        super::for_each_tile(pairs, sums, q, k, groups, |p, tok, qs, s| {
            tile_2x4(p.c, tok, at.clone(), p.block, p.d, qs, s)
        });
    }

    /// One tile of [`tiles_2x4`].
    #[target_feature(enable = "avx2,fma,f16c")]
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
        let ones = _mm256_set1_epi16(1);
        // SAFETY: `sums.y` holds eight f64 and `sums.raw` eight i32: two loads of four each.
        let (mut y, mut raw) = unsafe {
            (
                [_mm256_loadu_pd(sums.y.as_ptr()), _mm256_loadu_pd(sums.y.as_ptr().add(4))],
                [_mm_loadu_si128(sums.raw.as_ptr().cast()), _mm_loadu_si128(sums.raw.as_ptr().add(4).cast())],
            )
        };
        let mut i = at.start;
        while i < at.end {
            let b = i / block;
            let end = at.end.min((b + 1) * block);
            let mut acc = [_mm256_setzero_si256(); 8];
            while i < end {
                // Up to 32 steps of at most 768 per i16 lane (24 576), then widened.
                let seg_end = end.min(i + 32 * 32);
                let mut acc16 = [_mm256_setzero_si256(); 8];
                while i < seg_end {
                    // SAFETY: i + 32 ≤ at.end ≤ every slice's length (checked by the caller).
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
                    i += 32;
                }
                for (a, a16) in acc.iter_mut().zip(acc16) {
                    *a = _mm256_add_epi32(*a, _mm256_madd_epi16(a16, ones));
                }
            }
            // Eight vectors to eight sums: a tree of horizontal adds, then the two halves.
            let h0 = _mm256_hadd_epi32(_mm256_hadd_epi32(acc[0], acc[1]), _mm256_hadd_epi32(acc[2], acc[3]));
            let h1 = _mm256_hadd_epi32(_mm256_hadd_epi32(acc[4], acc[5]), _mm256_hadd_epi32(acc[6], acc[7]));
            for (r, h) in [h0, h1].into_iter().enumerate() {
                raw[r] =
                    _mm_add_epi32(raw[r], _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h)));
            }
            if end == (b + 1) * block {
                // SAFETY: `qsums[b]` holds four i32 (b < the blocks checked by the caller).
                let qv = unsafe { _mm_loadu_si128(qsums[b].as_ptr().cast()) };
                for r in 0..2 {
                    let isum = _mm256_cvtepi32_pd(_mm_sub_epi32(raw[r], qv));
                    // d (an f16's 11 bits, or I2_S's f32) × isum (< 2^29) is exact in f64;
                    // one add per lane per block keeps each lane's sum in block order.
                    y[r] = _mm256_add_pd(y[r], _mm256_mul_pd(_mm256_set1_pd(d[r][b]), isum));
                    raw[r] = _mm_setzero_si128();
                }
            }
        }
        // SAFETY: as the loads above.
        unsafe {
            _mm256_storeu_pd(sums.y.as_mut_ptr(), y[0]);
            _mm256_storeu_pd(sums.y.as_mut_ptr().add(4), y[1]);
            _mm_storeu_si128(sums.raw.as_mut_ptr().cast(), raw[0]);
            _mm_storeu_si128(sums.raw.as_mut_ptr().add(4).cast(), raw[1]);
        }
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

    /// [`tq2_0_block`] for the same block of two rows: each activation load serves both.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn tq2_0_block_pair(blocks: [&[u8]; 2], q: &[i8]) -> [__m256i; 2] {
        assert!(blocks.iter().all(|b| b.len() >= 64) && q.len() >= 256);
        let mask = _mm256_set1_epi8(3);
        let (mut acc0, mut acc1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        for c in 0..2 {
            // SAFETY: chunk c is bytes 32c..32c+32 of each block's first 64 (asserted).
            let (v0, v1) = unsafe {
                (
                    _mm256_loadu_si256(blocks[0].as_ptr().add(32 * c).cast()),
                    _mm256_loadu_si256(blocks[1].as_ptr().add(32 * c).cast()),
                )
            };
            for (g, qv) in q[128 * c..128 * c + 128].chunks_exact(32).enumerate() {
                // SAFETY: qv is 32 activations; an unaligned load.
                let qv = unsafe { _mm256_loadu_si256(qv.as_ptr().cast()) };
                let shift = _mm_cvtsi32_si128(2 * g as i32);
                let c0 = _mm256_and_si256(_mm256_srl_epi16(v0, shift), mask);
                let c1 = _mm256_and_si256(_mm256_srl_epi16(v1, shift), mask);
                acc0 = _mm256_add_epi16(acc0, _mm256_maddubs_epi16(c0, qv));
                acc1 = _mm256_add_epi16(acc1, _mm256_maddubs_epi16(c1, qv));
            }
        }
        let ones = _mm256_set1_epi16(1);
        [_mm256_madd_epi16(acc0, ones), _mm256_madd_epi16(acc1, ones)]
    }

    /// Two rows of `ternary::tq2_0_rows_sum` (the pair kernel).
    /// See `ternary::tq2_0_rows_sum`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn tq2_0_rows_sum(rows: &[u8], row_bytes: usize, q: &[i8], qsums: &[i32], out: &mut [f64]) {
        super::in_row_pairs(rows, row_bytes, out, |r| tq2_0_row_pair_sum(r, q, qsums), |r| tq2_0_row_sum(r, q, qsums));
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn tq2_0_row_pair_sum(rows: [&[u8]; 2], q: &[i8], qsums: &[i32]) -> [f64; 2] {
        let n = qsums.len();
        assert!(rows.iter().all(|r| r.len() >= 66 * n) && q.len() >= 256 * n, "tq2_0_row_pair_sum: short row");
        let (Some(d0), Some(d1)) = (super::pair_row_scale(rows[0], n), super::pair_row_scale(rows[1], n)) else {
            return rows.map(|r| tq2_0_row_sum(r, q, qsums));
        };
        let d_bits = |r: &[u8], b: usize| u16::from_le_bytes([r[66 * b + 64], r[66 * b + 65]]);
        let (mut acc, mut differ) = ([_mm256_setzero_si256(); 2], [0u16; 2]);
        for b in 0..n {
            super::prefetch_pair_stream(rows[0], 132 * b, 2);
            let blocks = [&rows[0][66 * b..66 * b + 64], &rows[1][66 * b..66 * b + 64]];
            let sums = tq2_0_block_pair(blocks, &q[256 * b..256 * b + 256]);
            for r in 0..2 {
                acc[r] = _mm256_add_epi32(acc[r], sums[r]);
            }
            differ[0] |= d_bits(rows[0], b) ^ d0;
            differ[1] |= d_bits(rows[1], b) ^ d1;
        }
        let finish = |r: usize, d: u16| {
            super::pair_row_finish(d, differ[r], n, hsum_i32(acc[r]) as i64, qsums)
                .unwrap_or_else(|| tq2_0_row_sum(rows[r], q, qsums))
        };
        [finish(0, d0), finish(1, d1)]
    }

    /// How far ahead the GEMV kernels prefetch, in bytes (best of 512 to 8192 here).
    const PREFETCH: usize = 2048;

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn tq2_0_row_sum(row: &[u8], q: &[i8], qsums: &[i32]) -> f64 {
        let n = qsums.len();
        let block = |b: usize| {
            // The rows of a task follow each other in memory: ask for the bytes a few
            // blocks ahead now, so that they arrive while these are summed (measured: the
            // hardware prefetcher alone leaves this loop waiting on memory).
            _mm_prefetch::<_MM_HINT_T0>(row.as_ptr().wrapping_add(66 * b + PREFETCH).cast());
            tq2_0_block(&row[66 * b..66 * b + 64], &q[256 * b..256 * b + 256])
        };
        let d_bits = |b: usize| u16::from_le_bytes([row[66 * b + 64], row[66 * b + 65]]) as i64;
        // A row whose first and last blocks share a scale: first as if every block did
        // (integer sums across blocks, one product), checking that on the way; the long
        // way when it does not.
        if n > 0 && d_bits(0) == d_bits(n - 1) {
            let d0 = d_bits(0);
            let (mut acc, mut differ) = (_mm256_setzero_si256(), 0);
            for b in 0..n {
                acc = _mm256_add_epi32(acc, block(b));
                differ |= d_bits(b) ^ d0;
            }
            let total = hsum_i32(acc) as i64 - qsums.iter().map(|&v| v as i64).sum::<i64>();
            if let Some(d) = super::shared_scale(d0 as u16, n).filter(|_| differ == 0 && total != 0) {
                return d * total as f64;
            }
        }
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

    fn levels() -> impl Iterator<Item = Simd> {
        Simd::all_supported()
    }

    /// The reference engine's sum of one TQ2_0 row: trits from memory's decoder, i64 sums,
    /// f64 products added in block order.
    fn reference_tq2_0_row_sum(row: &[u8], q: &[i8]) -> f64 {
        let blocks = row.len() / 66;
        let m = purebee_memory::quant::QuantMatrix::new(purebee_memory::DType::TQ2_0, row, 1, 256 * blocks)
            .expect("one row");
        let (mut trits, mut d) = (vec![0i8; 256 * blocks], vec![0f32; blocks]);
        m.ternary_row(0, &mut trits, &mut d).expect("ternary");
        d.iter()
            .enumerate()
            .map(|(b, &db)| {
                let isum: i64 = (0..256).map(|e| trits[256 * b + e] as i64 * q[256 * b + e] as i64).sum();
                db as f64 * isum as f64
            })
            .sum()
    }

    /// Rows whose blocks share one scale take the integer shortcut (`uniform_scale`): the
    /// same bits as the reference, also where the total is zero but the blocks' sums are
    /// not (the sign of that zero is the reference's order's), for negative, subnormal,
    /// zero and infinite scales, and when only the first and last blocks agree.
    #[test]
    fn rows_with_one_scale_sum_as_the_reference_does() {
        let (zero_pos, zero_neg) = (0x0000u16, 0x8000u16);
        let scales = [0x3800u16, 0xb800, 0x4200, 0xc200, 0x0001, 0x8001, zero_pos, zero_neg, 0x7c00, 0xfc00];
        for level in levels() {
            for blocks in 1..=5usize {
                let mut previous: Option<Vec<u8>> = None;
                for &d in &scales {
                    for case in 0..4 {
                        let mut row = vec![0u8; 66 * blocks];
                        let mut q = vec![0i8; 256 * blocks];
                        for b in 0..blocks {
                            for m in 0..64 {
                                // Blocks 2i and 2i + 1 mirror each other (codes c and 2 − c
                                // where possible, same activations): case 0 makes their
                                // trit sums cancel, so an even row's total is zero.
                                let byte = ((b / 2) * 37 + m * 11 + case * 5) as u8;
                                let codes = [0, 2, 4, 6].map(|sh| (byte >> sh) & 3);
                                let c = if case == 0 && b % 2 == 1 {
                                    codes.map(|c| 2u8.saturating_sub(c.min(2)))
                                } else {
                                    codes.map(|c| c.min(2))
                                };
                                row[66 * b + m] = c[0] | c[1] << 2 | c[2] << 4 | c[3] << 6;
                            }
                            // Case 3: only the first and last blocks share the scale.
                            let db = if case == 3 && b > 0 && b + 1 < blocks { d ^ 0x0400 } else { d };
                            row[66 * b + 64..66 * b + 66].copy_from_slice(&db.to_le_bytes());
                            for e in 0..256 {
                                q[256 * b + e] = (((b / 2) * 131 + e * 29 + case) % 255) as i8;
                            }
                        }
                        let qsums: Vec<i32> = q.chunks_exact(256).map(|b| b.iter().map(|&v| v as i32).sum()).collect();
                        let want = reference_tq2_0_row_sum(&row, &q);
                        let same =
                            |got: f64, want: f64| got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan());
                        let got = tq2_0_row_sum(level, &row, &q, &qsums);
                        assert!(same(got, want), "{level} {blocks} blocks, d {d:#06x}, case {case}: {got} vs {want}");
                        // In a run after the previous case's row (or itself), then once more
                        // alone: a pair and one row, where either row of the pair may take
                        // the shortcut or the long way, each as alone.
                        let other = previous.take().unwrap_or_else(|| row.clone());
                        let other_want = reference_tq2_0_row_sum(&other, &q);
                        let run = [&other[..], &row, &row].concat();
                        let mut got = [0f64; 3];
                        tq2_0_rows_sum(level, &run, row.len(), &q, &qsums, &mut got);
                        assert!(
                            same(got[0], other_want) && same(got[1], want) && same(got[2], want),
                            "{level} {blocks} blocks, d {d:#06x}, case {case}, run: {got:?} vs {other_want}, {want}"
                        );
                        previous = Some(row);
                    }
                }
            }
        }
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
                        let want = reference_tq2_0_row_sum(&row, &qq);
                        let got = tq2_0_row_sum(level, &row, &qq, &qsums);
                        assert_eq!(
                            got.to_bits(),
                            want.to_bits(),
                            "{level} TQ2_0 row of {blocks} blocks: {got} vs {want}"
                        );
                    }
                    assert_eq!(packed_dot(level, &chunks, shifts, &q), want, "{level} packed, {n_chunks} chunks");
                    // In runs of one to three rows, the codes' bytes reversed in the second
                    // and third (other sums, same activations).
                    let other: Vec<u8> = chunks.iter().rev().copied().collect();
                    let other_want = packed_dot(Simd::PORTABLE, &other, shifts, &q);
                    let run = [&chunks[..], &other, &other].concat();
                    for rows in 1..=3 {
                        let mut got = [0i32; 3];
                        packed_dot_rows(level, &run, chunks.len(), shifts, &q, &mut got[..rows]);
                        assert_eq!(
                            got[..rows],
                            [want, other_want, other_want][..rows],
                            "{level} packed rows, {rows} of {n_chunks} chunks"
                        );
                    }
                    assert_eq!(codes_dot(level, &codes, &q), want, "{level} codes, {n_chunks} chunks");
                    // Rows: the codes and a shifted copy; six tokens (a group of four and
                    // one of two, its last token repeated): q and rotations of it; scales
                    // (b + 1 + r)/8 and arbitrary subtrahends; blocks of 128 or the whole
                    // row, run in panels that end inside blocks, at them, or run whole.
                    let c1: Vec<u8> = codes.iter().map(|&c| (c + 1) & 3).collect();
                    let (n, k) = (6, 128 * n_chunks);
                    let q_all: Vec<i8> = (0..n).flat_map(|t| q.iter().cycle().skip(t * 5).take(k).copied()).collect();
                    for (block, panel) in [(128, 96), (128, 256), (k, 160), (k, k)] {
                        let nb = k / block;
                        let d: Vec<Vec<f64>> =
                            (0..2).map(|r| (0..nb).map(|b| (b + 1 + r) as f64 / 8.0).collect()).collect();
                        let sub = |t: usize, b: usize| [b as i32, -3, 7 * b as i32, 1, 2, -5][t];
                        let subs: Vec<[i32; 4]> = (0..2)
                            .flat_map(|g| (0..nb).map(move |b| [0, 1, 2, 3].map(|t| sub((4 * g + t).min(n - 1), b))))
                            .collect();
                        let mut got = vec![TileSums::default(); 2];
                        let pair = [RowPair { c: [&codes, &c1], block, d: [&d[0], &d[1]], qsums: &subs }];
                        for p0 in (0..k).step_by(panel) {
                            tiles_2x4(level, &pair, &mut got, &q_all, k, p0..(p0 + panel).min(k));
                        }
                        for (r, cr) in [&codes, &c1].iter().enumerate() {
                            for slot in 0..8 {
                                let (g, lane) = (slot / 4, 4 * r + slot % 4);
                                let tok = slot.min(n - 1);
                                let qt = &q_all[tok * k..(tok + 1) * k];
                                let want: f64 = (0..nb)
                                    .map(|b| {
                                        let at = block * b..block * (b + 1);
                                        let raw: i64 = cr[at.clone()]
                                            .iter()
                                            .zip(&qt[at])
                                            .map(|(&a, &b)| a as i64 * b as i64)
                                            .sum();
                                        d[r][b] * (raw - sub(tok, b) as i64) as f64
                                    })
                                    .sum();
                                let y = got[g].y[lane];
                                assert_eq!(
                                    y.to_bits(),
                                    want.to_bits(),
                                    "{level} 2x4 row {r} token {tok}, blocks of {block}, panels of {panel}: {y} vs {want}"
                                );
                                assert_eq!(got[g].raw[lane], 0);
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn quantize_row_matches_the_isa_on_every_level() {
        let rows = super::super::rounding::cases();
        for x in &rows {
            let mut want_q = vec![0i8; x.len()];
            let want_s = bitlinear_act_scale(x.iter().fold(0f32, |a, &v| a.max(v.abs())));
            for (q, &v) in want_q.iter_mut().zip(x) {
                *q = bitlinear_quantize(v, want_s);
            }
            let groups = x.len() / CHUNK_ELEMS;
            let want_sums: Vec<i32> =
                want_q.chunks_exact(CHUNK_ELEMS).map(|g| g.iter().map(|&v| v as i32).sum()).collect();
            for level in levels() {
                let (mut q, mut sums) = (vec![0i8; x.len()], vec![0i32; groups]);
                let s = quantize_row(level, x, &mut q, &mut sums);
                assert_eq!((s.to_bits(), &q), (want_s.to_bits(), &want_q), "{level}, a row of {}", x.len());
                assert_eq!(sums, want_sums, "{level}, a row of {}", x.len());
            }
        }
    }
}
