//! SplitMix64 (Steele, Lea and Flood, 2014; the constants of Vigna's reference
//! `splitmix64.c`): a 64-bit state advanced by the golden-ratio increment and mixed. Small,
//! fast, and it passes BigCrush: enough for sampling, synthetic weights, benchmark prompts
//! and test data. The same seed gives the same stream on every platform, so a sampled
//! answer, a synthetic file or a failing test case is reproduced from its seed alone.
//!
//! This crate knows nothing else: every crate may use it. (The CPU engine's heap-free
//! emulation cross-check keeps a copy of its own, so that it runs inside a bare CPU
//! emulator without linking anything.)

#![forbid(unsafe_code)]

/// A SplitMix64 generator; the state is the seed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// A generator whose first output depends on `seed` only.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// A generator for stream `stream` of `seed`: independent streams for independent
    /// uses (one per tensor, say), whatever order they are drawn in.
    pub fn stream(seed: u64, stream: u64) -> SplitMix64 {
        let mut mix = SplitMix64::new(seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03));
        SplitMix64::new(mix.next_u64())
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform integer in `0..n` (`n > 0`), by the multiply-shift method (bias below
    /// `n / 2^64`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A uniform f64 in `[0, 1)` with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A uniform f64 in `[lo, hi)`, 53 random bits.
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.uniform()
    }

    /// A uniform f32 in `[-1, 1)` with 24 significant bits.
    pub fn symmetric_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    /// +1 or −1.
    pub fn sign(&mut self) -> f32 {
        if self.next_u64() >> 63 == 0 {
            1.0
        } else {
            -1.0
        }
    }

    /// A random byte (the low 8 bits of a draw).
    pub fn byte(&mut self) -> u8 {
        self.next_u64() as u8
    }

    /// The high 32 bits of a draw.
    pub fn bits32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference implementation's first outputs for seed 0 and 1234567.
    #[test]
    fn matches_the_reference_stream() {
        assert_eq!(SplitMix64::new(0).next_u64(), 0xE220_A839_7B1D_CDAF);
        let mut r = SplitMix64::new(1234567);
        assert_eq!(r.next_u64(), 6457827717110365317);
        assert_eq!(r.next_u64(), 3203168211198807973);
    }

    #[test]
    fn draws_stay_in_their_ranges() {
        let mut r = SplitMix64::new(7);
        for n in [1u64, 2, 3, 1000, u64::MAX] {
            assert!((0..200).all(|_| r.below(n) < n));
        }
        assert!((0..1000).all(|_| (0.0..1.0).contains(&r.uniform())));
        assert!((0..1000).all(|_| (-1.0..1.0).contains(&r.symmetric_f32())));
    }
}
