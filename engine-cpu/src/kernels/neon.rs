//! What the NEON kernels of every family ([`SimdLevel::Neon`] and [`SimdLevel::NeonDot`])
//! share: bounds-checked loads, the 16-byte integer dot product, and Q4's nibble unpacking.
//! The kernels are in `ternary/neon.rs`, `linear/neon.rs` and `linear_int8/neon.rs`; the
//! dispatchers route both levels there.
//!
//! The integer kernels are generic over `SDOT`: `true` multiplies with `sdot` (ARMv8.2
//! `dotprod`), `false` with the widening multiplies of baseline NEON. Only [`sdot`] picks
//! `true`, after detecting `dotprod`, so `NeonDot` on a CPU without it still runs.
//!
//! SILU has no NEON kernel: NEON is the aarch64 baseline, so `silu`'s portable loop already
//! compiles to four-lane NEON code (checked: `fdiv v.4s`, `frintx v.4s`, `fmaxnm v.4s`), which
//! is all a hand-written one would be. Nor is there a prefetch as in the x86 GEMV kernels
//! (the aarch64 `_prefetch` intrinsic is unstable; to measure on hardware first).

use std::arch::aarch64::*;
use std::arch::asm;

use super::{Simd, SimdLevel};

/// True when the `SDOT = true` kernels may run: `level` asks for them, and being a [`Simd`],
/// the CPU has `dotprod` (the one place that picks them, which the `sdot` in `dot16` relies on).
pub(super) fn sdot(level: Simd) -> bool {
    level.get() == SimdLevel::NeonDot
}

/// The first 16 bytes of `s` (bounds checked; the check goes when the caller's slicing
/// already proves it).
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn u8x16(s: &[u8]) -> uint8x16_t {
    assert!(s.len() >= 16);
    // SAFETY: `s` holds at least 16 bytes (asserted); `ld1` has no alignment requirement.
    unsafe { vld1q_u8(s.as_ptr()) }
}

/// The first 16 bytes of `s`, as i8.
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn i8x16(s: &[i8]) -> int8x16_t {
    assert!(s.len() >= 16);
    // SAFETY: as in `u8x16`.
    unsafe { vld1q_s8(s.as_ptr()) }
}

/// The first four floats of `s`.
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn f32x4(s: &[f32]) -> float32x4_t {
    assert!(s.len() >= 4);
    // SAFETY: `s` holds at least four floats (asserted).
    unsafe { vld1q_f32(s.as_ptr()) }
}

/// `acc` plus the 16 products `a_i · b_i`, spread over its four lanes (which lane takes
/// which product differs between the two ways: only the lanes' total is meant). The
/// widening way sums products in pairs in i16: callers keep `|a_i|·|b_i| ≤ 128 · 127`
/// (2-bit or 4-bit codes, or Q8_0's codes against activations in −127..=127).
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn dot16<const SDOT: bool>(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    if SDOT {
        let mut acc = acc;
        // `vdotq_s32` is not stable yet (`stdarch_neon_dotprod`, rust-lang/rust#117224), so
        // the instruction is written out; `.arch_extension` lets the assembler take it in a
        // function compiled for baseline NEON (the kernels are one generic body for both).
        // SAFETY: SDOT is true only in kernels that `sdot` chose, after detecting dotprod;
        // the instruction touches only these three registers.
        unsafe {
            asm!(
                ".arch_extension dotprod",
                "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
                acc = inout(vreg) acc,
                a = in(vreg) a,
                b = in(vreg) b,
                options(pure, nomem, nostack, preserves_flags),
            )
        };
        acc
    } else {
        // Products pairwise in i16 (|a·b + a'·b'| ≤ 2 · 128 · 127 < 2¹⁵), then pairs into i32.
        let p = vmlal_high_s8(vmull_s8(vget_low_s8(a), vget_low_s8(b)), a, b);
        vpadalq_s16(acc, p)
    }
}

/// The 32 four-bit codes of a Q4 block's 16 bytes `qs`: elements 0..16 (low nibbles) and
/// 16..32 (high nibbles).
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn nibbles(qs: &[u8]) -> [int8x16_t; 2] {
    let v = u8x16(qs);
    [vandq_u8(v, vdupq_n_u8(15)), vshrq_n_u8::<4>(v)].map(|c| vreinterpretq_s8_u8(c))
}

/// The NEON test helpers every family's tests use, and the level detection's test.
#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// The NEON levels this CPU supports (`neon-dot` only with `dotprod`).
    pub(in crate::kernels) fn levels() -> impl Iterator<Item = Simd> {
        Simd::all_supported().filter(|l| l.get() != SimdLevel::Portable)
    }

    /// A small deterministic generator (an LCG's high bits).
    pub(in crate::kernels) struct Rng(pub(in crate::kernels) u64);

    impl Rng {
        pub(in crate::kernels) fn next(&mut self) -> u32 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (self.0 >> 33) as u32
        }

        pub(in crate::kernels) fn bytes(&mut self, n: usize) -> Vec<u8> {
            (0..n).map(|_| self.next() as u8).collect()
        }

        /// Activations, every seventh at the extreme −128.
        pub(in crate::kernels) fn acts(&mut self, n: usize) -> Vec<i8> {
            (0..n).map(|i| if i % 7 == 0 { -128 } else { self.next() as i8 }).collect()
        }

        /// Uniform in [−1, 1).
        pub(in crate::kernels) fn unit(&mut self) -> f32 {
            self.next() as f32 / 2_147_483_648.0 - 1.0
        }
    }

    #[test]
    fn detect_picks_neon_dot_exactly_when_the_cpu_has_dotprod() {
        assert!(SimdLevel::Neon.is_supported());
        let dot = std::arch::is_aarch64_feature_detected!("dotprod");
        assert_eq!(SimdLevel::NeonDot.is_supported(), dot);
        assert_eq!(SimdLevel::detect(), if dot { SimdLevel::NeonDot } else { SimdLevel::Neon });
        assert!(!SimdLevel::Avx2.is_supported());
        eprintln!("dotprod: {dot}, detect: {}", SimdLevel::detect());
    }
}
