//! A level's ternary kernels against the portable ones, on seeded random inputs, with no
//! heap, no threads and no system call: so that it also runs inside a bare CPU emulator,
//! where the AVX-512 kernels are checked on machines without AVX-512
//! (`scripts/test-avx512-emulated.sh` calls it through the `emulation_probe` example). The
//! portable kernels are the ones the differential tests prove against the reference engine,
//! so agreeing with them exactly is agreeing with the reference.
//!
//! Shapes are random and odd where the kernels allow (chunk and block counts, row lengths
//! not a multiple of 64, partial last blocks, panels ending inside blocks, one to six
//! tokens); activations include −128 and 127; the sums must agree exactly (integers) or
//! bit for bit (the f64 finishing, whose order every level keeps).

use std::fmt;

use super::ternary::tokens::{self as ternary_tokens, ChunkLayout};
use super::ternary::{self, RowPair, TileSums, I2_S_SHIFTS, TQ2_0_SHIFTS};
use super::Simd;

/// The kernel that disagreed, and on which case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Disagreement {
    /// The kernel.
    pub kernel: Kernel,
    /// The case number (0-based) of the seeded sequence.
    pub case: u32,
}

/// The kernels [`check_ternary_kernels`] compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Kernel {
    /// `ternary::packed_dot` on TQ2_0's run order.
    PackedDotTq2_0 = 1,
    /// `ternary::packed_dot` on I2_S's run order.
    PackedDotI2S = 2,
    /// `ternary::codes_dot`.
    CodesDot = 3,
    /// `ternary::tq2_0_row_sum`.
    Tq2_0RowSum = 4,
    /// `ternary::tiles_2x4`.
    Tiles2x4 = 5,
    /// `ternary::tq2_0_rows_sum` (three rows: a pair and one alone).
    Tq2_0RowsSum = 6,
    /// `ternary::packed_dot_rows`, on both run orders (three rows).
    PackedDotRows = 7,
    /// `ternary::tokens::packed_rows_tokens`, on both layouts (three rows, one to four tokens).
    PackedRowsTokens = 8,
}

impl Kernel {
    /// The kernel whose number is `n` (see [`Disagreement::code`]).
    pub fn from_number(n: u32) -> Option<Kernel> {
        [
            Kernel::PackedDotTq2_0,
            Kernel::PackedDotI2S,
            Kernel::CodesDot,
            Kernel::Tq2_0RowSum,
            Kernel::Tiles2x4,
            Kernel::Tq2_0RowsSum,
            Kernel::PackedDotRows,
            Kernel::PackedRowsTokens,
        ]
        .into_iter()
        .find(|&k| k as u32 == n)
    }
}

impl Disagreement {
    /// `kernel << 32 | case`, never zero (the FFI form: zero means no disagreement).
    pub fn code(self) -> u64 {
        (self.kernel as u64) << 32 | self.case as u64
    }
}

impl fmt::Display for Disagreement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} disagrees with the portable kernel on case {}", self.kernel, self.case)
    }
}

/// Largest shapes drawn (all on the stack: about 53 KiB).
const MAX_CHUNKS: usize = 21;
const MAX_BLOCKS: usize = 10;
const MAX_TILE_K: usize = 1280;
const MAX_TOKENS: usize = 6;

