"""Self-test of bochs_so.py: builds a C shared object (AVX-512 VNNI, libc calls, GOT data, an
unresolved external) and a Rust cdylib with std, runs them in the emulator and checks them
against Python. The AVX-512 code is never run natively. Prints timings.

    python3 scripts/emulated-avx512/selftest.py          # needs gcc; cargo for the Rust part
"""

import ctypes
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bochs_so import EmulatedLibrary, EmulationError  # noqa: E402

C_SOURCE = r"""
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

int bcmp(const void *, const void *, size_t);
extern int missing_function(int);

#ifdef EMULATED_ONLY  /* AVX-512, or not loadable natively */
/* sum of a[i] * b[i], u8 x i8, 64 bytes per vpdpbusd, the tail through masked loads */
int32_t dot_u8i8(const uint8_t *a, const int8_t *b, size_t n) {
    __m512i acc = _mm512_setzero_si512();
    size_t i = 0;
    for (; i + 64 <= n; i += 64)
        acc = _mm512_dpbusd_epi32(acc, _mm512_loadu_si512(a + i), _mm512_loadu_si512(b + i));
    if (i < n) {
        __mmask64 m = (1ULL << (n - i)) - 1;
        acc = _mm512_dpbusd_epi32(acc, _mm512_maskz_loadu_epi8(m, a + i),
                                  _mm512_maskz_loadu_epi8(m, b + i));
    }
    return _mm512_reduce_add_epi32(acc);
}

int call_missing(int x) { return missing_function(x) + 1; }
#endif

/* compiled with -fno-builtin: real calls to the libc functions */
void copy_and_fill(uint8_t *dst, const uint8_t *src, size_t n, uint8_t *dst2, int c, size_t n2) {
    memcpy(dst, src, n);
    memset(dst2, c, n2);
}
void move_within(uint8_t *buf, size_t to, size_t from, size_t n) {
    memmove(buf + to, buf + from, n);
}
int compare(const void *a, const void *b, size_t n) { return memcmp(a, b, n); }
int compare_b(const void *a, const void *b, size_t n) { return bcmp(a, b, n) != 0; }

/* a preemptible global: read and written through the GOT (R_X86_64_GLOB_DAT) */
int global_counter = 41;
int bump_global(int by) { global_counter += by; return global_counter; }
/* R_X86_64_64 against a symbol, and R_X86_64_RELATIVE */
int (*bump_ptr)(int) = bump_global;
const char *greeting = "hello from .data";
int call_through_pointer(int by) { return bump_ptr(by); }
const char *get_greeting(void) { return greeting; }

double half(int64_t x) { return (double)x * 0.5; }
float third(int32_t x) { return (float)x / 3.0f; }
int deref(const int *p) { return *p; }
__thread int tls_counter __attribute__((tls_model("initial-exec")));
int read_tls(void) { return tls_counter; }
void spin(void) { for (;;) __asm__ volatile(""); }
"""

RUST_SOURCE = r"""
#[no_mangle]
pub extern "C" fn probe_detect() -> u32 {
    std::arch::is_x86_feature_detected!("avx512vnni") as u32
        | ((std::arch::is_x86_feature_detected!("avx512bw") as u32) << 1)
}

#[no_mangle]
pub extern "C" fn sum_bytes(ptr: *const u8, len: usize) -> u64 {
    let bytes = unsafe { std::slice::from_raw_parts(ptr, len) };
    bytes.iter().map(|&b| b as u64).sum()
}
"""

passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    passed, failed = passed + bool(ok), failed + (not ok)
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")


def expect_error(name, fn, *fragments):
    try:
        fn()
    except EmulationError as e:
        check(name, all(f in str(e) for f in fragments), str(e))
    else:
        check(name, False, "no error raised")


