//! I2_S (Microsoft bitnet.cpp, type 36): ternary, 2-bit codes in 128-element blocks of 32 bytes,
//! one f32 scale for the whole tensor in a 32-byte trailer.
//!
//! Layout (docs/formats.md § I2_S (bitnet.cpp, x86 layout); bitnet.cpp `quantize_i2_s` in
//! `src/ggml-bitnet-mad.cpp`, the `QK_I2_S = 128` branch). Not part of upstream ggml, where
//! type 36 is a removed slot.
//!
//! ```text
//! tensor of n = rows·cols elements (n/4 + 32 bytes):
//!   [ block 0 ][ block 1 ] ... [ block n/128 − 1 ][ trailer: f32 scale (LE), 32 bytes ]
//!     32 B each, running through the flattened tensor (rows are contiguous)
//!
//! block b, byte j (j < 32):
//!     bits 7..6 → element 128b + j
//!     bits 5..4 → element 128b + 32 + j
//!     bits 3..2 → element 128b + 64 + j
//!     bits 1..0 → element 128b + 96 + j
//! ```
//!
//! So element `k` of a block sits in byte `k % 32` at bit `6 − 2·(k / 32)` (note: the first
//! group is in the *high* bits, the reverse of TQ2_0). Row `r` is elements `r·cols ..
//! (r+1)·cols`; [`crate::DType::row_bytes`] requires `cols` to be a multiple of 128, so each row
//! is whole blocks starting at byte `r·cols/4`.
//!
//! Codes: 0 → −1, 1 → 0, 2 → +1. Code 3 is never written by bitnet.cpp's quantizer; its
//! kernels multiply the raw code and subtract the activation sum (code − 1), so code 3 acts as
//! +2, and this decoder returns +2 for it too. Value: `t · scale` (one f32 multiply).
//!
//! **The trailer.** bitnet.cpp's matmul reads the scale as the first f32 after the packed
//! data (`*(float *)(data + ne00·ne01/4)`), and so does this decoder. Its quantizer writes only
//! that f32 and returns a size of n/4 + 32 ("32B for alignment"), leaving the other 28 bytes as
//! whatever its output buffer held; the converter docs/formats.md describes, and the fixtures'
//! generator, repeat the scale 8 times. Bytes 4..32 are therefore padding with no defined
//! content. They are not checked: a check that the 8 copies agree would reject files that
//! bitnet.cpp itself runs correctly, and would not identify any other layout (every variant
//! has the same trailer).
//!
//! Not decoded here: the ARM build's 64-element blocks (16 bytes, four groups of 16) and the
//! 4-row interleaved layout of newer x86 builds (`quantize_i2_s` without `ACT_PARALLEL`). They
//! have the same type id and size and nothing in the tensor bytes tells them apart, so
//! choosing them (or refusing a file) is the loader's business; docs/formats.md says the files in
//! circulation, the 2B-4T GGUF included, use the 128-element layout above.

use super::float::f32_from_le;

/// Elements per block.
pub const BLOCK_LEN: usize = 128;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 32;
/// Bytes of the per-tensor trailer after the last block.
pub const TRAILER_BYTES: usize = 32;

/// The tensor's scale: the first f32 of the trailer (bytes 4..32 are padding; see the module
/// docs).
pub fn scale(trailer: &[u8; TRAILER_BYTES]) -> f32 {
    f32_from_le(&[trailer[0], trailer[1], trailer[2], trailer[3]])
}

/// Where element `k` (k < 128) of a block lives: (byte index, bit shift).
pub fn position(k: usize) -> (usize, usize) {
    (k % 32, 6 - 2 * ((k / 32) % 4))
}

/// The 2-bit code (0..=3) of element `k` of the block.
///
/// The callers iterate `k` over `0..BLOCK_LEN`, for which [`position`] gives a byte index below
/// 32, inside the block.
fn code(block: &[u8; BLOCK_BYTES], k: usize) -> u8 {
    let (byte, shift) = position(k);
    (block[byte] >> shift) & 3
}

