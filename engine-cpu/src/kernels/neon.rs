//! aarch64 NEON kernels for [`SimdLevel::Neon`] and [`SimdLevel::NeonDot`]: the
//! counterparts of the x86 kernels of `ternary` and `linear`, with the same results
//! (integer sums exact, the f64 finishing of the ternary sums bit for bit the portable one's).
//!
//! The integer kernels are generic over `SDOT`: `true` multiplies with `sdot` (ARMv8.2
//! `dotprod`), `false` with the widening multiplies of baseline NEON. Only `sdot()` picks
//! `true`, after detecting `dotprod`, so `NeonDot` on a CPU without it still runs.
//!
//! The dispatchers of `ternary` and `linear` route both levels here.
//!
//! SILU has no kernel here: NEON is the aarch64 baseline, so `silu`'s portable loop already
//! compiles to four-lane NEON code (checked: `fdiv v.4s`, `frintx v.4s`, `fmaxnm v.4s`), which
//! is all a hand-written one would be. Nor is there a prefetch as in the x86 GEMV kernels
//! (the aarch64 `_prefetch` intrinsic is unstable; to measure on hardware first).

use std::arch::aarch64::*;
use std::arch::asm;
use std::ops::Range;

use super::f16::f16_to_f32;
use super::ternary::{self, RowPair, TileSums, CHUNK_ELEMS, TQ2_0_SHIFTS};
use super::{Simd, SimdLevel};

/// True when the `SDOT = true` kernels may run: `level` asks for them, and being a [`Simd`],
/// the CPU has `dotprod` (the one place that picks them, which the `sdot` in `dot16` relies on).
pub(super) fn sdot(level: Simd) -> bool {
    level.get() == SimdLevel::NeonDot
}

/// The first 16 bytes of `s` (bounds checked; the check goes when the caller's slicing
/// already proves it).
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn u8x16(s: &[u8]) -> uint8x16_t {
    assert!(s.len() >= 16);
    // SAFETY: `s` holds at least 16 bytes (asserted); `ld1` has no alignment requirement.
    unsafe { vld1q_u8(s.as_ptr()) }
}

/// The first 16 bytes of `s`, as i8.
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn i8x16(s: &[i8]) -> int8x16_t {
    assert!(s.len() >= 16);
    // SAFETY: as in `u8x16`.
    unsafe { vld1q_s8(s.as_ptr()) }
}

/// The first four floats of `s`.
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn f32x4(s: &[f32]) -> float32x4_t {
    assert!(s.len() >= 4);
    // SAFETY: `s` holds at least four floats (asserted).
    unsafe { vld1q_f32(s.as_ptr()) }
}

/// `acc` plus the 16 products `a_i · b_i`, spread over its four lanes (which lane takes
/// which product differs between the two ways: only the lanes' total is meant). The
/// widening way sums products in pairs in i16: callers keep `|a_i|·|b_i| ≤ 128 · 127`
/// (2-bit or 4-bit codes, or Q8_0's codes against activations in −127..=127).
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn dot16<const SDOT: bool>(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    if SDOT {
        let mut acc = acc;
        // `vdotq_s32` is not stable yet (`stdarch_neon_dotprod`, rust-lang/rust#117224), so
        // the instruction is written out; `.arch_extension` lets the assembler take it in a
        // function compiled for baseline NEON (the kernels are one generic body for both).
        // SAFETY: SDOT is true only in kernels that `sdot` chose, after detecting dotprod;
        // the instruction touches only these three registers.
        unsafe {
            asm!(
                ".arch_extension dotprod",
                "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
                acc = inout(vreg) acc,
                a = in(vreg) a,
                b = in(vreg) b,
                options(pure, nomem, nostack, preserves_flags),
            )
        };
        acc
    } else {
        // Products pairwise in i16 (|a·b + a'·b'| ≤ 2 · 128 · 127 < 2¹⁵), then pairs into i32.
        let p = vmlal_high_s8(vmull_s8(vget_low_s8(a), vget_low_s8(b)), a, b);
        vpadalq_s16(acc, p)
    }
}