def build_c(tmp):
    src = os.path.join(tmp, "t.c")
    with open(src, "w") as f:
        f.write(C_SOURCE)
    common = ["gcc", "-O2", "-shared", "-fPIC", "-fno-builtin", src]
    emulated, native = os.path.join(tmp, "libt_avx512.so"), os.path.join(tmp, "libt_native.so")
    subprocess.run(common + ["-DEMULATED_ONLY", "-mavx512f", "-mavx512bw", "-mavx512vl",
                             "-mavx512vnni", "-o", emulated], check=True)
    subprocess.run(common + ["-o", native], check=True)  # no AVX-512: safe to run on this host
    return emulated, native


def build_rust(tmp):
    crate = os.path.join(tmp, "probe")
    os.makedirs(os.path.join(crate, "src"))
    with open(os.path.join(crate, "Cargo.toml"), "w") as f:
        f.write('[package]\nname = "probe"\nversion = "0.1.0"\nedition = "2021"\n\n'
                '[lib]\ncrate-type = ["cdylib"]\n')
    with open(os.path.join(crate, "src", "lib.rs"), "w") as f:
        f.write(RUST_SOURCE)
    target = os.path.join(crate, "target")
    subprocess.run(["cargo", "build", "--release", "--quiet", "--offline", "--target-dir", target],
                   cwd=crate, check=True)
    return os.path.join(target, "release", "libprobe.so")