/// Runs `cases` seeded random cases of every ternary kernel on `level` and on the
/// portable path; the first disagreement, if any. `level` must be supported by this CPU.
pub fn check_ternary_kernels(level: Simd, seed: u64, cases: u32) -> Result<(), Disagreement> {
    let mut rng = Rng(seed ^ 0x9e37_79b9_7f4a_7c15);
    for case in 0..cases {
        let fail = |kernel| Err(Disagreement { kernel, case });
        // Packed 2-bit chunks, both layouts.
        let n = 1 + rng.below(MAX_CHUNKS);
        let mut chunks = [0u8; 32 * MAX_CHUNKS];
        let mut q = [0i8; 128 * MAX_CHUNKS];
        rng.fill_bytes(&mut chunks[..32 * n]);
        rng.fill_activations(&mut q[..128 * n]);
        let (chunks, q) = (&chunks[..32 * n], &q[..128 * n]);
        // Three rows for the rows kernels: `chunks`, then two of other codes.
        let mut three = [0u8; 3 * 32 * MAX_CHUNKS];
        three[..32 * n].copy_from_slice(chunks);
        rng.fill_bytes(&mut three[32 * n..96 * n]);
        let three = &three[..96 * n];
        for (shifts, kernel) in [(&TQ2_0_SHIFTS, Kernel::PackedDotTq2_0), (&I2_S_SHIFTS, Kernel::PackedDotI2S)] {
            let want = ternary::packed_dot(Simd::PORTABLE, chunks, shifts, q);
            if ternary::packed_dot(level, chunks, shifts, q) != want {
                return fail(kernel);
            }
            let want =
                [0, 1, 2].map(|r| ternary::packed_dot(Simd::PORTABLE, &three[32 * n * r..32 * n * (r + 1)], shifts, q));
            let mut got = [0i32; 3];
            ternary::packed_dot_rows(level, three, 32 * n, shifts, q, &mut got);
            if got != want {
                return fail(Kernel::PackedDotRows);
            }
        }
        // Codes one per byte, any length.
        let len = 1 + rng.below(128 * n);
        let mut codes = [0u8; 128 * MAX_CHUNKS];
        rng.fill_codes(&mut codes[..len]);
        if ternary::codes_dot(level, &codes[..len], &q[..len])
            != ternary::codes_dot(Simd::PORTABLE, &codes[..len], &q[..len])
        {
            return fail(Kernel::CodesDot);
        }
        // TQ2_0 rows: one scale for every block (the integer shortcut), or a few.
        // Three of them, for the rows kernel (a pair, then one alone).
        let blocks = 1 + rng.below(MAX_BLOCKS);
        let mut rows = [[0u8; 66 * MAX_BLOCKS]; 3];
        let mut qb = [0i8; 256 * MAX_BLOCKS];
        let mut qsums = [0i32; MAX_BLOCKS];
        rng.fill_activations(&mut qb[..256 * blocks]);
        for (b, qsum) in qsums[..blocks].iter_mut().enumerate() {
            *qsum = qb[256 * b..256 * b + 256].iter().map(|&v| v as i32).sum();
        }
        for row in &mut rows {
            rng.fill_bytes(&mut row[..66 * blocks]);
            let scales = [0x3800u16, 0xb555, 0x0001, 0x7c00, 0x0000, rng.next() as u16 & 0x7bff];
            let uniform = rng.below(2) == 0;
            let first = scales[rng.below(scales.len())];
            for b in 0..blocks {
                let d = if uniform { first } else { scales[rng.below(scales.len())] };
                row[66 * b + 64..66 * b + 66].copy_from_slice(&d.to_le_bytes());
            }
        }
        let mut run = [0u8; 3 * 66 * MAX_BLOCKS];
        for (r, row) in rows.iter().enumerate() {
            run[66 * blocks * r..66 * blocks * (r + 1)].copy_from_slice(&row[..66 * blocks]);
        }
        let rows = [0, 1, 2].map(|r| &run[66 * blocks * r..66 * blocks * (r + 1)]);
        let (qb, qsums) = (&qb[..256 * blocks], &qsums[..blocks]);
        let same = |got: f64, want: f64| got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan());
        let want = rows.map(|row| ternary::tq2_0_row_sum(Simd::PORTABLE, row, qb, qsums));
        if !same(ternary::tq2_0_row_sum(level, rows[0], qb, qsums), want[0]) {
            return fail(Kernel::Tq2_0RowSum);
        }
        let mut got = [0f64; 3];
        ternary::tq2_0_rows_sum(level, &run[..3 * 66 * blocks], 66 * blocks, qb, qsums, &mut got);
        if !got.iter().zip(want).all(|(&g, w)| same(g, w)) {
            return fail(Kernel::Tq2_0RowsSum);
        }
        // Several tokens: the I2_S rows of chunks above and these TQ2_0 rows.
        let mut qt = [0i8; ternary_tokens::MAX_TOKENS * 128 * MAX_CHUNKS];
        rng.fill_activations(&mut qt);
        let tokens = 1 + rng.below(ternary_tokens::MAX_TOKENS);
        let i2s = (three, 32 * n, ChunkLayout::i2_s(128 * n));
        let tq2 = (&run[..3 * 66 * blocks], 66 * blocks, ChunkLayout::tq2_0(256 * blocks));
        for (rows, row_bytes, layout) in [i2s, tq2] {
            let k = layout.elems();
            let mut q: [&[i8]; ternary_tokens::MAX_TOKENS] = [&[]; ternary_tokens::MAX_TOKENS];
            for (t, q) in q.iter_mut().enumerate() {
                *q = &qt[t * k..(t + 1) * k];
            }
            let (mut got, mut want) = ([0i32; 3 * ternary_tokens::MAX_TOKENS], [0i32; 3 * ternary_tokens::MAX_TOKENS]);
            ternary_tokens::packed_rows_tokens(level, rows, row_bytes, &layout, &q[..tokens], &mut got[..3 * tokens]);
            ternary_tokens::packed_rows_tokens(
                Simd::PORTABLE,
                rows,
                row_bytes,
                &layout,
                &q[..tokens],
                &mut want[..3 * tokens],
            );
            if got != want {
                return fail(Kernel::PackedRowsTokens);
            }
        }
        if !tiles_agree(level, &mut rng) {
            return fail(Kernel::Tiles2x4);
        }
    }
    Ok(())
}

