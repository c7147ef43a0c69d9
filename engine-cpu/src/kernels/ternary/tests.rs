//! The ternary kernels on every level this CPU supports, against the reference engine's sum
//! and one another; on aarch64 also the NEON kernels called directly, against the portable ones.

use super::*;

fn levels() -> impl Iterator<Item = Simd> {
    Simd::all_supported()
}

/// The reference engine's sum of one TQ2_0 row: trits from memory's decoder, i64 sums,
/// f64 products added in block order.
fn reference_tq2_0_row_sum(row: &[u8], q: &[i8]) -> f64 {
    let blocks = row.len() / 66;
    let m =
        purebee_memory::quant::QuantMatrix::new(purebee_memory::DType::TQ2_0, row, 1, 256 * blocks).expect("one row");
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
                    let same = |got: f64, want: f64| got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan());
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
                    assert_eq!(got.to_bits(), want.to_bits(), "{level} TQ2_0 row of {blocks} blocks: {got} vs {want}");
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
                                    let raw: i64 =
                                        cr[at.clone()].iter().zip(&qt[at]).map(|(&a, &b)| a as i64 * b as i64).sum();
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
    let rows = crate::kernels::rounding::cases();
    for x in &rows {
        let mut want_q = vec![0i8; x.len()];
        let want_s = bitlinear_act_scale(x.iter().fold(0f32, |a, &v| a.max(v.abs())));
        for (q, &v) in want_q.iter_mut().zip(x) {
            *q = bitlinear_quantize(v, want_s);
        }
        let groups = x.len() / CHUNK_ELEMS;
        let want_sums: Vec<i32> = want_q.chunks_exact(CHUNK_ELEMS).map(|g| g.iter().map(|&v| v as i32).sum()).collect();
        for level in levels() {
            let (mut q, mut sums) = (vec![0i8; x.len()], vec![0i32; groups]);
            let s = quantize_row(level, x, &mut q, &mut sums);
            assert_eq!((s.to_bits(), &q), (want_s.to_bits(), &want_q), "{level}, a row of {}", x.len());
            assert_eq!(sums, want_sums, "{level}, a row of {}", x.len());
        }
    }
}

/// The NEON kernels against the portable ones.
#[cfg(target_arch = "aarch64")]
mod neon {
    use crate::kernels::neon::tests::{levels, Rng};
    use crate::kernels::ternary::neon::{codes_dot, packed_dot, tiles_2x4, tq2_0_row_sum};
    use crate::kernels::ternary::{self, unpack_chunks, RowPair, TileSums, I2_S_SHIFTS, TQ2_0_SHIFTS};
    use crate::kernels::Simd;

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
                        // SAFETY: NEON is the aarch64 baseline.
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
