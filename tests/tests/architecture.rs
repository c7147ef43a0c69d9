//! The architecture's invariants (ARCHITECTURE.md), enforced by reading the manifests and
//! sources of the workspace's crates.

use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
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
fn runtime_calls_only_isa_and_memory() {
    for dep in dependencies("runtime") {
        assert!(!dep.contains("engine") && !dep.contains("wgpu"), "runtime must not depend on {dep}");
    }
}

#[test]
fn engines_do_not_depend_on_the_runtime() {
    for krate in ["engine-ref", "engine-gpu"] {
        for dep in dependencies(krate) {
            assert!(!dep.contains("runtime"), "{krate} must not depend on {dep}");
            assert!(krate == "engine-gpu" || !dep.contains("wgpu"), "{krate} must not depend on {dep}");
        }
    }
}

#[test]
fn every_crate_but_memory_forbids_unsafe_code() {
    for krate in ["isa", "engine-ref", "engine-gpu", "runtime", "tests"] {
        let lib = fs::read_to_string(root().join(krate).join("src/lib.rs")).expect("lib.rs is readable");
        assert!(lib.contains("#![forbid(unsafe_code)]"), "{krate}/src/lib.rs must forbid unsafe code");
    }
    let main = fs::read_to_string(root().join("cli/src/main.rs")).expect("main.rs is readable");
    assert!(main.contains("#![forbid(unsafe_code)]"), "cli/src/main.rs must forbid unsafe code");
}

#[test]
fn memory_has_exactly_one_unsafe_block_the_file_mapping() {
    let unsafe_sites: Vec<String> = sources("memory")
        .into_iter()
        .flat_map(|(p, text)| {
            text.lines()
                .filter(|l| {
                    let code = l.split("//").next().unwrap_or("");
                    code.contains("unsafe {") || code.contains("unsafe fn")
                })
                .map(|l| format!("{}: {}", p.display(), l.trim()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(unsafe_sites.len(), 1, "expected only the mmap call, found {unsafe_sites:#?}");
    assert!(unsafe_sites[0].contains("Mmap::map"), "the one unsafe block must be the mapping: {unsafe_sites:?}");
}

#[test]
fn engines_do_not_know_what_a_transformer_is() {
    let words = ["layer", "transformer", "attn_q", "ffn_", "llama", "bitnet", "token_embd"];
    for krate in ["engine-ref", "engine-gpu"] {
        for (path, text) in sources(krate) {
            let lower = text.to_lowercase();
            for w in words {
                assert!(!lower.contains(w), "{} mentions '{w}'", path.display());
            }
        }
    }
}

#[test]
fn every_source_file_opens_with_a_module_doc() {
    for krate in ["memory", "isa", "engine-ref", "engine-gpu", "runtime", "cli", "tests"] {
        for (path, text) in sources(krate) {
            assert!(text.trim_start().starts_with("//!"), "{} does not open with a //! doc", path.display());
        }
    }
}
