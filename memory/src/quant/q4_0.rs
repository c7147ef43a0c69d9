//! Q4_0 (ggml type 2): 32 elements in 18 bytes, 4-bit codes around 8, one f16 scale.
//!
//! Layout (docs/formats.md § Q4_0, Q4_1, Q8_0; ggml `block_q4_0` in `ggml-common.h`,
//! `dequantize_row_q4_0` in `ggml-quants.c`):
//!
//! ```text
//! byte   0    1    2        3        ...  17
//!        [ d (f16 LE) ][ qs[0]  ][ qs[1]  ] ... [ qs[15] ]
//! qs[i]  bits 3..0 = code of element i,  bits 7..4 = code of element i + 16   (i < 16)
//! ```
//!
//! Value: `(code − 8) · d`, computed as ggml does: the code minus 8 as an integer, converted
//! to f32, times `d` widened from f16 to f32. The product has at most 4 + 11 significant bits,
//! so it is exact in f32: every engine that widens `d` first gets the same bits.

use super::float::f16_from_le;

/// Elements per block.
pub const BLOCK_LEN: usize = 32;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 18;

/// The block's scale `d`, widened to f32.
pub fn scale(block: &[u8; BLOCK_BYTES]) -> f32 {
    f16_from_le(&[block[0], block[1]])
}

/// The 4-bit code (0..=15) of element `i` of the block.
///
/// `i` must be below [`BLOCK_LEN`]; the caller iterates `0..BLOCK_LEN`, so `2 + i % 16` is at
/// most 17, inside the 18-byte block.
fn code(block: &[u8; BLOCK_BYTES], i: usize) -> u8 {
    let byte = block[2 + i % 16];
    if i < 16 {
        byte & 0x0f
    } else {
        byte >> 4
    }
}

/// Decodes one block into 32 floats: `out[i] = (code_i − 8) · d`.
pub fn dequantize_block(block: &[u8; BLOCK_BYTES], out: &mut [f32; BLOCK_LEN]) {
    let d = scale(block);
    for (i, o) in out.iter_mut().enumerate() {
        let q = i32::from(code(block, i)) - 8;
        *o = q as f32 * d;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_size_matches_dtype() {
        assert_eq!((crate::DType::Q4_0.block_len(), crate::DType::Q4_0.block_bytes()), (BLOCK_LEN, BLOCK_BYTES));
    }

    #[test]
    fn low_nibbles_are_the_first_half_high_nibbles_the_second() {
        // d = 0.5 (f16 0x3800). Byte i holds code i (low) and code 15 − i (high).
        let mut block = [0u8; BLOCK_BYTES];
        block[..2].copy_from_slice(&0x3800u16.to_le_bytes());
        for i in 0..16 {
            block[2 + i] = (i as u8) | ((15 - i as u8) << 4);
        }
        let mut out = [0f32; BLOCK_LEN];
        dequantize_block(&block, &mut out);
        for i in 0..16 {
            assert_eq!(out[i], (i as f32 - 8.0) * 0.5, "element {i}");
            assert_eq!(out[i + 16], (7.0 - i as f32) * 0.5, "element {}", i + 16);
        }
        assert_eq!((out[0], out[8], out[15], out[16], out[31]), (-4.0, 0.0, 3.5, 3.5, -4.0));
    }

    #[test]
    fn product_uses_the_widened_scale_exactly() {
        // d = 0x3555 = 1365/4096: (15 − 8) · d is exactly 9555/4096 = 2.332763671875, which f16
        // cannot hold (it would round to 2.33203125).
        let mut block = [0xffu8; BLOCK_BYTES];
        block[..2].copy_from_slice(&0x3555u16.to_le_bytes());
        let mut out = [0f32; BLOCK_LEN];
        dequantize_block(&block, &mut out);
        assert!(out.iter().all(|&v| v == 9555.0 / 4096.0), "{out:?}");
    }
}
