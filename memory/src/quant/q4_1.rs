//! Q4_1 (ggml type 3): 32 elements in 20 bytes, 4-bit codes, an f16 scale and an f16 minimum.
//!
//! Layout (docs/formats.md § Q4_0, Q4_1, Q8_0; ggml `block_q4_1` in `ggml-common.h`,
//! `dequantize_row_q4_1` in `ggml-quants.c`):
//!
//! ```text
//! byte   0    1    2    3    4        5        ...  19
//!        [ d (f16 LE) ][ m (f16 LE) ][ qs[0]  ][ qs[1]  ] ... [ qs[15] ]
//! qs[i]  bits 3..0 = code of element i,  bits 7..4 = code of element i + 16   (i < 16)
//! ```
//!
//! Value: `code · d + m` in f32: the code converted to f32, times `d` widened from f16, plus `m`
//! widened from f16. The product has at most 4 + 11 significant bits, so it is exact in f32;
//! only the add rounds. The result is therefore the real `code·d + m` rounded once to f32, the
//! same whether or not a compiler fuses the two into an FMA (ggml's C, gguf-py's numpy and this
//! code all agree bit for bit).

use super::float::f16_from_le;

/// Elements per block.
pub const BLOCK_LEN: usize = 32;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 20;

/// The block's scale `d`, widened to f32.
pub fn scale(block: &[u8; BLOCK_BYTES]) -> f32 {
    f16_from_le(&[block[0], block[1]])
}

/// The block's minimum `m`, widened to f32.
pub fn min(block: &[u8; BLOCK_BYTES]) -> f32 {
    f16_from_le(&[block[2], block[3]])
}

/// The 4-bit code (0..=15) of element `i` of the block.
///
/// `i` must be below [`BLOCK_LEN`]; the caller iterates `0..BLOCK_LEN`, so `4 + i % 16` is at
/// most 19, inside the 20-byte block.
fn code(block: &[u8; BLOCK_BYTES], i: usize) -> u8 {
    let byte = block[4 + i % 16];
    if i < 16 {
        byte & 0x0f
    } else {
        byte >> 4
    }
}

/// Decodes one block into 32 floats: `out[i] = code_i · d + m`.
pub fn dequantize_block(block: &[u8; BLOCK_BYTES], out: &mut [f32; BLOCK_LEN]) {
    let (d, m) = (scale(block), min(block));
    for (i, o) in out.iter_mut().enumerate() {
        *o = f32::from(code(block, i)) * d + m;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_size_matches_dtype() {
        assert_eq!((crate::DType::Q4_1.block_len(), crate::DType::Q4_1.block_bytes()), (BLOCK_LEN, BLOCK_BYTES));
    }

    #[test]
    fn codes_scale_and_minimum() {
        // d = 0.25 (0x3400), m = −2 (0xc000). Byte i holds code i (low) and code 15 − i (high).
        let mut block = [0u8; BLOCK_BYTES];
        block[..2].copy_from_slice(&0x3400u16.to_le_bytes());
        block[2..4].copy_from_slice(&0xc000u16.to_le_bytes());
        for i in 0..16 {
            block[4 + i] = (i as u8) | ((15 - i as u8) << 4);
        }
        let mut out = [0f32; BLOCK_LEN];
        dequantize_block(&block, &mut out);
        for i in 0..16 {
            assert_eq!(out[i], i as f32 * 0.25 - 2.0, "element {i}");
            assert_eq!(out[i + 16], (15 - i) as f32 * 0.25 - 2.0, "element {}", i + 16);
        }
        assert_eq!((out[0], out[15], out[16]), (-2.0, 1.75, 1.75));
    }

    #[test]
    fn values_are_the_exact_formula_rounded_once() {
        // d = 0x3555 ≈ 0.33325, m = 0x2e66 ≈ 0.0999: for every code, the f32 result equals
        // code·d + m computed exactly in f64 and rounded to f32 once.
        let mut block = [0u8; BLOCK_BYTES];
        block[..2].copy_from_slice(&0x3555u16.to_le_bytes());
        block[2..4].copy_from_slice(&0x2e66u16.to_le_bytes());
        for i in 0..16 {
            block[4 + i] = (i as u8) | ((15 - i as u8) << 4);
        }
        let mut out = [0f32; BLOCK_LEN];
        dequantize_block(&block, &mut out);
        let d = f64::from(half::f16::from_bits(0x3555).to_f32());
        let m = f64::from(half::f16::from_bits(0x2e66).to_f32());
        for (i, &v) in out.iter().enumerate() {
            let code = if i < 16 { i } else { 31 - i } as f64;
            assert_eq!(v.to_bits(), ((code * d + m) as f32).to_bits(), "element {i}");
        }
    }
}
