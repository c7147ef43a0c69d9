//! Q8_0 (ggml type 8): 32 elements in 34 bytes, signed 8-bit codes, one f16 scale.
//!
//! Layout (docs/formats.md § Q4_0, Q4_1, Q8_0; ggml `block_q8_0` in `ggml-common.h`,
//! `dequantize_row_q8_0` in `ggml-quants.c`):
//!
//! ```text
//! byte   0    1    2       3       ...  33
//!        [ d (f16 LE) ][ qs[0] ][ qs[1] ] ... [ qs[31] ]     qs[i]: i8, element i
//! ```
//!
//! Value: `qs[i] · d`: the i8 converted to f32, times `d` widened from f16. The product has at
//! most 8 + 11 significant bits, so it is exact in f32.

use super::float::f16_from_le;

/// Elements per block.
pub const BLOCK_LEN: usize = 32;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 34;

/// The block's scale `d`, widened to f32.
pub fn scale(block: &[u8; BLOCK_BYTES]) -> f32 {
    f16_from_le(&[block[0], block[1]])
}

/// Decodes one block into 32 floats: `out[i] = qs[i] · d`.
pub fn dequantize_block(block: &[u8; BLOCK_BYTES], out: &mut [f32; BLOCK_LEN]) {
    let d = scale(block);
    // Bytes 2..34 are exactly the 32 codes; zip pairs code i with element i.
    for (o, &q) in out.iter_mut().zip(&block[2..]) {
        *o = f32::from(q as i8) * d;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_size_matches_dtype() {
        assert_eq!((crate::DType::Q8_0.block_len(), crate::DType::Q8_0.block_bytes()), (BLOCK_LEN, BLOCK_BYTES));
    }

    #[test]
    fn codes_are_signed_bytes_in_element_order() {
        // d = −0.5 (0xb800); code i = i·8 − 128 as a byte, so −128, −120, ..., 120.
        let mut block = [0u8; BLOCK_BYTES];
        block[..2].copy_from_slice(&0xb800u16.to_le_bytes());
        for i in 0..32 {
            block[2 + i] = (i as i32 * 8 - 128) as i8 as u8;
        }
        let mut out = [0f32; BLOCK_LEN];
        dequantize_block(&block, &mut out);
        for (i, &v) in out.iter().enumerate() {
            assert_eq!(v, (i as f32 * 8.0 - 128.0) * -0.5, "element {i}");
        }
        assert_eq!((out[0], out[16], out[31]), (64.0, -0.0, -60.0));
    }
}
