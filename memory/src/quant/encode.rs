//! Encoders for the ternary layouts: the inverse of the decoders in [`super::i2_s`],
//! [`super::tq2_0`] and [`super::tq1_0`]; and a quantizer of floats to [`super::q8_0`].
//!
//! They write bytes the way the converters do (bitnet.cpp's `quantize_i2_s`, ggml's
//! `quantize_row_tq1_0_ref` / `quantize_row_tq2_0_ref`), from trits already chosen by the
//! caller: they do not quantize floats. The layouts are not restated here: every element is
//! placed through the decoders' own `position` helpers and block constants, so each byte
//! picture is written once, in its format's module.
//!
//! | function | input | output |
//! |---|---|---|
//! | [`encode_i2_s`] | a whole tensor's trits (multiple of 128), one f32 scale | `n/4` packed bytes + the 32-byte trailer (the scale 8 times) |
//! | [`encode_tq2_0_row`] | trits (multiple of 256), one f16 `d` | 66 bytes per 256 trits, every block with scale `d` |
//! | [`encode_tq1_0_row`] | trits (multiple of 256), one f16 `d` | 54 bytes per 256 trits, every block with scale `d` |
//! | [`encode_q8_0_block`], [`encode_q8_0_row`] | floats (multiple of 32) | 34 bytes per 32 values, quantized as ggml's `quantize_row_q8_0_ref` |
//!
//! Trits must be −1, 0 or +1. The 2-bit layouts could store a code 3 (which decodes as +2),
//! but no converter writes it and TQ1_0 cannot hold it, so an encoder refuses it like any
//! other value outside −1..=1 ([`EncodeError::TritOutOfRange`]).
//!
//! Q8_0 is the one encoder that quantizes floats; see [`encode_q8_0_block`] for ggml's exact
//! arithmetic (rounding half away from zero, `d` rounded to f16 only after the codes are chosen).
//!
//! A TQ row of several blocks gets the same `d` in every block, as the converters write
//! per-tensor-scaled weights. Since TQ rows are whole blocks and rows are contiguous, encoding
//! a whole `rows × cols` tensor as one "row" gives exactly the concatenation of its rows.

use half::f16;

use super::{i2_s, q8_0, tq1_0, tq2_0};
use crate::DType;

/// Why trits could not be encoded.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum EncodeError {
    /// A number of trits that is not a whole number of the layout's blocks.
    #[error("{dtype}: {len} trits are not whole blocks of {block_len}")]
    NotWholeBlocks {
        /// The layout.
        dtype: DType,
        /// The number of trits given.
        len: usize,
        /// The layout's block length.
        block_len: usize,
    },
    /// A number of floats that is not a whole number of the layout's blocks.
    #[error("{dtype}: {len} values are not whole blocks of {block_len}")]
    ValuesNotWholeBlocks {
        /// The layout.
        dtype: DType,
        /// The number of values given.
        len: usize,
        /// The layout's block length.
        block_len: usize,
    },
    /// A trit that is not −1, 0 or +1.
    #[error("{dtype}: trit {value} at index {index} is outside -1..=1")]
    TritOutOfRange {
        /// The layout.
        dtype: DType,
        /// The index of the first bad trit.
        index: usize,
        /// Its value.
        value: i8,
    },
}

/// Checks that `trits` are whole blocks of `block_len` and each in −1..=1.
fn check(dtype: DType, trits: &[i8], block_len: usize) -> Result<(), EncodeError> {
    if !trits.len().is_multiple_of(block_len) {
        return Err(EncodeError::NotWholeBlocks { dtype, len: trits.len(), block_len });
    }
    match trits.iter().position(|t| !(-1..=1).contains(t)) {
        Some(index) => Err(EncodeError::TritOutOfRange { dtype, index, value: trits[index] }),
        None => Ok(()),
    }
}

/// The code of a checked trit: `t + 1` (0, 1 or 2).
fn code(t: i8) -> u8 {
    (t + 1) as u8
}

