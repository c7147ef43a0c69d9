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
    /// x86_64 with AVX-512 F, BW and VNNI besides AVX2 (Ice Lake, Sapphire Rapids, Zen 4 and
    /// later): `vpdpbusd` on 64-byte registers for ternary weights; the other kernels are
    /// [`SimdLevel::Avx2`]'s.
    Avx512Vnni,
    /// aarch64's baseline Advanced SIMD: widening multiplies (`smull`, `smlal2`, `sadalp`) for ternary
    /// weights, FMA for float weights.
    Neon,
    /// aarch64 with the dot-product extension (ARMv8.2 `dotprod`): `sdot` for ternary
    /// weights, otherwise as [`SimdLevel::Neon`].
    NeonDot,
}

impl SimdLevel {
    /// Every level, slowest first (each architecture's own levels in that order; a CPU
    /// supports the portable level and some of one architecture's).
    pub const ALL: [SimdLevel; 5] =
        [SimdLevel::Portable, SimdLevel::Avx2, SimdLevel::Avx512Vnni, SimdLevel::Neon, SimdLevel::NeonDot];

    /// The fastest level this CPU supports.
    pub fn detect() -> SimdLevel {
        SimdLevel::ALL.into_iter().rev().find(|l| l.is_supported()).unwrap_or(SimdLevel::Portable)
    }

    /// True when this CPU can run the level's kernels.
    pub fn is_supported(self) -> bool {
        match self {
            SimdLevel::Portable => true,
            SimdLevel::Avx2 => avx2_supported(),
            SimdLevel::Avx512Vnni => avx2_supported() && avx512_vnni_supported(),
            SimdLevel::Neon => neon_supported(false),
            SimdLevel::NeonDot => neon_supported(true),
        }
    }

    /// The level's name as `--simd` and `PUREBEE_CPU_SIMD` spell it.
    pub fn name(self) -> &'static str {
        match self {
            SimdLevel::Portable => "portable",
            SimdLevel::Avx2 => "avx2",
            SimdLevel::Avx512Vnni => "avx512-vnni",
            SimdLevel::Neon => "neon",
            SimdLevel::NeonDot => "neon-dot",
        }
    }

    /// The level named `name` (see [`SimdLevel::name`]).
    pub fn from_name(name: &str) -> Option<SimdLevel> {
        SimdLevel::ALL.into_iter().find(|l| l.name() == name)
    }
}

/// A [`SimdLevel`] this CPU supports: what the kernels' dispatchers take, so that safe code
/// cannot run a level's `#[target_feature]` kernels on a CPU without those features (the
/// `// SAFETY:` comments of the dispatchers rest on it). Made only by [`Simd::new`], which
/// checks, and [`Simd::detect`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Simd(SimdLevel);

impl Simd {
    /// The portable kernels, which every CPU runs.
    pub const PORTABLE: Simd = Simd(SimdLevel::Portable);

    /// `level`, if this CPU supports it.
    pub fn new(level: SimdLevel) -> Option<Simd> {
        level.is_supported().then_some(Simd(level))
    }

    /// The fastest level this CPU supports.
    pub fn detect() -> Simd {
        Simd(SimdLevel::detect())
    }

    /// Every level this CPU supports, slowest first.
    pub fn all_supported() -> impl Iterator<Item = Simd> {
        SimdLevel::ALL.into_iter().filter_map(Simd::new)
    }

    /// The level.
    pub fn get(self) -> SimdLevel {
        self.0
    }
}

impl fmt::Display for Simd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
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

#[cfg(target_arch = "x86_64")]
fn avx512_vnni_supported() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni")
}

#[cfg(not(target_arch = "x86_64"))]
fn avx512_vnni_supported() -> bool {
    false
}

/// NEON, and `dotprod` too when `dot`.
#[cfg(target_arch = "aarch64")]
fn neon_supported(dot: bool) -> bool {
    std::arch::is_aarch64_feature_detected!("neon") && (!dot || std::arch::is_aarch64_feature_detected!("dotprod"))
}

#[cfg(not(target_arch = "aarch64"))]
fn neon_supported(_dot: bool) -> bool {
    false
}