/// `acc` plus the raw `Σ c·q` of consecutive 32-byte chunks of 2-bit codes (runs at
/// `shifts`, see `ternary`'s layouts) against `q`, its lanes not yet added.
#[inline]
#[target_feature(enable = "neon")]
fn chunks_dot<const SDOT: bool>(mut acc: int32x4_t, chunks: &[u8], shifts: &[u32; 4], q: &[i8]) -> int32x4_t {
    let mask = vdupq_n_u8(3);
    // `ushl` by a negative count shifts right.
    let right = shifts.map(|s| vdupq_n_s8(-(s as i8)));
    for (chunk, qc) in chunks.chunks_exact(32).zip(q.chunks_exact(CHUNK_ELEMS)) {
        for half in [0, 16] {
            let v = u8x16(&chunk[half..]);
            for (g, &r) in right.iter().enumerate() {
                let codes = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(v, r), mask));
                acc = dot16::<SDOT>(acc, codes, i8x16(&qc[32 * g + half..]));
            }
        }
    }
    acc
}

/// `ternary::packed_dot`.
#[target_feature(enable = "neon")]
pub(crate) fn packed_dot(level: Simd, chunks: &[u8], shifts: &[u32; 4], q: &[i8]) -> i32 {
    let zero = vdupq_n_s32(0);
    let acc = if sdot(level) {
        chunks_dot::<true>(zero, chunks, shifts, q)
    } else {
        chunks_dot::<false>(zero, chunks, shifts, q)
    };
    vaddvq_s32(acc)
}

/// `ternary::tq2_0_row_sum`.
#[target_feature(enable = "neon")]
pub(crate) fn tq2_0_row_sum(level: Simd, row: &[u8], q: &[i8], qsums: &[i32]) -> f64 {
    if sdot(level) {
        row_sum::<true>(row, q, qsums)
    } else {
        row_sum::<false>(row, q, qsums)
    }
}

#[inline]
#[target_feature(enable = "neon")]
fn row_sum<const SDOT: bool>(row: &[u8], q: &[i8], qsums: &[i32]) -> f64 {
    let zero = vdupq_n_s32(0);
    let block = |acc, b: usize| chunks_dot::<SDOT>(acc, &row[66 * b..66 * b + 64], &TQ2_0_SHIFTS, &q[256 * b..][..256]);
    let d_bits = |b: usize| u16::from_le_bytes([row[66 * b + 64], row[66 * b + 65]]);
    // As the x86 kernel: blocks sharing one scale sum their integers across the row and
    // multiply once (`ternary::uniform_scale` says why that is the reference's bits), unless
    // the total is zero, whose sign only the long way gets right.
    if let Some(d) = ternary::uniform_scale((0..qsums.len()).map(d_bits)) {
        // Each lane stays below 2³¹: at most 8192 blocks of |Σ c·q| ≤ 256·3·128.
        let raw = vaddlvq_s32((0..qsums.len()).fold(zero, block));
        let total = raw - qsums.iter().map(|&v| v as i64).sum::<i64>();
        if total != 0 {
            return d * total as f64;
        }
    }
    // The portable sum: block by block from `Iterator::sum`'s zero, each product exact.
    let y0: f64 = std::iter::empty::<f64>().sum();
    qsums.iter().enumerate().fold(y0, |y, (b, &qsum)| {
        let raw = vaddvq_s32(block(zero, b));
        y + f16_to_f32(d_bits(b)) as f64 * (raw - qsum) as f64
    })
}

/// `ternary::tiles_2x4`, after its checks (`groups` tile groups of four tokens).
#[target_feature(enable = "neon")]
pub(crate) fn tiles_2x4(
    level: Simd,
    pairs: &[RowPair],
    sums: &mut [TileSums],
    q: &[i8],
    k: usize,
    at: Range<usize>,
    groups: usize,
) {
    if sdot(level) {
        tiles::<true>(pairs, sums, q, k, at, groups)
    } else {
        tiles::<false>(pairs, sums, q, k, at, groups)
    }
}

