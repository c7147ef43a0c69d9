//! TQ2_0 (ggml type 35): ternary, 256 elements in 66 bytes, 2-bit codes, one f16 scale.
//!
//! Layout (docs/formats.md § TQ2_0; ggml `block_tq2_0` in `ggml-common.h`,
//! `dequantize_row_tq2_0` in `ggml-quants.c`):
//!
//! ```text
//! byte    0 ........... 31   32 .......... 63   64   65
//!         [ qs[0..32]      ][ qs[32..64]      ][ d (f16 LE) ]
//!           half c = 0        half c = 1
//!           elements 0..128   elements 128..256
//!
//! qs[32c + m]  (c < 2, m < 32), bit pairs from the least significant:
//!     bits 1..0 → element 128c + m
//!     bits 3..2 → element 128c + 32 + m
//!     bits 5..4 → element 128c + 64 + m
//!     bits 7..6 → element 128c + 96 + m
//! ```
//!
//! So element `e` (e < 256) sits in byte `32·(e / 128) + e % 32`, at bit `2·((e % 128) / 32)`.
//! A code `q` means the trit `t = q − 1`: 0 → −1, 1 → 0, 2 → +1. Code 3 is never written by a
//! converter; ggml's arithmetic (`(q − 1)·d`) and its vec-dot kernels treat it as +2, and so does
//! this decoder, so that every engine agrees on every bit pattern. Value: `t · d`, the trit
//! converted to f32 times `d` widened from f16 (one f32 multiply, exact for t ∈ {−1, 0, 1}).

use super::float::f16_from_le;

/// Elements per block.
pub const BLOCK_LEN: usize = 256;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 66;

/// The block's scale `d`, widened to f32.
pub fn scale(block: &[u8; BLOCK_BYTES]) -> f32 {
    f16_from_le(&[block[64], block[65]])
}

/// Where element `e` (e < 256) of a block lives: (byte index into `qs`, bit shift).
pub fn position(e: usize) -> (usize, usize) {
    (32 * (e / 128) + e % 32, 2 * ((e % 128) / 32))
}

/// The 2-bit code (0..=3) of element `e` of the block.
///
/// The callers iterate `e` over `0..BLOCK_LEN`, for which [`position`] gives a byte index of at
/// most 63, inside the 66-byte block.
fn code(block: &[u8; BLOCK_BYTES], e: usize) -> u8 {
    let (byte, shift) = position(e);
    (block[byte] >> shift) & 3
}

/// Decodes the block's trits `t = code − 1` (−1, 0, +1; +2 for code 3) and returns its scale.
pub fn trits_block(block: &[u8; BLOCK_BYTES], trits: &mut [i8; BLOCK_LEN]) -> f32 {
    for (e, t) in trits.iter_mut().enumerate() {
        *t = code(block, e) as i8 - 1;
    }
    scale(block)
}

/// Decodes one block into 256 floats: `out[e] = t_e · d`.
pub fn dequantize_block(block: &[u8; BLOCK_BYTES], out: &mut [f32; BLOCK_LEN]) {
    let d = scale(block);
    for (e, o) in out.iter_mut().enumerate() {
        *o = f32::from(code(block, e) as i8 - 1) * d;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_size_matches_dtype() {
        assert_eq!((crate::DType::TQ2_0.block_len(), crate::DType::TQ2_0.block_bytes()), (BLOCK_LEN, BLOCK_BYTES));
    }

    #[test]
    fn positions_cover_the_codes_once_as_documented() {
        let mut seen = [[false; 4]; 64];
        for e in 0..BLOCK_LEN {
            let (byte, shift) = position(e);
            assert!(!seen[byte][shift / 2], "element {e} reuses byte {byte} shift {shift}");
            seen[byte][shift / 2] = true;
        }
        assert!(seen.iter().all(|b| b.iter().all(|&s| s)));
        assert_eq!(
            (position(0), position(33), position(127), position(128), position(255)),
            ((0, 0), (1, 2), (31, 6), (32, 0), (63, 6))
        );
    }

    #[test]
    fn hand_built_block_places_each_bit_pair() {
        // qs[m] = 0b11_10_01_00 for every m in half 0: elements 0..32 code 0 (−1), 32..64 code 1
        // (0), 64..96 code 2 (+1), 96..128 code 3 (+2). Half 1: qs[32 + m] = 0b00_01_10_10 gives
        // elements 128..160 and 160..192 code 2, 192..224 code 1, 224..256 code 0. d = 2.0.
        let mut block = [0u8; BLOCK_BYTES];
        block[..32].fill(0b11_10_01_00);
        block[32..64].fill(0b00_01_10_10);
        block[64..].copy_from_slice(&0x4000u16.to_le_bytes());
        let mut trits = [0i8; BLOCK_LEN];
        assert_eq!(trits_block(&block, &mut trits), 2.0);
        let expect = |e: usize| -> i8 { [-1, 0, 1, 2, 1, 1, 0, -1][e / 32] };
        for (e, &t) in trits.iter().enumerate() {
            assert_eq!(t, expect(e), "element {e}");
        }
        let mut out = [0f32; BLOCK_LEN];
        dequantize_block(&block, &mut out);
        for (e, &v) in out.iter().enumerate() {
            assert_eq!(v, f32::from(expect(e)) * 2.0, "element {e}");
        }
    }

    #[test]
    fn a_single_nonzero_element_lands_in_its_byte_and_bit() {
        // Element 128 + 64 + 5 = 197: byte 32 + 5 = 37, bits 5..4.
        let mut block = [0b01_01_01_01u8; BLOCK_BYTES]; // every code 1: all zeros
        block[37] = 0b01_10_01_01;
        block[64..].copy_from_slice(&0x3c00u16.to_le_bytes());
        let mut out = [0f32; BLOCK_LEN];
        dequantize_block(&block, &mut out);
        let nonzero: Vec<usize> = (0..BLOCK_LEN).filter(|&e| out[e] != 0.0).collect();
        assert_eq!(nonzero, vec![197]);
        assert_eq!(out[197], 1.0);
    }

    #[test]
    fn encoder_round_trips() {
        // Code 3 is covered by the hand-built block above; encoders write only −1..=1.
        let trits: [i8; BLOCK_LEN] = std::array::from_fn(|e| [-1i8, 0, 1][(e * 7 + e / 3) % 3]);
        let d = half::f16::from_f32(-0.375);
        let bytes = crate::quant::encode::encode_tq2_0_row(&trits, d).expect("one block of trits");
        let block: [u8; BLOCK_BYTES] = bytes.try_into().expect("one block");
        let mut back = [0i8; BLOCK_LEN];
        assert_eq!(trits_block(&block, &mut back), -0.375);
        assert_eq!(back, trits);
    }
}