/// Decodes the block's trits `t = code − 1` (−1, 0, +1; +2 for code 3).
pub fn trits_block(block: &[u8; BLOCK_BYTES], trits: &mut [i8; BLOCK_LEN]) {
    for (k, t) in trits.iter_mut().enumerate() {
        *t = code(block, k) as i8 - 1;
    }
}

/// Decodes one block into 128 floats: `out[k] = t_k · scale`.
pub fn dequantize_block(block: &[u8; BLOCK_BYTES], scale: f32, out: &mut [f32; BLOCK_LEN]) {
    for (k, o) in out.iter_mut().enumerate() {
        *o = f32::from(code(block, k) as i8 - 1) * scale;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_size_matches_dtype() {
        let d = crate::DType::I2_S;
        assert_eq!((d.block_len(), d.block_bytes(), d.tensor_trailer_bytes()), (BLOCK_LEN, BLOCK_BYTES, TRAILER_BYTES));
    }

    #[test]
    fn positions_cover_the_codes_once_as_documented() {
        let mut seen = [[false; 4]; BLOCK_BYTES];
        for k in 0..BLOCK_LEN {
            let (byte, shift) = position(k);
            assert!(!seen[byte][shift / 2], "element {k} reuses byte {byte} shift {shift}");
            seen[byte][shift / 2] = true;
        }
        assert!(seen.iter().all(|b| b.iter().all(|&s| s)));
        assert_eq!((position(0), position(33), position(70), position(127)), ((0, 6), (1, 4), (6, 2), (31, 0)));
    }

    #[test]
    fn first_group_is_in_the_high_bits() {
        // byte j = 0b00_01_10_11: element j code 0 (−1), 32 + j code 1 (0), 64 + j code 2 (+1),
        // 96 + j code 3 (+2).
        let block = [0b00_01_10_11u8; BLOCK_BYTES];
        let mut trits = [0i8; BLOCK_LEN];
        trits_block(&block, &mut trits);
        for (k, &t) in trits.iter().enumerate() {
            assert_eq!(t, [-1, 0, 1, 2][k / 32], "element {k}");
        }
        let mut out = [0f32; BLOCK_LEN];
        dequantize_block(&block, -1.5, &mut out);
        assert_eq!((out[0], out[31], out[32], out[64], out[127]), (1.5, 1.5, -0.0, -1.5, -3.0));
    }

    #[test]
    fn a_single_nonzero_element_lands_in_its_byte_and_bit() {
        // Element 64 + 7 = 71: byte 7, bits 3..2. Every other code is 1 (zero).
        let mut block = [0b01_01_01_01u8; BLOCK_BYTES];
        block[7] = 0b01_01_10_01;
        let mut out = [0f32; BLOCK_LEN];
        dequantize_block(&block, 0.25, &mut out);
        let nonzero: Vec<usize> = (0..BLOCK_LEN).filter(|&k| out[k] != 0.0).collect();
        assert_eq!(nonzero, vec![71]);
        assert_eq!(out[71], 0.25);
    }

    #[test]
    fn scale_is_the_first_f32_of_the_trailer() {
        let mut trailer = [0xaau8; TRAILER_BYTES];
        trailer[..4].copy_from_slice(&0.2244873f32.to_le_bytes());
        assert_eq!(scale(&trailer), 0.2244873);
    }

    #[test]
    fn encode_places_blocks_in_order_and_appends_the_trailer() {
        let trits: Vec<i8> = (0..256).map(|i| [-1i8, 0, 1][(i * 3 + i / 5) % 3]).collect();
        let bytes = crate::quant::encode::encode_i2_s(&trits, 0.5).expect("whole blocks of trits");
        assert_eq!(bytes.len(), 256 / 4 + TRAILER_BYTES);
        for (b, chunk) in trits.chunks(BLOCK_LEN).enumerate() {
            let block: [u8; BLOCK_BYTES] = bytes[b * 32..(b + 1) * 32].try_into().expect("32 bytes");
            let mut back = [0i8; BLOCK_LEN];
            trits_block(&block, &mut back);
            assert_eq!(&back[..], chunk, "block {b}");
        }
        assert!(bytes[64..].chunks(4).all(|c| c == 0.5f32.to_le_bytes()));
    }
}