#[inline]
#[target_feature(enable = "neon")]
fn tiles<const SDOT: bool>(
    pairs: &[RowPair],
    sums: &mut [TileSums],
    q: &[i8],
    k: usize,
    at: Range<usize>,
    groups: usize,
) {
    ternary::for_each_tile(pairs, sums, q, k, groups, |p, tok, qs, s| tile::<SDOT>(p, tok, at.clone(), qs, s));
}

/// One 2-row × 4-token tile over elements `at`: eight vector sums (lane `4r + t`) per
/// stretch of a block, then finished as `ternary`'s portable tile does, lane by lane.
#[inline]
#[target_feature(enable = "neon")]
fn tile<const SDOT: bool>(p: &RowPair, q: [&[i8]; 4], at: Range<usize>, qsums: &[[i32; 4]], sums: &mut TileSums) {
    let mut i = at.start;
    while i < at.end {
        let b = i / p.block;
        let end = at.end.min((b + 1) * p.block);
        let mut acc = [vdupq_n_s32(0); 8];
        while i < end {
            let c = p.c.map(|r| vreinterpretq_s8_u8(u8x16(&r[i..])));
            for t in 0..4 {
                let qv = i8x16(&q[t][i..]);
                acc[t] = dot16::<SDOT>(acc[t], c[0], qv);
                acc[4 + t] = dot16::<SDOT>(acc[4 + t], c[1], qv);
            }
            i += 16;
        }
        for (lane, a) in acc.into_iter().enumerate() {
            let (r, t) = (lane / 4, lane % 4);
            sums.raw[lane] += vaddvq_s32(a);
            if end == (b + 1) * p.block {
                sums.y[lane] += p.d[r][b] * (sums.raw[lane] - qsums[b][t]) as f64;
                sums.raw[lane] = 0;
            }
        }
    }
}

/// `ternary::codes_dot` (codes 0..=3, as there).
#[target_feature(enable = "neon")]
pub(crate) fn codes_dot(level: Simd, codes: &[u8], q: &[i8]) -> i32 {
    if sdot(level) {
        codes_dot_k::<true>(codes, q)
    } else {
        codes_dot_k::<false>(codes, q)
    }
}

#[inline]
#[target_feature(enable = "neon")]
fn codes_dot_k<const SDOT: bool>(codes: &[u8], q: &[i8]) -> i32 {
    let n = codes.len().min(q.len());
    let (c, q) = (codes[..n].chunks_exact(16), q[..n].chunks_exact(16));
    let tail: i32 = c.remainder().iter().zip(q.remainder()).map(|(&c, &qi)| c as i32 * qi as i32).sum();
    let acc = c.zip(q).fold(vdupq_n_s32(0), |acc, (c, q)| dot16::<SDOT>(acc, vreinterpretq_s8_u8(u8x16(c)), i8x16(q)));
    vaddvq_s32(acc) + tail
}

