//! Link settings for the `purebee-rs` binary.

fn main() {
    // On glibc Linux the binary's relative relocations are packed as DT_RELR (glibc 2.36+;
    // GNU ld 2.38+, lld and mold write them, and an older GNU ld warns and ignores the
    // option). As RELA entries its 34,000 relocations took 825 KB that the loader read at
    // every start and that stayed resident: a SmolLM2 bench's peak RSS fell by 0.8 MB
    // (docs/benchmarks.md). Binaries only: the AVX-512 emulation loads engine-cpu's probe
    // library with a loader that applies RELA relocations alone.
    let target = |key: &str| std::env::var(key).unwrap_or_default();
    if target("CARGO_CFG_TARGET_OS") == "linux" && target("CARGO_CFG_TARGET_ENV") == "gnu" {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
