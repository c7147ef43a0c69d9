"""Runs the CPU engine's AVX-512 VNNI kernels inside the Bochs CPU emulator (a Sapphire Rapids
model) against its portable kernels: `purebee_check_avx512_vnni` of the emulation_probe shared
object (engine-cpu/examples/emulation_probe.rs, kernels/cross_check.rs) over several seeds.

    python3 scripts/emulated-avx512/check_kernels.py PROBE.so [SEEDS] [CASES_PER_SEED]
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bochs_so import EmulatedLibrary  # noqa: E402

# Kernel numbers of cross_check::Kernel.
KERNELS = {1: "packed_dot (TQ2_0 runs)", 2: "packed_dot (I2_S runs)", 3: "codes_dot",
           4: "tq2_0_row_sum", 5: "tiles_2x4"}


def main():
    probe = sys.argv[1]
    seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    cases = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    lib = EmulatedLibrary(probe, timeout=300.0)
    ecx = lib.cpuid(7, 0)[2]
    if not ecx >> 11 & 1:
        sys.exit(f"the emulated CPU reports no AVX512_VNNI (CPUID.7.0:ECX = {ecx:#x})")
    start = time.monotonic()
    for seed in range(seeds):
        code = lib.call("purebee_check_avx512_vnni", seed, cases)
        if code == 2**64 - 1:
            sys.exit("the probe says the emulated CPU cannot run the avx512-vnni level "
                     "(its CPUID/XCR0 detection disagrees with the emulator's model)")
        if code:
            kernel, case = code >> 32, code & 0xFFFF_FFFF
            sys.exit(f"FAILED: {KERNELS.get(kernel, kernel)} of the avx512-vnni level disagrees "
                     f"with the portable kernel: seed {seed}, case {case}")
    print(f"avx512-vnni ternary kernels == portable kernels on {seeds} seeds x {cases} cases "
          f"under Bochs ({time.monotonic() - start:.1f} s)")


if __name__ == "__main__":
    main()