/// The 32 four-bit codes of a Q4 block's 16 bytes `qs`: elements 0..16 (low nibbles) and
/// 16..32 (high nibbles).
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn nibbles(qs: &[u8]) -> [int8x16_t; 2] {
    let v = u8x16(qs);
    [vandq_u8(v, vdupq_n_u8(15)), vshrq_n_u8::<4>(v)].map(|c| vreinterpretq_s8_u8(c))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::kernels::ternary::{unpack_chunks, I2_S_SHIFTS};

    /// The NEON levels this CPU supports (`neon-dot` only with `dotprod`).
    fn levels() -> impl Iterator<Item = Simd> {
        Simd::all_supported().filter(|l| l.get() != SimdLevel::Portable)
    }

    /// A small deterministic generator (an LCG's high bits).
    pub(in crate::kernels) struct Rng(pub(in crate::kernels) u64);

    impl Rng {
        pub(in crate::kernels) fn next(&mut self) -> u32 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (self.0 >> 33) as u32
        }

        pub(in crate::kernels) fn bytes(&mut self, n: usize) -> Vec<u8> {
            (0..n).map(|_| self.next() as u8).collect()
        }

        /// Activations, every seventh at the extreme −128.
        pub(in crate::kernels) fn acts(&mut self, n: usize) -> Vec<i8> {
            (0..n).map(|i| if i % 7 == 0 { -128 } else { self.next() as i8 }).collect()
        }

        /// Uniform in [−1, 1).
        pub(in crate::kernels) fn unit(&mut self) -> f32 {
            self.next() as f32 / 2_147_483_648.0 - 1.0
        }
    }

    #[test]
    fn detect_picks_neon_dot_exactly_when_the_cpu_has_dotprod() {
        assert!(SimdLevel::Neon.is_supported());
        let dot = std::arch::is_aarch64_feature_detected!("dotprod");
        assert_eq!(SimdLevel::NeonDot.is_supported(), dot);
        assert_eq!(SimdLevel::detect(), if dot { SimdLevel::NeonDot } else { SimdLevel::Neon });
        assert!(!SimdLevel::Avx2.is_supported());
        eprintln!("dotprod: {dot}, detect: {}", SimdLevel::detect());
    }

    #[test]
    fn packed_and_unpacked_dots_match_the_portable_ones() {
        let mut rng = Rng(0x1234_5678);
        for n_chunks in [1usize, 3, 9, 17, 21] {
            let random = (rng.bytes(32 * n_chunks), rng.acts(128 * n_chunks));
            // The extremes: every code 3 against −128 (each i16 pair at −768).
            let extreme = (vec![0xff; 32 * n_chunks], vec![-128i8; 128 * n_chunks]);
            for (chunks, q) in [random, extreme] {
                for shifts in [&TQ2_0_SHIFTS, &I2_S_SHIFTS] {
                    let mut codes = vec![0u8; 128 * n_chunks];
                    unpack_chunks(&chunks, shifts, &mut codes);
                    let want = ternary::packed_dot(Simd::PORTABLE, &chunks, shifts, &q);
                    // Lengths that end inside a vector take the scalar tail.
                    let lens = [codes.len(), codes.len() - 5, 13];
                    for level in levels() {
                        // SAFETY: NEON is present (aarch64 baseline, asserted in `detect_…`).
                        assert_eq!(unsafe { packed_dot(level, &chunks, shifts, &q) }, want, "{level} {n_chunks}");
                        for len in lens {
                            let (c, qq) = (&codes[..len], &q[..len]);
                            let want = ternary::codes_dot(Simd::PORTABLE, c, qq);
                            // SAFETY: as above.
                            assert_eq!(unsafe { codes_dot(level, c, qq) }, want, "{level} codes, {len}");
                        }
                    }
                }
            }
        }
    }

    /// A TQ2_0 row of `blocks` blocks: random codes, or (`mirror`) every odd block the
    /// trits of the block before negated with the same activations, so that an even row's
    /// total is zero; `d(b)` gives each block's scale bits.
    fn tq2_0_row(rng: &mut Rng, blocks: usize, mirror: bool, d: impl Fn(usize) -> u16) -> (Vec<u8>, Vec<i8>) {
        let (mut row, mut q) = (vec![0u8; 66 * blocks], rng.acts(256 * blocks));
        for b in 0..blocks {
            for m in 0..64 {
                row[66 * b + m] = if mirror && b % 2 == 1 {
                    // Codes c → 2 − c (trit t → −t); code 3 is not a trit, so only 0..=2.
                    let prev = row[66 * (b - 1) + m];
                    [0, 2, 4, 6].iter().map(|&s| (2 - ((prev >> s) & 3)) << s).sum()
                } else if mirror {
                    [0, 2, 4, 6].iter().map(|&s| ((rng.next() % 3) as u8) << s).sum()
                } else {
                    rng.next() as u8
                };
            }
            row[66 * b + 64..66 * b + 66].copy_from_slice(&d(b).to_le_bytes());
            if mirror && b % 2 == 1 {
                let prev = q[256 * (b - 1)..256 * b].to_vec();
                q[256 * b..256 * b + 256].copy_from_slice(&prev);
            }
        }
        (row, q)
    }

    #[test]
    fn tq2_0_row_sums_are_the_portable_bits() {
        let mut rng = Rng(0x9e37_79b9);
        let per_block =
            |b: usize| half::f16::from_f32(if b.is_multiple_of(2) { 0.5 } else { -0.5 } * (1.0 + b as f32 / 64.0));
        // 0.25, −0.5, a subnormal, ±0, ∞, NaN.
        let uniform = [0x3400u16, 0xb800, 0x0001, 0x0000, 0x8000, 0x7c00, 0x7e00];
        for blocks in [1usize, 2, 3, 4, 9, 11] {
            let mut rows = vec![tq2_0_row(&mut rng, blocks, false, |b| per_block(b).to_bits())];
            for &d in &uniform {
                rows.push(tq2_0_row(&mut rng, blocks, false, |_| d));
                rows.push(tq2_0_row(&mut rng, blocks, true, |_| d));
            }
            // Only the first and last blocks agree: not uniform.
            rows.push(tq2_0_row(&mut rng, blocks, false, |b| if b == 0 || b + 1 == blocks { 0x3c00 } else { 0x3800 }));
            for (row, q) in rows {
                let qsums: Vec<i32> = q.chunks_exact(256).map(|b| b.iter().map(|&v| v as i32).sum()).collect();
                let want = ternary::tq2_0_row_sum(Simd::PORTABLE, &row, &q, &qsums);
                for level in levels() {
                    // SAFETY: as in `packed_and_unpacked_dots_…`.
                    let got = unsafe { tq2_0_row_sum(level, &row, &q, &qsums) };
                    assert!(
                        got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                        "{level} {blocks} blocks: {got} vs {want}"
                    );
                }
            }
        }
        // The case the shortcut must leave to the long way: a zero total under a negative
        // scale is +0 (the blocks' terms cancel), where `d · 0` would be −0.
        let (row, q) = tq2_0_row(&mut rng, 4, true, |_| 0xb800);
        let qsums: Vec<i32> = q.chunks_exact(256).map(|b| b.iter().map(|&v| v as i32).sum()).collect();
        for level in levels() {
            // SAFETY: as above.
            let got = unsafe { tq2_0_row_sum(level, &row, &q, &qsums) };
            assert_eq!(got.to_bits(), 0f64.to_bits(), "{level}");
        }
    }

    #[test]
    fn tiles_match_the_portable_ones_panel_by_panel() {
        let mut rng = Rng(0x51ed_270b);
        for n_chunks in [1usize, 3, 9, 17, 21] {
            let (n, k) = (6usize, 128 * n_chunks);
            let groups = n.div_ceil(4);
            let codes: Vec<Vec<u8>> = (0..4).map(|_| rng.bytes(k).iter().map(|b| b & 3).collect()).collect();
            let q = rng.acts(n * k);
            for (block, panel) in [(128, 96), (128, 256), (k, 160), (k, k), (32, 64)] {
                let blocks = k / block;
                let d: Vec<Vec<f64>> =
                    (0..4).map(|_| (0..blocks).map(|_| half::f16::from_f32(rng.unit()).to_f64()).collect()).collect();
                let qsums: Vec<[i32; 4]> =
                    (0..groups * blocks).map(|_| [0; 4].map(|_: i32| rng.next() as i16 as i32)).collect();
                let pairs: Vec<RowPair> = (0..2)
                    .map(|p| RowPair {
                        c: [&codes[2 * p], &codes[2 * p + 1]],
                        block,
                        d: [&d[2 * p], &d[2 * p + 1]],
                        qsums: &qsums,
                    })
                    .collect();
                for level in levels() {
                    let mut want = vec![TileSums::default(); pairs.len() * groups];
                    let mut got = want.clone();
                    for p0 in (0..k).step_by(panel) {
                        let at = p0..(p0 + panel).min(k);
                        ternary::tiles_2x4(Simd::PORTABLE, &pairs, &mut want, &q, k, at.clone());
                        // SAFETY: as in `packed_and_unpacked_dots_…`.
                        unsafe { tiles_2x4(level, &pairs, &mut got, &q, k, at.clone(), groups) };
                        for (g, w) in got.iter().zip(&want) {
                            let bits = |s: &TileSums| s.y.map(f64::to_bits);
                            assert_eq!(
                                (bits(g), g.raw),
                                (bits(w), w.raw),
                                "{level} k {k}, blocks of {block}, at {at:?}"
                            );
                        }
                    }
                }
            }
        }
    }
}
