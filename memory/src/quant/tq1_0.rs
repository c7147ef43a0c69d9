//! TQ1_0 (ggml type 34): ternary, 256 elements in 54 bytes, base-3 packed, one f16 scale.
//!
//! Layout (docs/formats.md § TQ1_0; ggml `block_tq1_0` in `ggml-common.h`,
//! `quantize_row_tq1_0_ref` / `dequantize_row_tq1_0` in `ggml-quants.c`):
//!
//! ```text
//! byte    0 .......... 31   32 ....... 47   48 .. 51   52   53
//!         [ qs[0..32]     ][ qs[32..48]   ][ qh[0..4] ][ d (f16 LE) ]
//!           5 trits/byte     5 trits/byte    4 trits/byte
//!           elements 0..160  160..240        240..256
//!
//! trit n of qs[m]       (m < 32, n < 5) → element m + 32n
//! trit n of qs[32 + m]  (m < 16, n < 5) → element 160 + m + 16n
//! trit n of qh[j]       (j < 4,  n < 4) → element 240 + j + 4n
//! ```
//!
//! **Packing.** A byte holds the base-3 number `v = Σ_n c_n·3^(4−n)` of its codes
//! `c_n ∈ {0, 1, 2}` (code `c` means trit `t = c − 1`), most significant digit first, stored
//! as `q = ceil(v·256 / 243)`: the 8-bit fixed-point fraction `q/256 ≈ v/243 = 0.c0c1c2c3c4`
//! (base 3). `qh` bytes hold only four codes, as `v = Σ_{n<4} c_n·3^(4−n)` (the last digit is
//! 0: "pre-shifted" so that digit n is extracted exactly like a `qs` byte's).
//!
//! **Extraction.** Digit n is `((q·3^n mod 256) · 3) >> 8`: the u8 wrap-around multiply drops
//! the n leading digits of the fraction, then `·3 >> 8` (in 16 bits) takes the integer part of
//! three times the rest, which is the next digit. The rounding up in the packing keeps every
//! partial fraction at or just above its digit boundary, so all 243 five-digit values (and all
//! 81 four-digit ones) come back exactly (tested exhaustively below). Any byte, even one no
//! encoder writes (243..=255), yields digits in 0..=2, so TQ1_0 trits are always −1, 0 or +1.
//!
//! Value: `t · d`, the trit converted to f32 times `d` widened from f16 (one f32 multiply).

use super::float::f16_from_le;

/// Elements per block.
pub const BLOCK_LEN: usize = 256;
/// Bytes per block.
pub const BLOCK_BYTES: usize = 54;

/// 3^n as the u8 factors of the extraction (3^4 = 81 is the largest used).
const POW3: [u8; 5] = [1, 3, 9, 27, 81];

/// The block's scale `d`, widened to f32.
pub fn scale(block: &[u8; BLOCK_BYTES]) -> f32 {
    f16_from_le(&[block[52], block[53]])
}

/// Digit `n` (0 = most significant) of a packed byte: `((q·3^n mod 256)·3) >> 8`, always 0, 1
/// or 2.
///
/// # Panics
/// If `n ≥ 5` (a byte holds five digits). The decoders only pass `n` from [`position`].
pub fn digit(q: u8, n: usize) -> u8 {
    let shifted = q.wrapping_mul(POW3[n]);
    ((u16::from(shifted) * 3) >> 8) as u8
}

/// Where element `e` (e < 256) of a block lives: (byte index, digit n).
///
/// The byte index is at most 51 (the last `qh` byte) and `n` at most 4, so the callers' lookups
/// `block[byte]` and `digit(_, n)` stay inside the 54-byte block for every `e` in `0..256`.
pub fn position(e: usize) -> (usize, usize) {
    match e {
        0..=159 => (e % 32, e / 32),
        160..=239 => (32 + (e - 160) % 16, (e - 160) / 16),
        _ => (48 + (e - 240) % 4, (e - 240) / 4),
    }
}

/// The code (0..=2) of element `e` (e < 256) of the block.
fn code(block: &[u8; BLOCK_BYTES], e: usize) -> u8 {
    let (byte, n) = position(e);
    digit(block[byte], n)
}

