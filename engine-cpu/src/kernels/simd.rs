//! Which SIMD path the kernels take, chosen once at run time from the CPU's features.

use std::fmt;

/// A family of kernels. Every kernel has a portable version; the others are used only when
/// [`SimdLevel::is_supported`] says the CPU runs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SimdLevel {
    /// Plain Rust that any target compiles (the compiler vectorizes what it can for the
    /// target's baseline: SSE2 on x86_64, NEON on aarch64).
    Portable,
    /// x86_64 with AVX2, FMA and F16C (Haswell, Zen and later): 256-bit integer dot
    /// products (`vpmaddubsw`) for ternary weights, FMA for float weights.
    Avx2,
}

impl SimdLevel {
    /// Every level, slowest first.
    pub const ALL: [SimdLevel; 2] = [SimdLevel::Portable, SimdLevel::Avx2];

    /// The fastest level this CPU supports.
    pub fn detect() -> SimdLevel {
        if SimdLevel::Avx2.is_supported() {
            SimdLevel::Avx2
        } else {
            SimdLevel::Portable
        }
    }

    /// True when this CPU can run the level's kernels.
    pub fn is_supported(self) -> bool {
        match self {
            SimdLevel::Portable => true,
            SimdLevel::Avx2 => avx2_supported(),
        }
    }

    /// The level's name as `--simd` and `PUREBEE_CPU_SIMD` spell it.
    pub fn name(self) -> &'static str {
        match self {
            SimdLevel::Portable => "portable",
            SimdLevel::Avx2 => "avx2",
        }
    }

    /// The level named `name` (see [`SimdLevel::name`]).
    pub fn from_name(name: &str) -> Option<SimdLevel> {
        SimdLevel::ALL.into_iter().find(|l| l.name() == name)
    }
}

impl fmt::Display for SimdLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(target_arch = "x86_64")]
fn avx2_supported() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
}

#[cfg(not(target_arch = "x86_64"))]
fn avx2_supported() -> bool {
    false
}