def test_c(path, native_path, rng):
    t = time.perf_counter()
    lib = EmulatedLibrary(path)
    print(f"loaded {os.path.basename(path)} in {time.perf_counter() - t:.2f} s")
    native = ctypes.CDLL(native_path)

    # CPUID and XCR0 as the guest sees them
    _, ebx7, ecx7, _ = lib.cpuid(7, 0)
    _, _, ecx1, _ = lib.cpuid(1)
    features = {"avx512f": (ebx7, 16), "avx512bw": (ebx7, 30), "avx512vl": (ebx7, 31),
                "avx2": (ebx7, 5), "avx512_vnni": (ecx7, 11), "fma": (ecx1, 12),
                "f16c": (ecx1, 29), "avx": (ecx1, 28), "osxsave": (ecx1, 27)}
    missing = [name for name, (reg, bit) in features.items() if not reg >> bit & 1]
    check("cpuid reports " + " ".join(features), not missing, f"missing {missing}")
    check("xgetbv is 0xe7", lib.xgetbv() == 0xE7, hex(lib.xgetbv()))

    # vpdpbusd over random sizes, odd ones included
    sizes = [0, 1, 63, 64, 65, 127, 1000, 4096, 4097] + [rng.randrange(1, 20000) for _ in range(8)]
    for n in sizes:
        a, b = rng.randbytes(n), rng.randbytes(n)
        expected = sum(x * (y - 256 if y > 127 else y) for x, y in zip(a, b))
        got = lib.call("dot_u8i8", lib.alloc(a), lib.alloc(b), n)
        got = struct.unpack("<i", struct.pack("<I", got & 0xFFFF_FFFF))[0]
        check(f"dot_u8i8 n={n}", got == expected, f"{got} vs {expected}")
        lib.reset_arena()

    # memcpy and memset on large buffers
    for n in (3 << 20, rng.randrange(1, 1 << 20)):
        src = rng.randbytes(n)
        dst, dst2 = lib.alloc(bytes(n)), lib.alloc(bytes(n + 1))
        lib.call("copy_and_fill", dst, lib.alloc(src), n, dst2, 0xAB, n)
        check(f"memcpy {n} bytes", lib.read(dst, n) == src)
        check(f"memset {n} bytes", lib.read(dst2, n + 1) == b"\xab" * n + b"\0")
        lib.reset_arena()

    # memmove, both directions, overlapping
    for to, frm, n in ((0, 10, 1000), (10, 0, 1000), (5, 5, 7), (3, 0, 0), (100, 7, 4093)):
        buf = bytearray(rng.randbytes(5000))
        addr = lib.alloc(bytes(buf))
        lib.call("move_within", addr, to, frm, n)
        buf[to:to + n] = buf[frm:frm + n]
        check(f"memmove to={to} from={frm} n={n}", lib.read(addr, len(buf)) == bytes(buf))
    lib.reset_arena()

    # memcmp / bcmp, checked against Python and the native build
    sign = lambda v: (v > 0) - (v < 0)  # noqa: E731
    for a, b in ((b"abc", b"abd"), (b"abd", b"abc"), (b"same", b"same"), (b"", b""),
                 (b"\x80x", b"\x7fx")):
        got = sign(struct.unpack("<i", struct.pack("<I", lib.call(
            "compare", lib.alloc(a), lib.alloc(b), len(a)) & 0xFFFF_FFFF))[0])
        check(f"memcmp {a!r} {b!r}", got == sign((a > b) - (a < b))
              == sign(native.compare(a, b, len(a))))
        check(f"bcmp {a!r} {b!r}", lib.call("compare_b", lib.alloc(a), lib.alloc(b), len(a))
              == (a != b))
    lib.reset_arena()

    # globals through the GOT, R_X86_64_64 and RELATIVE; state persists across calls
    check("global through GOT", lib.call("bump_global", 1) == 42 == native.bump_global(1))
    check("R_X86_64_64 function pointer", lib.call("call_through_pointer", 8) == 50)
    check("global visible from Python", lib.read(lib.symbols["global_counter"], 4)
          == struct.pack("<i", 50))
    check("R_X86_64_RELATIVE pointer", lib.read(lib.call("get_greeting"), 16)
          == b"hello from .data")

    # float results from xmm0
    native.half.restype, native.third.restype = ctypes.c_double, ctypes.c_float
    check("call_f64", lib.call_f64("half", 7) == 3.5 == native.half(7))
    check("call_f64 negative argument", lib.call_f64("half", -3) == -1.5)
    check("call_f32", lib.call_f32("third", 10) == native.third(10))

    # failures are exceptions that say what happened; the library stays usable after them
    expect_error("undefined external", lambda: lib.call("call_missing", 1),
                 "missing_function", "call_missing+")
    expect_error("null dereference", lambda: lib.call("deref", 0), "#PF", "CR2 0x0", "deref+")
    expect_error("thread-local variable", lambda: lib.call("read_tls"), "#PF", "TLS", "read_tls+")
    t = time.perf_counter()
    expect_error("endless loop", lambda: lib.call("spin", timeout=0.5), "timed out", "spin")
    check("timeout honoured", time.perf_counter() - t < 5)
    check("usable after errors", lib.call("bump_global", 0) == 50)

    # speed
    n = 4 << 20
    a, b = lib.alloc(rng.randbytes(n)), lib.alloc(rng.randbytes(n))
    count = lib.count_instructions("dot_u8i8", a, b, n)
    t = time.perf_counter()
    lib.call("dot_u8i8", a, b, n)
    elapsed = time.perf_counter() - t
    print(f"speed: dot_u8i8 over {n} bytes: {count} instructions in {elapsed * 1e3:.1f} ms, "
          f"{count / elapsed / 1e6:.1f} M instructions/s (including per-call overhead)")
    t = time.perf_counter()
    for _ in range(1000):
        lib.call("bump_global", 0)
    print(f"speed: {(time.perf_counter() - t) * 1e3:.0f} us per call of a trivial function")


def test_rust(path, rng):
    lib = EmulatedLibrary(path)
    check("rust is_x86_feature_detected! avx512vnni|avx512bw", lib.call("probe_detect") == 3)
    for n in (0, 1, 4095, rng.randrange(1, 1 << 20), 8 << 20):
        data = rng.randbytes(n)
        addr = lib.alloc(data)
        t = time.perf_counter()
        got = lib.call("sum_bytes", addr, n)
        elapsed = time.perf_counter() - t
        check(f"rust sum_bytes n={n}", got == sum(data), f"{elapsed * 1e3:.1f} ms")
        lib.reset_arena()


def main():
    rng = random.Random(1234)
    with tempfile.TemporaryDirectory() as tmp:
        test_c(*build_c(tmp), rng)
        if shutil.which("cargo"):
            test_rust(build_rust(tmp), rng)
        else:
            print("skipped the Rust cdylib: no cargo")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
