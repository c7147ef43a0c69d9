//! The 2-bit layouts every ternary kernel reads, and the prefill tile's types and loop.
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
//! so `(chunk >> 2j) & 3` is 32 consecutive codes: no shuffles.

/// Elements per 32-byte chunk of 2-bit codes.
pub const CHUNK_ELEMS: usize = 128;

/// The shift of the run of 32 elements `32g..32g+32` of a chunk, per layout.
pub const TQ2_0_SHIFTS: [u32; 4] = [0, 2, 4, 6];
/// See [`TQ2_0_SHIFTS`].
pub const I2_S_SHIFTS: [u32; 4] = [6, 4, 2, 0];

/// `sums[g] = Σ q` over elements `128g .. 128g + 128`.
#[inline(always)]
pub(super) fn group_sums(q: &[i8], sums: &mut [i32]) {
    for (sum, group) in sums.iter_mut().zip(q.chunks_exact(CHUNK_ELEMS)) {
        *sum = group.iter().map(|&v| v as i32).sum();
    }
}

/// The running sums of a 2-row × 4-token tile (lane `4r + t`: row `r`, token `t`), carried
/// from one panel of elements to the next by [`tiles_2x4`](super::tiles_2x4).
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

/// One pair of weight rows in [`tiles_2x4`](super::tiles_2x4).
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
