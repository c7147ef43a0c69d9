//! Encoders for the ternary layouts: the inverse of the decoders in [`super::i2_s`],
//! [`super::tq2_0`] and [`super::tq1_0`].
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
//!
//! Trits must be −1, 0 or +1. The 2-bit layouts could store a code 3 (which decodes as +2),
//! but no converter writes it and TQ1_0 cannot hold it, so an encoder refuses it like any
//! other value outside −1..=1 ([`EncodeError::TritOutOfRange`]).
//!
//! A TQ row of several blocks gets the same `d` in every block, as the converters write
//! per-tensor-scaled weights. Since TQ rows are whole blocks and rows are contiguous, encoding
//! a whole `rows × cols` tensor as one "row" gives exactly the concatenation of its rows.

use half::f16;

use super::{i2_s, tq1_0, tq2_0};
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
    if trits.len() % block_len != 0 {
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
    }
}
