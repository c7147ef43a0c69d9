//! The int8-block activations as LINEAR's int8 kernels read them: per row, the codes in
//! blocks of [`BLOCK`] with each block's scale and sum, and the same rearranged two blocks
//! at a time for the AVX2 Q4 kernels ([`pair_layout`]).

/// Elements per activation block, and per Q4_0/Q4_1/Q8_0 weight block.
pub const BLOCK: usize = purebee_isa::ops::LINEAR_ACT_BLOCK;

/// One row of int8-block activations: `q` (a whole number of blocks), and per block
/// `1 / s_b` and `Σ q_i`; and the same in the layout of the AVX2 Q4 kernels
/// ([`pair_layout`]).
#[derive(Clone, Copy)]
pub struct Int8Row<'a> {
    /// The codes, `BLOCK · inv_scale.len()` of them.
    pub q: &'a [i8],
    /// `1 / s_b` per block.
    pub inv_scale: &'a [f32],
    /// `Σ_{i∈b} q_i` per block (exact in f32: at most 32 · 127 in magnitude).
    pub sum: &'a [f32],
    /// Per pair of blocks, 64 codes ([`pair_layout`]).
    pub pairs: &'a [i8],
    /// Per pair of blocks `(b, c)`: `[1/s_b, 1/s_c, Σq_b / s_b, Σq_c / s_c]`.
    pub pair_scales: &'a [f32],
}

/// Bytes of [`Int8Row::pairs`] and elements of [`Int8Row::pair_scales`] for `blocks` blocks.
pub fn pair_layout_len(blocks: usize) -> (usize, usize) {
    (blocks.div_ceil(2) * 2 * BLOCK, blocks.div_ceil(2) * 4)
}

/// The activations of a row as the AVX2 Q4 kernels read them, two blocks `b`, `c` at a time:
/// `b`'s codes 0..16, `c`'s 0..16, `b`'s 16..32, `c`'s 16..32 (the order in which one
/// 32-byte load of both blocks' packed nibbles unpacks: low nibbles, then high), and their
/// scales; an odd last block is paired with zeros.
pub fn pair_layout(q: &[i8], inv_scale: &[f32], sum: &[f32], pairs: &mut [i8], pair_scales: &mut [f32]) {
    const H: usize = BLOCK / 2;
    pairs.fill(0);
    pair_scales.fill(0.0);
    for (b, ((qb, &inv), &qsum)) in q.chunks_exact(BLOCK).zip(inv_scale).zip(sum).enumerate() {
        let (p, second) = (b / 2, b % 2);
        let out = &mut pairs[p * 2 * BLOCK..(p + 1) * 2 * BLOCK];
        out[second * H..][..H].copy_from_slice(&qb[..H]);
        out[BLOCK + second * H..][..H].copy_from_slice(&qb[H..]);
        pair_scales[4 * p + second] = inv;
        pair_scales[4 * p + 2 + second] = qsum * inv;
    }
}
