//! Plain element types: F32, F16, BF16, I8, I16, I32, U32, each decoded to f32.
//!
//! Every plain type is a "block" of one element, stored little-endian (GGUF is little-endian,
//! docs/formats.md § GGUF):
//!
//! ```text
//! F32   [b0 b1 b2 b3]  IEEE 754 binary32                          exact
//! F16   [b0 b1]        IEEE 754 binary16 (ggml_fp16_t)             exact (subnormals, ±inf, NaN kept)
//! BF16  [b0 b1]        bfloat16: the top 16 bits of a binary32     exact
//! I8    [b0]           two's complement                            exact
//! I16   [b0 b1]        two's complement                            exact
//! I32   [b0 b1 b2 b3]  two's complement                            rounded to nearest f32 beyond ±2^24
//! U32   [b0 b1 b2 b3]  unsigned (token ids, ARGMAX results)        rounded to nearest f32 beyond 2^24
//! ```
//!
//! F16 and BF16 go through `half::f16::from_bits` / `half::bf16::from_bits`, which widen
//! exactly (the same values as ggml's `GGML_FP16_TO_FP32` and `GGML_BF16_TO_FP32`). The
//! integer types are converted with `as f32`, Rust's round-to-nearest-even conversion.

use half::{bf16, f16};

/// An f32 from its 4 little-endian bytes.
pub fn f32_from_le(b: &[u8; 4]) -> f32 {
    f32::from_le_bytes(*b)
}

/// An f16, widened to f32 exactly, from its 2 little-endian bytes.
pub fn f16_from_le(b: &[u8; 2]) -> f32 {
    f16::from_bits(u16::from_le_bytes(*b)).to_f32()
}

/// A bf16, widened to f32 exactly, from its 2 little-endian bytes.
pub fn bf16_from_le(b: &[u8; 2]) -> f32 {
    bf16::from_bits(u16::from_le_bytes(*b)).to_f32()
}

/// An i8 as f32 (exact).
pub fn i8_from_le(b: &[u8; 1]) -> f32 {
    f32::from(i8::from_le_bytes(*b))
}

/// An i16 as f32 (exact).
pub fn i16_from_le(b: &[u8; 2]) -> f32 {
    f32::from(i16::from_le_bytes(*b))
}

/// An i32 as f32, rounded to nearest (ties to even) when |v| > 2^24.
pub fn i32_from_le(b: &[u8; 4]) -> f32 {
    i32::from_le_bytes(*b) as f32
}

/// A u32 as f32, rounded to nearest (ties to even) when v > 2^24.
pub fn u32_from_le(b: &[u8; 4]) -> f32 {
    u32::from_le_bytes(*b) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_bytes_are_little_endian() {
        assert_eq!(f32_from_le(&[0x00, 0x00, 0x80, 0x3f]), 1.0);
        assert_eq!(f32_from_le(&[0x00, 0x00, 0x00, 0xc0]), -2.0);
        assert!(f32_from_le(&[0x01, 0x00, 0xc0, 0x7f]).is_nan());
    }

    #[test]
    fn f16_widens_exactly_including_subnormals_and_specials() {
        assert_eq!(f16_from_le(&[0x00, 0x3c]), 1.0);
        assert_eq!(f16_from_le(&[0x00, 0xc0]), -2.0);
        assert_eq!(f16_from_le(&[0xff, 0x7b]), 65504.0); // largest finite f16
        assert_eq!(f16_from_le(&[0x01, 0x00]), 2f32.powi(-24)); // smallest subnormal
        assert_eq!(f16_from_le(&[0x01, 0x02]).to_bits(), (513.0 * 2f32.powi(-24)).to_bits());
        assert_eq!(f16_from_le(&[0x00, 0x80]).to_bits(), (-0.0f32).to_bits());
        assert_eq!(f16_from_le(&[0x00, 0x7c]), f32::INFINITY);
        assert!(f16_from_le(&[0x01, 0x7e]).is_nan());
        // 0x2c7d is the f16 nearest 0.07013: 1149/16384 = 0.07012939453125, the fixtures' attn_q scale.
        assert_eq!(f16_from_le(&[0x7d, 0x2c]), 1149.0 / 16384.0);
    }

    #[test]
    fn bf16_is_the_top_half_of_an_f32() {
        assert_eq!(bf16_from_le(&[0x80, 0x3f]), 1.0);
        assert_eq!(bf16_from_le(&[0x49, 0x40]), f32::from_bits(0x4049_0000)); // 3.140625
        assert_eq!(bf16_from_le(&[0x80, 0xff]), f32::NEG_INFINITY);
        assert_eq!(bf16_from_le(&[0x01, 0x00]).to_bits(), 0x0001_0000); // f32 subnormal
    }

    #[test]
    fn integers_are_twos_complement_little_endian() {
        assert_eq!(i8_from_le(&[0xff]), -1.0);
        assert_eq!(i8_from_le(&[0x80]), -128.0);
        assert_eq!(i16_from_le(&[0x00, 0x80]), -32768.0);
        assert_eq!(i16_from_le(&[0x34, 0x12]), 4660.0);
        assert_eq!(i32_from_le(&[0xfe, 0xff, 0xff, 0xff]), -2.0);
        assert_eq!(i32_from_le(&[0x01, 0x00, 0x00, 0x01]), 16_777_216.0); // 2^24 + 1 rounds to even
        assert_eq!(u32_from_le(&[0xff, 0xff, 0xff, 0xff]), 4_294_967_296.0);
        assert_eq!(u32_from_le(&[0x00, 0x20, 0x00, 0x00]), 8192.0);
    }
}
