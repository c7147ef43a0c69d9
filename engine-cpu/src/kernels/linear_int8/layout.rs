//! The int8-block activations as LINEAR's int8 kernels read them: per row, the codes in
//! blocks of [`BLOCK`] with each block's scale and sum, and the same rearranged two blocks
//! at a time for the AVX2 Q4 kernels ([`pair_layout`]) and four at a time for the AVX-512
//! ones ([`quad_layout`]).

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
    /// Per four blocks, 128 codes ([`quad_layout`]).
    pub quads: &'a [i8],
    /// Per four blocks, each `1/s_b` four times, then each `Σq_b / s_b` ([`quad_layout`]).
    pub quad_scales: &'a [f32],
}

/// One row of activations in every layout, owned: for tests and benchmarks.
pub struct Int8RowBuf {
    q: Vec<i8>,
    inv_scale: Vec<f32>,
    sum: Vec<f32>,
    pairs: Vec<i8>,
    pair_scales: Vec<f32>,
    quads: Vec<i8>,
    quad_scales: Vec<f32>,
}

impl Int8RowBuf {
    /// The layouts of codes `q` (whole blocks) with each block's `1 / s_b`.
    pub fn new(q: Vec<i8>, inv_scale: Vec<f32>) -> Int8RowBuf {
        let nb = inv_scale.len();
        let sum: Vec<f32> = q.chunks(BLOCK).map(|c| c.iter().map(|&v| v as f32).sum()).collect();
        let (pl, sl) = pair_layout_len(nb);
        let (mut pairs, mut pair_scales) = (vec![0i8; pl], vec![0f32; sl]);
        pair_layout(&q, &inv_scale, &sum, &mut pairs, &mut pair_scales);
        let (ql, qsl) = quad_layout_len(nb);
        let (mut quads, mut quad_scales) = (vec![0i8; ql], vec![0f32; qsl]);
        quad_layout(&q, &inv_scale, &sum, &mut quads, &mut quad_scales);
        Int8RowBuf { q, inv_scale, sum, pairs, pair_scales, quads, quad_scales }
    }

    /// The row as the kernels take it.
    pub fn row(&self) -> Int8Row<'_> {
        Int8Row {
            q: &self.q,
            inv_scale: &self.inv_scale,
            sum: &self.sum,
            pairs: &self.pairs,
            pair_scales: &self.pair_scales,
            quads: &self.quads,
            quad_scales: &self.quad_scales,
        }
    }
}

/// Bytes of [`Int8Row::quads`] and elements of [`Int8Row::quad_scales`] for `blocks` blocks.
pub fn quad_layout_len(blocks: usize) -> (usize, usize) {
    (blocks.div_ceil(4) * 4 * BLOCK, blocks.div_ceil(4) * 20)
}

/// The activations of a row as the AVX-512 Q4 kernels read them, four blocks at a time:
/// the four blocks' codes 0..16 in order, then their codes 16..32 (the order in which one
/// 64-byte register of the four blocks' packed nibbles unpacks: low nibbles, then high);
/// then per four blocks 20 floats: each block's `1/s_b` four times (one per i32 lane of its
/// codes), then each block's `Σq_b / s_b`. Blocks past the row's end are zeros.
pub fn quad_layout(q: &[i8], inv_scale: &[f32], sum: &[f32], quads: &mut [i8], quad_scales: &mut [f32]) {
    const H: usize = BLOCK / 2;
    quads.fill(0);
    quad_scales.fill(0.0);
    for (b, ((qb, &inv), &qsum)) in q.chunks_exact(BLOCK).zip(inv_scale).zip(sum).enumerate() {
        let (g, slot) = (b / 4, b % 4);
        let out = &mut quads[g * 4 * BLOCK..(g + 1) * 4 * BLOCK];
        out[slot * H..][..H].copy_from_slice(&qb[..H]);
        out[2 * BLOCK + slot * H..][..H].copy_from_slice(&qb[H..]);
        let scales = &mut quad_scales[g * 20..(g + 1) * 20];
        scales[4 * slot..4 * slot + 4].fill(inv);
        scales[16 + slot] = qsum * inv;
    }
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
