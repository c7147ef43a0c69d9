//! The architecture's invariants (ARCHITECTURE.md), enforced by reading the manifests and
//! sources of the workspace's crates. The crate list is the workspace's `members`, so a new
//! crate is checked from its first commit.

use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The workspace's member crates (folders), from the root manifest's `members = [...]`.
fn members() -> Vec<String> {
    let manifest = fs::read_to_string(root().join("Cargo.toml")).expect("root manifest is readable");
    let list = manifest.split("members").nth(1).and_then(|s| s.split('[').nth(1)).and_then(|s| s.split(']').next());
    let members: Vec<String> = list
        .expect("the root manifest lists its members")
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect();
    assert!(members.len() >= 7, "members parsed from the root manifest: {members:?}");
    members
}

/// Where a crate sits in the import graph: every arrow points to a lower layer.
fn layer(krate: &str) -> usize {
    match krate {
        // rng: the one seeded random stream; testenv: what tests read from the environment.
        "memory" | "rng" | "testenv" => 0,
        "isa" => 1,
        "runtime" => 2,
        k if k.starts_with("engine-") => 2,
        "hub" => 2,    // downloads and the model store: below the front ends, beside the engines
        "loader" => 3, // engine choice and model loading: above the engines and the runtime
        "server" => 4, // the HTTP front end, which the cli starts
        "tests" => 6,
        _ => 5, // cli and the other front ends
    }
}

/// The crate's root source file (`src/lib.rs`, or `src/main.rs` for a binary).
fn crate_root(krate: &str) -> (PathBuf, String) {
    let lib = root().join(krate).join("src/lib.rs");
    let path = if lib.exists() { lib } else { root().join(krate).join("src/main.rs") };
    let text = fs::read_to_string(&path).expect("crate root is readable");
    (path, text)
}

/// The `unsafe` sites (blocks, functions, impls) of a source, by line number (comments
/// excluded).
fn unsafe_sites(text: &str) -> Vec<usize> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| {
            let code = l.split("//").next().unwrap_or("");
            code.contains("unsafe {") || code.contains("unsafe fn") || code.contains("unsafe impl")
        })
        .map(|(i, _)| i)
        .collect()
}

/// The `[dependencies]` section of a crate's manifest (dev-dependencies excluded).
fn dependencies(krate: &str) -> Vec<String> {
    let manifest = fs::read_to_string(root().join(krate).join("Cargo.toml")).expect("manifest is readable");
    let mut deps = Vec::new();
    let mut in_deps = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if in_deps {
            if let Some((name, _)) = line.split_once('=') {
                deps.push(name.trim().trim_end_matches(".workspace").to_string());
            }
        }
    }
    deps
}

/// Every `.rs` file under a crate's `src`.
fn sources(krate: &str) -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
        for entry in fs::read_dir(dir).expect("src is readable").flatten() {
            let p = entry.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|e| e == "rs") {
                let text = fs::read_to_string(&p).expect("source is readable");
                out.push((p, text));
            }
        }
    }
    let mut out = Vec::new();
    walk(&root().join(krate).join("src"), &mut out);
    out
}

#[test]
fn isa_has_no_gpu_or_engine_dependency() {
    let deps = dependencies("isa");
    assert_eq!(deps, vec!["purebee-memory", "thiserror"], "isa may depend on memory (and thiserror) only");
}

#[test]
fn every_arrow_of_the_import_graph_points_down() {
    for krate in members() {
        for dep in dependencies(&krate) {
            if let Some(target) = dep.strip_prefix("purebee-") {
                assert!(
                    layer(target) < layer(&krate),
                    "{krate} (layer {}) must not depend on {dep} (layer {})",
                    layer(&krate),
                    layer(target)
                );
            }
        }
    }
}

#[test]
fn runtime_calls_only_isa_and_memory() {
    for dep in dependencies("runtime") {
        assert!(!dep.contains("engine") && !dep.contains("wgpu"), "runtime must not depend on {dep}");
    }
}

#[test]
fn engines_do_not_depend_on_the_runtime_and_only_the_gpu_engine_on_wgpu() {
    for krate in members().into_iter().filter(|k| k.starts_with("engine-")) {
        for dep in dependencies(&krate) {
            assert!(!dep.contains("runtime"), "{krate} must not depend on {dep}");
            assert!(krate == "engine-gpu" || !dep.contains("wgpu"), "{krate} must not depend on {dep}");
        }
    }
}

#[test]
fn every_crate_but_memory_and_the_cpu_engine_forbids_unsafe_code() {
    for krate in members().into_iter().filter(|k| k != "memory" && k != "engine-cpu") {
        let (path, text) = crate_root(&krate);
        assert!(text.contains("#![forbid(unsafe_code)]"), "{} must forbid unsafe code", path.display());
    }
}

#[test]
fn memory_keeps_unsafe_to_the_file_mapping_and_its_sigbus_guard() {
    let mut found = Vec::new();
    for (p, text) in sources("memory") {
        let lines: Vec<&str> = text.lines().collect();
        for i in unsafe_sites(&text) {
            let site = format!("{}:{}: {}", p.display(), i + 1, lines[i].trim());
            let mapping = p.ends_with("gguf/file.rs") && lines[i].contains("Mmap::map");
            assert!(mapping || p.ends_with("gguf/map_guard.rs"), "unsafe outside the mapping and its guard: {site}");
            // The comment ends within the few lines above (the mapping's runs to eight).
            let justified = lines[i.saturating_sub(10)..=i].iter().any(|l| l.contains("SAFETY:"));
            assert!(justified, "unsafe without a // SAFETY: comment above it: {site}");
            found.push(site);
        }
    }
    assert!(found.iter().any(|s| s.contains("Mmap::map")), "the mapping's unsafe block was not found: {found:#?}");
}

#[test]
fn the_cpu_engine_keeps_unsafe_in_its_kernels_each_with_a_safety_comment() {
    let (path, lib) = crate_root("engine-cpu");
    assert!(lib.contains("#![deny(unsafe_code)]"), "{} must deny unsafe code outside kernels", path.display());
    let kernels = root().join("engine-cpu/src/kernels");
    let mut found = 0;
    for (path, text) in sources("engine-cpu") {
        let lines: Vec<&str> = text.lines().collect();
        for i in unsafe_sites(&text) {
            found += 1;
            assert!(path.starts_with(&kernels), "{}:{}: unsafe outside engine-cpu/src/kernels", path.display(), i + 1);
            // The comment sits on the line or within the few lines above (a SAFETY note may
            // cover a short match whose arms are each one unsafe expression).
            let justified = lines[i.saturating_sub(6)..=i].iter().any(|l| l.contains("SAFETY:"));
            assert!(justified, "{}:{}: unsafe without a // SAFETY: comment above it", path.display(), i + 1);
        }
    }
    assert!(found > 0, "the CPU engine's kernels use SIMD intrinsics: no unsafe site found, is the scan broken?");
}

#[test]
fn engines_do_not_know_what_a_transformer_is() {
    let words = ["layer", "transformer", "attn_q", "ffn_", "llama", "bitnet", "token_embd"];
    for krate in members().into_iter().filter(|k| k.starts_with("engine-")) {
        for (path, text) in sources(&krate) {
            let lower = text.to_lowercase();
            for w in words {
                assert!(!lower.contains(w), "{} mentions '{w}'", path.display());
            }
        }
    }
}

#[test]
fn every_source_file_opens_with_a_module_doc() {
    for krate in members() {
        for (path, text) in sources(&krate) {
            assert!(text.trim_start().starts_with("//!"), "{} does not open with a //! doc", path.display());
        }
    }
}