/// Encodes a whole I2_S tensor: the flattened trits (row after row; the length must be a
/// multiple of 128), packed in 128-element blocks of 32 bytes, followed by the 32-byte
/// trailer holding `scale` as little-endian f32 8 times, as bitnet.cpp's converter writes it.
/// The result has `trits.len() / 4 + 32` bytes and decodes (through
/// [`super::QuantMatrix`], any `rows × cols` split with `cols` a multiple of 128) to
/// `trits[i] · scale`.
pub fn encode_i2_s(trits: &[i8], scale: f32) -> Result<Vec<u8>, EncodeError> {
    check(DType::I2_S, trits, i2_s::BLOCK_LEN)?;
    let packed = trits.len() / i2_s::BLOCK_LEN * i2_s::BLOCK_BYTES;
    let mut bytes = vec![0u8; packed + i2_s::TRAILER_BYTES];
    for (block, chunk) in bytes[..packed].chunks_exact_mut(i2_s::BLOCK_BYTES).zip(trits.chunks_exact(i2_s::BLOCK_LEN)) {
        for (k, &t) in chunk.iter().enumerate() {
            let (byte, shift) = i2_s::position(k);
            block[byte] |= code(t) << shift;
        }
    }
    for copy in bytes[packed..].chunks_exact_mut(4) {
        copy.copy_from_slice(&scale.to_le_bytes());
    }
    Ok(bytes)
}

/// Encodes trits (a multiple of 256) as TQ2_0 blocks of 66 bytes, each with scale `d`.
/// Block `b` holds `trits[256b .. 256(b+1)]` and decodes to `trits[i] · d`.
pub fn encode_tq2_0_row(trits: &[i8], d: f16) -> Result<Vec<u8>, EncodeError> {
    check(DType::TQ2_0, trits, tq2_0::BLOCK_LEN)?;
    let mut bytes = vec![0u8; trits.len() / tq2_0::BLOCK_LEN * tq2_0::BLOCK_BYTES];
    for (block, chunk) in bytes.chunks_exact_mut(tq2_0::BLOCK_BYTES).zip(trits.chunks_exact(tq2_0::BLOCK_LEN)) {
        for (e, &t) in chunk.iter().enumerate() {
            let (byte, shift) = tq2_0::position(e);
            block[byte] |= code(t) << shift;
        }
        block[tq2_0::BLOCK_BYTES - 2..].copy_from_slice(&d.to_le_bytes());
    }
    Ok(bytes)
}

/// Encodes trits (a multiple of 256) as TQ1_0 blocks of 54 bytes, each with scale `d`.
/// Block `b` holds `trits[256b .. 256(b+1)]` and decodes to `trits[i] · d`.
pub fn encode_tq1_0_row(trits: &[i8], d: f16) -> Result<Vec<u8>, EncodeError> {
    /// The packed bytes of a block: 48 `qs` and 4 `qh`, before the f16 `d`.
    const PACKED: usize = tq1_0::BLOCK_BYTES - 2;
    check(DType::TQ1_0, trits, tq1_0::BLOCK_LEN)?;
    let mut bytes = vec![0u8; trits.len() / tq1_0::BLOCK_LEN * tq1_0::BLOCK_BYTES];
    for (block, chunk) in bytes.chunks_exact_mut(tq1_0::BLOCK_BYTES).zip(trits.chunks_exact(tq1_0::BLOCK_LEN)) {
        // The base-3 digits of every packed byte, most significant first; a `qh` byte's fifth
        // digit is never assigned and stays 0 (its "pre-shift").
        let mut digits = [[0u8; 5]; PACKED];
        for (e, &t) in chunk.iter().enumerate() {
            let (byte, n) = tq1_0::position(e);
            digits[byte][n] = code(t);
        }
        for (b, d) in block.iter_mut().zip(&digits) {
            *b = pack_tq1_0_digits(d);
        }
        block[PACKED..].copy_from_slice(&d.to_le_bytes());
    }
    Ok(bytes)
}

