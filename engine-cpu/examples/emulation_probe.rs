//! A shared object with one C entry point, [`purebee_check_avx512_vnni`], that
//! `scripts/test-avx512-emulated.sh` calls inside the Bochs CPU emulator: the AVX-512 VNNI
//! kernels checked against the portable ones on a machine without AVX-512. Build it with
//! `cargo build --release -p purebee-engine-cpu --example emulation_probe`.

use purebee_engine_cpu::kernels::cross_check::check_ternary_kernels;
use purebee_engine_cpu::{Simd, SimdLevel};

/// Runs `cases` seeded cases of [`check_ternary_kernels`] on the `avx512-vnni` level.
/// Returns 0 when every kernel agrees, `u64::MAX` when the CPU (as its CPUID and XCR0
/// report it) cannot run the level, else the first disagreement's `Disagreement::code`.
// `no_mangle` (an exported symbol the emulator harness looks up) is what `unsafe_code` flags;
// nothing here is unsafe otherwise.
#[allow(unsafe_code)]
#[no_mangle]
pub extern "C" fn purebee_check_avx512_vnni(seed: u64, cases: u32) -> u64 {
    let Some(level) = Simd::new(SimdLevel::Avx512Vnni) else {
        return u64::MAX;
    };
    match check_ternary_kernels(level, seed, cases) {
        Ok(()) => 0,
        Err(d) => d.code(),
    }
}