/// Decodes the block's trits `t = code − 1` (−1, 0, +1) and returns its scale.
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
    use crate::quant::encode::pack_tq1_0_digits;

    #[test]
    fn block_size_matches_dtype() {
        assert_eq!((crate::DType::TQ1_0.block_len(), crate::DType::TQ1_0.block_bytes()), (BLOCK_LEN, BLOCK_BYTES));
    }

    #[test]
    fn every_five_digit_value_round_trips() {
        for v in 0..243u16 {
            let codes: [u8; 5] = std::array::from_fn(|n| (v / 3u16.pow(4 - n as u32) % 3) as u8);
            let q = pack_tq1_0_digits(&codes);
            let back: Vec<u8> = (0..5).map(|n| digit(q, n)).collect();
            assert_eq!(back, codes, "v = {v}, q = {q}");
        }
    }

    #[test]
    fn every_four_digit_qh_value_round_trips() {
        for v in 0..81u16 {
            // The fifth digit of a qh byte is 0.
            let codes: [u8; 5] =
                std::array::from_fn(|n| if n < 4 { (v / 3u16.pow(3 - n as u32) % 3) as u8 } else { 0 });
            let q = pack_tq1_0_digits(&codes);
            let back: Vec<u8> = (0..4).map(|n| digit(q, n)).collect();
            assert_eq!(back, codes[..4], "v = {v}, q = {q}");
        }
    }

    #[test]
    fn any_byte_gives_digits_0_to_2() {
        for q in 0..=255u8 {
            assert!((0..5).all(|n| digit(q, n) <= 2), "q = {q}");
        }
        // A byte no encoder writes still decodes: 255 = 0.99.. → digits 2, 2, 2, 2, 2.
        assert_eq!((0..5).map(|n| digit(255, n)).collect::<Vec<_>>(), vec![2, 2, 2, 2, 2]);
    }

    #[test]
    fn positions_cover_the_block_once_as_documented() {
        let mut seen = [[false; 5]; 52];
        for e in 0..BLOCK_LEN {
            let (byte, n) = position(e);
            assert!(!seen[byte][n], "element {e} reuses byte {byte} digit {n}");
            seen[byte][n] = true;
        }
        // qs bytes carry 5 digits, qh bytes 4 (digit 4 of qh is never used).
        assert!(seen[..48].iter().all(|d| d.iter().all(|&s| s)));
        assert!(seen[48..].iter().all(|d| d[..4].iter().all(|&s| s) && !d[4]));
        assert_eq!(position(0), (0, 0));
        assert_eq!(position(33), (1, 1));
        assert_eq!(position(159), (31, 4));
        assert_eq!(position(160 + 16 * 2 + 5), (37, 2));
        assert_eq!(position(240 + 4 * 3 + 1), (49, 3));
    }

    #[test]
    fn hand_built_block() {
        // qs[0] holds elements 0, 32, 64, 96, 128 as codes 2, 0, 1, 2, 0 (v = 162 + 9 + 6 = 177,
        // q = ceil(177·256/243) = 187); qs[40] holds 168, 184, 200, 216, 232 as codes
        // 1, 1, 1, 1, 2 (v = 122, q = 129); qh[3] holds 243, 247, 251, 255 as 1, 1, 1, 2
        // (v = 81 + 27 + 9 + 6 = 123, q = 130). Every other byte packs codes 1, 1, 1, 1, 1
        // (v = 121, q = 128), i.e. all zeros (qh: 1, 1, 1, 1, then 0 → v = 120, q = 127).
        let mut block = [128u8; BLOCK_BYTES];
        block[48..52].fill(127);
        block[0] = 187;
        block[40] = 129;
        block[51] = 130;
        block[52..].copy_from_slice(&0x3800u16.to_le_bytes()); // d = 0.5
        let mut trits = [0i8; BLOCK_LEN];
        assert_eq!(trits_block(&block, &mut trits), 0.5);
        let mut expect = [0i8; BLOCK_LEN];
        for (e, t) in [(0, 1), (32, -1), (64, 0), (96, 1), (128, -1), (232, 1), (243, 0), (247, 0), (251, 0), (255, 1)]
        {
            expect[e] = t;
        }
        assert_eq!(trits, expect);
        let mut out = [0f32; BLOCK_LEN];
        dequantize_block(&block, &mut out);
        for e in 0..BLOCK_LEN {
            assert_eq!(out[e], f32::from(expect[e]) * 0.5, "element {e}");
        }
    }

    #[test]
    fn encoder_round_trips() {
        let trits: [i8; BLOCK_LEN] = std::array::from_fn(|e| [-1i8, 0, 1][(e * 5 + e / 7) % 3]);
        let bytes = crate::quant::encode::encode_tq1_0_row(&trits, half::f16::from_f32(3.0)).expect("one block");
        let block: [u8; BLOCK_BYTES] = bytes.try_into().expect("one block");
        let mut back = [0i8; BLOCK_LEN];
        assert_eq!(trits_block(&block, &mut back), 3.0);
        assert_eq!(back, trits);
    }
}