/// One random prefill tile problem on `level` and on the portable path: same bits.
fn tiles_agree(level: Simd, rng: &mut Rng) -> bool {
    let k = 32 * (1 + rng.below(MAX_TILE_K / 32));
    let block = 32 * (1 + rng.below(k / 32));
    let panel = 32 * (1 + rng.below(k / 32));
    let tokens = 1 + rng.below(MAX_TOKENS);
    let (groups, blocks) = (tokens.div_ceil(4), k.div_ceil(block));
    let mut c = [[0u8; MAX_TILE_K]; 2];
    let mut q = [0i8; MAX_TOKENS * MAX_TILE_K];
    let mut d = [[0f64; MAX_TILE_K / 32]; 2];
    let mut qsums = [[0i32; 4]; 2 * MAX_TILE_K / 32];
    c.iter_mut().for_each(|r| rng.fill_codes(&mut r[..k]));
    rng.fill_activations(&mut q[..tokens * k]);
    d.iter_mut().flat_map(|r| &mut r[..blocks]).for_each(|v| *v = (rng.below(64) as f64 - 31.0) / 8.0);
    qsums[..groups * blocks].iter_mut().flatten().for_each(|v| *v = rng.below(4096) as i32 - 2048);
    let pair = [RowPair { c: [&c[0][..k], &c[1][..k]], block, d: [&d[0][..blocks], &d[1][..blocks]], qsums: &qsums }];
    let run = |level| {
        let mut sums = [TileSums::default(); 2];
        for p0 in (0..k).step_by(panel) {
            ternary::tiles_2x4(level, &pair, &mut sums[..groups], &q[..tokens * k], k, p0..(p0 + panel).min(k));
        }
        sums
    };
    let (got, want) = (run(level), run(Simd::PORTABLE));
    got[..groups]
        .iter()
        .zip(&want[..groups])
        .all(|(g, w)| g.raw == w.raw && g.y.iter().zip(&w.y).all(|(a, b)| a.to_bits() == b.to_bits()))
}

/// A small seeded generator (SplitMix64): the same cases on every machine. A copy of
/// `purebee_rng`'s, kept here so that this module needs no other crate inside the emulator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0; the bias of `%` is irrelevant here).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn fill_bytes(&mut self, out: &mut [u8]) {
        out.iter_mut().for_each(|b| *b = self.next() as u8);
    }

    fn fill_codes(&mut self, out: &mut [u8]) {
        out.iter_mut().for_each(|b| *b = self.next() as u8 & 3);
    }

    /// Random int8 activations, one in eight at the extremes −128 or 127.
    fn fill_activations(&mut self, out: &mut [i8]) {
        for v in out {
            let r = self.next();
            *v = match r & 15 {
                0 => -128,
                1 => 127,
                _ => (r >> 8) as i8,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_supported_level_agrees_with_the_portable_kernels() {
        for level in Simd::all_supported() {
            assert_eq!(check_ternary_kernels(level, 7, 300), Ok(()), "{level}");
        }
    }
}
