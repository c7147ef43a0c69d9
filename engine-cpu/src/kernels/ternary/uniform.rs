//! The one-scale shortcut: a TQ2_0 row whose blocks all share one scale sums its integers
//! across the whole row and multiplies once, which is provably the reference's sum
//! ([`uniform_scale`] says why).

use super::super::f16::f16_to_f32;

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
    let d = f16_to_f32(d);
    (d.is_finite() && d != 0.0 && blocks <= MAX_UNIFORM_BLOCKS).then_some(d as f64)
}

/// Blocks of 256 elements whose raw integer sums stay below 2³¹ in total.
const MAX_UNIFORM_BLOCKS: usize = 8192;
