//! f16 scales widened to f32, exactly: the block scales of every quantized layout the
//! kernels read (TQ2_0's `d`, Q4_0/Q4_1/Q8_0's `d` and `m`).

/// An f16's value as f32 (exact), inline: the `half` crate's conversion is a call through
/// a run-time feature check, too slow for one scale per 32 or 256 weights.
#[inline(always)]
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h as u32) & 0x8000) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let mant = (h & 0x3ff) as u32;
    match exp {
        // ±0 and subnormals: mant · 2⁻²⁴, exact in f32.
        0 => f32::from_bits(sign | (mant as f32 * (1.0 / 16_777_216.0)).to_bits()),
        // ±∞ and NaN (payload kept).
        0x1f => f32::from_bits(sign | 0x7f80_0000 | (mant << 13)),
        _ => f32::from_bits(sign | ((exp + 112) << 23) | (mant << 13)),
    }
}

/// The f16 at bytes `i..i + 2` of `b`, as f32.
pub(super) fn f16_at(b: &[u8], i: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[i], b[i + 1]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_conversion_is_exact_for_every_bit_pattern() {
        for h in 0..=u16::MAX {
            let want = half::f16::from_bits(h).to_f32();
            let got = f16_to_f32(h);
            assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "{h:#06x}: {got} vs {want}");
        }
    }
}