/// Quantizes 32 floats to one Q8_0 block exactly as ggml's `quantize_row_q8_0_ref` does:
///
/// ```text
/// amax = max |x[j]|          (ggml's MAX macro, `a > b ? a : b`, from 0, in element order)
/// d    = amax / 127          (f32)
/// id   = d != 0 ? 1/d : 0    (f32)
/// q[j] = roundf(x[j] · id)   (half away from zero), as i8
/// block = d as f16 (round to nearest even), q[0..32]
/// ```
///
/// The codes use the f32 `d`; only the stored scale is rounded to f16, so a block decodes to
/// `q[j] · f16(d)`, within `d/2 + 127·|d − f16(d)|` of `x[j]`. A `d` beyond f16's range is
/// stored as +∞, as in ggml. Non-finite inputs give what ggml's arithmetic gives except that
/// the conversion to i8 is Rust's saturating `as` (NaN → 0) where C's is undefined.
pub fn encode_q8_0_block(x: &[f32; q8_0::BLOCK_LEN]) -> [u8; q8_0::BLOCK_BYTES] {
    let amax = x.iter().fold(0.0f32, |m, &v| if m > v.abs() { m } else { v.abs() });
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut block = [0u8; q8_0::BLOCK_BYTES];
    block[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
    for (q, &v) in block[2..].iter_mut().zip(x) {
        // `f32::round` rounds half away from zero, like C's roundf.
        *q = (v * id).round() as i8 as u8;
    }
    block
}

/// Quantizes floats (a multiple of 32) to Q8_0 blocks of 34 bytes with [`encode_q8_0_block`]:
/// block `b` holds `x[32b .. 32(b+1)]`.
pub fn encode_q8_0_row(x: &[f32]) -> Result<Vec<u8>, EncodeError> {
    if !x.len().is_multiple_of(q8_0::BLOCK_LEN) {
        return Err(EncodeError::ValuesNotWholeBlocks { dtype: DType::Q8_0, len: x.len(), block_len: q8_0::BLOCK_LEN });
    }
    let mut bytes = Vec::with_capacity(x.len() / q8_0::BLOCK_LEN * q8_0::BLOCK_BYTES);
    let mut rest = x;
    while let Some((block, tail)) = rest.split_first_chunk::<{ q8_0::BLOCK_LEN }>() {
        bytes.extend_from_slice(&encode_q8_0_block(block));
        rest = tail;
    }
    Ok(bytes)
}

/// Packs five base-3 digits (most significant first, each 0..=2) into a TQ1_0 byte as ggml
/// does: `q = ceil(v·256 / 243)` with `v = Σ_n digits[n]·3^(4−n)`. [`tq1_0::digit`] reads
/// them back (the module docs of [`tq1_0`] say why the rounding up makes that exact).
///
/// Digits above 2 are not a TQ1_0 byte; they give some byte without panicking.
pub(crate) fn pack_tq1_0_digits(digits: &[u8; 5]) -> u8 {
    let v = digits.iter().fold(0u32, |v, &c| v * 3 + u32::from(c));
    // v ≤ 242 for digits in 0..=2, so the quotient is at most 255.
    u8::try_from((v * 256).div_ceil(243)).unwrap_or(u8::MAX)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::test_vectors::{le_f32s, FIXTURE_ROWS};
    use super::super::QuantMatrix;
    use super::*;

    /// Decodes `bytes` as one row of `trits.len()` elements: its trits, its scales and its values.
    fn decode(dtype: DType, bytes: &[u8], cols: usize) -> (Vec<i8>, Vec<f32>, Vec<f32>) {
        let m = QuantMatrix::new(dtype, bytes, 1, cols).expect("the encoder writes the documented size");
        let mut trits = vec![0i8; cols];
        let mut scales = vec![0f32; m.ternary_scales_per_row().expect("ternary")];
        m.ternary_row(0, &mut trits, &mut scales).expect("row 0, sized buffers");
        let mut values = vec![0f32; cols];
        m.dequantize_row(0, &mut values).expect("row 0, sized buffer");
        (trits, scales, values)
    }

    fn encode(dtype: DType, trits: &[i8], scale: f32) -> Result<Vec<u8>, EncodeError> {
        match dtype {
            DType::I2_S => encode_i2_s(trits, scale),
            DType::TQ2_0 => encode_tq2_0_row(trits, f16::from_f32(scale)),
            DType::TQ1_0 => encode_tq1_0_row(trits, f16::from_f32(scale)),
            _ => unreachable!("only ternary layouts are encoded"),
        }
    }

    proptest! {
        #[test]
        fn random_trits_round_trip_through_the_decoders(
            (dtype, trits) in prop_oneof![Just(DType::I2_S), Just(DType::TQ1_0), Just(DType::TQ2_0)]
                .prop_flat_map(|dtype| (Just(dtype), (1usize..=5).prop_flat_map(move |blocks| {
                    proptest::collection::vec(-1i8..=1, blocks * dtype.block_len())
                }))),
            scale in any::<u16>().prop_map(f16::from_bits).prop_filter("finite", |d| d.is_finite()),
        ) {
            // An f16 scale, so that every layout stores it exactly.
            let scale = scale.to_f32();
            let bytes = encode(dtype, &trits, scale).expect("whole blocks of -1..=1");
            prop_assert_eq!(bytes.len(), dtype.tensor_bytes(1, trits.len()).expect("small"));
            let (got, scales, values) = decode(dtype, &bytes, trits.len());
            prop_assert_eq!(&got, &trits);
            prop_assert!(scales.iter().all(|s| s.to_bits() == scale.to_bits()), "{:?} vs {}", scales, scale);
            for (i, (&v, &t)) in values.iter().zip(&trits).enumerate() {
                prop_assert_eq!(v.to_bits(), (f32::from(t) * scale).to_bits(), "element {}", i);
            }
        }
    }

    #[test]
    fn fixture_weights_encode_to_the_fixture_bytes() {
        for v in &FIXTURE_ROWS {
            // The weights are s·T (fixtures/README.md § 1); the scale file of the d = 1 variant
            // holds s. Trits from the F32 rows, independently of any ternary decoder.
            let s = le_f32s(v.tq2_0_d1_scale)[0];
            let d = f16::from_f32(s);
            assert_eq!(d.to_f32(), s, "{}: the fixture scale is exact in f16", v.name);
            let trits: Vec<i8> = le_f32s(v.f32)
                .iter()
                .map(|&w| {
                    let t = w / s;
                    assert!(t == -1.0 || t == 0.0 || t == 1.0, "{}: {w} is not a trit times {s}", v.name);
                    t as i8
                })
                .collect();
            let i2_s = encode_i2_s(&trits, s).expect("whole blocks");
            // rows01 is the start of the tensor; the trailer follows the whole tensor's blocks.
            assert_eq!(&i2_s[..v.i2_s.len()], v.i2_s, "{}: I2_S rows", v.name);
            assert_eq!(&i2_s[v.i2_s.len()..], v.i2_s_trailer, "{}: I2_S trailer", v.name);
            assert_eq!(encode_tq2_0_row(&trits, d).expect("whole blocks"), v.tq2_0, "{}: TQ2_0", v.name);
            assert_eq!(encode_tq1_0_row(&trits, d).expect("whole blocks"), v.tq1_0, "{}: TQ1_0", v.name);
            assert_eq!(encode_tq2_0_row(&trits, f16::ONE).expect("whole blocks"), v.tq2_0_d1, "{}: TQ2_0 d=1", v.name);
        }
    }

    #[test]
    fn i2_s_trailer_repeats_the_scale_and_blocks_follow_the_flattened_tensor() {
        // Block 1 (elements 128..256) holds a single +1 at element 128 + 32 + 5: byte 32 + 5,
        // bits 5..4; everything else is 0 (code 1, 0b01 in every bit pair).
        let mut trits = vec![0i8; 256];
        trits[128 + 32 + 5] = 1;
        let bytes = encode_i2_s(&trits, -0.625).expect("whole blocks");
        assert_eq!(bytes.len(), 64 + 32);
        for (i, &b) in bytes[..64].iter().enumerate() {
            assert_eq!(b, if i == 37 { 0b01_10_01_01 } else { 0b01_01_01_01 }, "byte {i}");
        }
        assert!(bytes[64..].chunks(4).all(|c| c == (-0.625f32).to_le_bytes()));
        assert_eq!(encode_i2_s(&[], 2.0).expect("zero blocks"), [2.0f32.to_le_bytes(); 8].concat());
    }

    #[test]
    fn tq_blocks_each_carry_d() {
        let d = f16::from_f32(0.375);
        let trits = vec![1i8; 512];
        for (bytes, block_bytes) in [
            (encode_tq2_0_row(&trits, d).expect("2 blocks"), tq2_0::BLOCK_BYTES),
            (encode_tq1_0_row(&trits, d).expect("2 blocks"), tq1_0::BLOCK_BYTES),
        ] {
            assert_eq!(bytes.len(), 2 * block_bytes);
            for block in bytes.chunks(block_bytes) {
                assert_eq!(block[block_bytes - 2..], d.to_le_bytes());
            }
        }
    }

    /// The nine test blocks of `q8_0_oracle.py` below, value for value (every value is an
    /// integer times a power of two, so both languages compute the same f32s).
    fn q8_0_oracle_input() -> Vec<f32> {
        let block = |b: usize| -> Vec<f32> {
            (0..32usize)
                .map(|j| {
                    let i = (b * 32 + j) as i64;
                    let j = j as i64;
                    match b {
                        0 if j == 0 => 127.0,
                        0 if j % 2 == 1 => -((j / 2) as f64 + 0.5),
                        0 => (j / 2) as f64 + 0.5,
                        1 => 0.0,
                        2 => (j - 20) as f64 * 0.25,
                        3..=6 => ((i * 7919 + 13) % 2001 - 1000) as f64 / 64.0 * 2f64.powi([-3, 0, 4, -10][b - 3]),
                        7 => ((i * 31 + 7) % 201 - 100) as f64 * 2f64.powi(-17),
                        _ => (j - 16) as f64 * 2f64.powi(20),
                    }
                })
                .map(|v| v as f32)
                .collect()
        };
        (0..9).flat_map(block).collect()
    }

    // ---- BEGIN q8_0_oracle.py ----
    // # gguf-py's Q8_0 quantization (bit-exact with ggml's quantize_row_q8_0_ref) of nine test blocks.
    // # Usage: python3 q8_0_oracle.py   (needs numpy and gguf==0.19.0); prints the blocks as hex.
    // import numpy as np
    // from gguf import GGMLQuantizationType as T, quants
    //
    // def block(b):
    //     j = np.arange(32)
    //     i = b * 32 + j
    //     if b == 0:  # ties: x·id lands on k + 0.5 (amax 127, so d = id = 1)
    //         return np.where(j == 0, 127.0, np.where(j % 2 == 1, -(j // 2 + 0.5), j // 2 + 0.5))
    //     if b == 1:  # all zeros: d = id = 0
    //         return np.zeros(32)
    //     if b == 2:  # the largest magnitude is negative
    //         return (j - 20) * 0.25
    //     if 3 <= b <= 6:  # pseudo-random multiples of 2^-6, scaled by 2^-3, 2^0, 2^4, 2^-10
    //         return ((i * 7919 + 13) % 2001 - 1000) / 64 * 2.0 ** [-3, 0, 4, -10][b - 3]
    //     if b == 7:  # d is an f16 subnormal
    //         return ((i * 31 + 7) % 201 - 100) * 2.0 ** -17
    //     if b == 8:  # d overflows f16 to +inf, as in ggml
    //         return (j - 16) * 2.0 ** 20
    // values = np.concatenate([block(b) for b in range(9)]).astype(np.float32)
    // with np.errstate(over="ignore"):
    //     q = quants.quantize(values, T.Q8_0)
    // print(q.tobytes().hex())
    // ---- END q8_0_oracle.py ----
    /// What `q8_0_oracle.py` printed: one line of hex per 34-byte block.
    const Q8_0_ORACLE_HEX: [&str; 9] = [
        "003c7fff02fe03fd04fc05fb06fa07f908f809f70af60bf50cf40df30ef20ff110f0",
        "00000000000000000000000000000000000000000000000000000000000000000000",
        "0a2981878e949aa1a7adb4bac0c7cdd4dae0e7edf3fa00060d131920262c33394046",
        "ca236e63584d43382d22170c01f6ebe0d5cac0b5aa9f94897f74695e53483e33281d",
        "9b2f1207fcf1e6dacfc4b9aea3978c817d72675b50453a2f23180d02f7ece0d5cabf",
        "d83fb6aba0968b7f74695e54493e33281d1308fdf2e7dcd2c7bcb1a69b91867a6f64",
        "dc07594f44392e23180e03f8ede2d8cdc2b7aca1978c81756a5f544a3f34291e1309",
        "610016406988b1da032c557e9dc6ef18416a89b2db042d567f9ec7f019426b8ab3dc",
        "007c81899199a1a9b1b9c0c8d0d8e0e8f0f8000810182028303840474f575f676f77",
    ];

    fn hex_bytes(hex: &str) -> Vec<u8> {
        (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex")).collect()
    }

    #[test]
    fn q8_0_matches_gguf_py_which_matches_ggml() {
        let input = q8_0_oracle_input();
        let got = encode_q8_0_row(&input).expect("whole blocks");
        assert_eq!(got.len(), 9 * q8_0::BLOCK_BYTES);
        for (b, (block, hex)) in got.chunks(q8_0::BLOCK_BYTES).zip(Q8_0_ORACLE_HEX).enumerate() {
            assert_eq!(block, hex_bytes(hex), "block {b}");
        }
    }

    #[test]
    fn q8_0_known_values() {
        // amax 127 makes d = id = 1: the codes are the values rounded half away from zero
        // (2.5 → 3 and −2.5 → −3, where round-half-even would give ±2).
        let mut x = [0f32; 32];
        x[..8].copy_from_slice(&[127.0, 2.5, -2.5, 0.5, -0.5, 1.49, -126.5, 3.0]);
        let block = encode_q8_0_block(&x);
        assert_eq!(block[..2], [0x00, 0x3c], "d = 1.0 as f16");
        let codes: Vec<i8> = block[2..10].iter().map(|&b| b as i8).collect();
        assert_eq!(codes, [127, 3, -3, 1, -1, 1, -127, 3]);
        assert!(block[10..].iter().all(|&b| b == 0));

        // amax 1: d = 1/127 = 0.007874016 rounds to f16 0x2008 (0.00787353515625), while the
        // codes use the f32 d: 1 → 127, −0.5 → round(−63.5) = −64.
        let mut x = [0f32; 32];
        x[0] = 1.0;
        x[1] = -0.5;
        let block = encode_q8_0_block(&x);
        assert_eq!(u16::from_le_bytes([block[0], block[1]]), 0x2008);
        assert_eq!([block[2] as i8, block[3] as i8], [127, -64]);

        // All zeros: d = 0 and id = 0, so every code is 0.
        assert_eq!(encode_q8_0_block(&[0.0; 32]), [0u8; 34]);
        // The largest magnitude may be negative; its code is −127.
        let mut x = [0.25f32; 32];
        x[31] = -2.0;
        let block = encode_q8_0_block(&x);
        assert_eq!(block[33] as i8, -127);
        assert_eq!(block[2] as i8, 16); // 0.25 · 63.5 = 15.875 → 16
    }

    /// `|x − y| ≤ d·(1/2 + 1e-5) + |q|·|d − f16(d)|` for every element of a decoded block: half a
    /// step of the f32 `d` (plus the rounding of `x·id`), plus the error of storing `d` as f16.
    fn check_q8_0_error(x: &[f32], bytes: &[u8], what: &str) -> Result<(), String> {
        for (b, (block, x)) in bytes.chunks_exact(q8_0::BLOCK_BYTES).zip(x.chunks_exact(32)).enumerate() {
            let block: &[u8; q8_0::BLOCK_BYTES] = block.try_into().map_err(|_| "34 bytes".to_string())?;
            let mut y = [0f32; 32];
            q8_0::dequantize_block(block, &mut y);
            let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = f64::from(amax / 127.0);
            let d16 = f64::from(q8_0::scale(block));
            for (j, (&x, &y)) in x.iter().zip(&y).enumerate() {
                let q = f64::from(block[2 + j] as i8);
                let bound = d * (0.5 + 1e-5) + q.abs() * (d - d16).abs();
                let err = (f64::from(x) - f64::from(y)).abs();
                if err > bound {
                    return Err(format!("{what}: block {b} element {j}: {x} -> {y}, error {err} > {bound}"));
                }
            }
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn q8_0_random_blocks_decode_within_the_error_bound(
            x in (1usize..=4).prop_flat_map(|blocks| proptest::collection::vec(-1e4f32..1e4, blocks * 32)),
        ) {
            let bytes = encode_q8_0_row(&x).expect("whole blocks");
            prop_assert_eq!(bytes.len(), x.len() / 32 * 34);
            if let Err(e) = check_q8_0_error(&x, &bytes, "random") {
                prop_assert!(false, "{}", e);
            }
        }
    }

    #[test]
    fn q8_0_decodes_within_half_a_step_plus_the_f16_rounding_of_d() {
        let input = q8_0_oracle_input();
        // Blocks 0..=7 (block 8's d overflows f16 and decodes to ±inf or NaN, as in ggml).
        let input = &input[..8 * 32];
        let bytes = encode_q8_0_row(input).expect("whole blocks");
        check_q8_0_error(input, &bytes, "oracle blocks").expect("within the bound");
    }

    #[test]
    fn bad_lengths_and_trits_are_typed_errors() {
        assert_eq!(
            encode_i2_s(&[0; 100], 1.0),
            Err(EncodeError::NotWholeBlocks { dtype: DType::I2_S, len: 100, block_len: 128 })
        );
        assert_eq!(
            encode_tq2_0_row(&[0; 128], f16::ONE),
            Err(EncodeError::NotWholeBlocks { dtype: DType::TQ2_0, len: 128, block_len: 256 })
        );
        assert_eq!(
            encode_tq1_0_row(&[0; 257], f16::ONE),
            Err(EncodeError::NotWholeBlocks { dtype: DType::TQ1_0, len: 257, block_len: 256 })
        );
        let mut trits = vec![0i8; 256];
        trits[200] = 2;
        trits[201] = -2;
        assert_eq!(
            encode_i2_s(&trits, 1.0),
            Err(EncodeError::TritOutOfRange { dtype: DType::I2_S, index: 200, value: 2 })
        );
        assert_eq!(
            encode_tq2_0_row(&trits, f16::ONE),
            Err(EncodeError::TritOutOfRange { dtype: DType::TQ2_0, index: 200, value: 2 })
        );
        trits[200] = 0;
        let e = encode_tq1_0_row(&trits, f16::ONE).expect_err("-2 is not a trit");
        assert_eq!(e, EncodeError::TritOutOfRange { dtype: DType::TQ1_0, index: 201, value: -2 });
        assert_eq!(e.to_string(), "TQ1_0: trit -2 at index 201 is outside -1..=1");
        assert_eq!(
            EncodeError::NotWholeBlocks { dtype: DType::I2_S, len: 100, block_len: 128 }.to_string(),
            "I2_S: 100 trits are not whole blocks of 128"
        );
        let e = encode_q8_0_row(&[0.0; 48]).expect_err("48 is not whole blocks of 32");
        assert_eq!(e, EncodeError::ValuesNotWholeBlocks { dtype: DType::Q8_0, len: 48, block_len: 32 });
        assert_eq!(e.to_string(), "Q8_0: 48 values are not whole blocks of 32");
    }
}
