//! SplitMix64: the deterministic stream every test here draws its data from, so that a
//! failing case is reproduced from its seed alone, on every platform.

/// A SplitMix64 generator; the state is the seed.
#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi)`, 53 bits.
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n` (modulo bias is irrelevant for test data).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// A random byte (the low 8 bits).
    pub fn byte(&mut self) -> u8 {
        self.next_u64() as u8
    }

    /// +1 or −1.
    pub fn sign(&mut self) -> f32 {
        if self.below(2) == 0 {
            1.0
        } else {
            -1.0
        }
    }

    /// Uniform in `[-1, 1)` with 24 significant bits.
    pub fn symmetric_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    /// The high 32 bits.
    pub fn bits32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }
}
