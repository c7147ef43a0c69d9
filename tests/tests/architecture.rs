//! The architecture's invariants (ARCHITECTURE.md), enforced by reading the manifests and
//! sources of the workspace's crates. The crate list is the workspace's `members`, so a new
//! crate is checked from its first commit (and fails until it is given a layer).

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

/// Every member crate's layer in the import graph: every arrow points to a lower layer. A
/// new crate fails the tests until it is placed here.
const LAYERS: [(&str, usize); 16] = [
    ("memory", 0),
    // The one seeded random stream, and what tests read from the environment: no dependencies.
    ("rng", 0),
    ("testenv", 0),
    ("isa", 1),
    ("engine-ref", 2),
    ("engine-cpu", 2),
    ("engine-gpu", 2),
    ("runtime", 2),
    // Downloads and the model store: below the front ends, beside the engines.
    ("hub", 2),
    // Engine choice and model loading: above the engines and the runtime.
    ("loader", 3),
    // Synthetic models: GGUF writing and a byte-level vocabulary, beside the loader.
    ("synth", 3),
    // Checkpoint conversion (safetensors, tokenizer.json) to GGUF, beside the loader.
    ("convert", 3),
    // The browser's bindings, beside the loader: a tab makes its engine asynchronously
    // (WebGPU's adapter and device are promises) and holds the file in memory.
    ("web", 3),
    // The HTTP front end, which the cli starts.
    ("server", 4),
    ("cli", 5),
    ("tests", 6),
];

/// The crates that talk to users (a terminal, HTTP clients).
const FRONT_ENDS: [&str; 2] = ["cli", "server"];

/// Crates that draw on a terminal or serve HTTP, which only front ends may use.
const FRONT_END_LIBRARIES: [&str; 8] =
    ["clap", "indicatif", "rustyline", "signal-hook", "axum", "tokio", "tower-http", "rexpect"];

fn layer(krate: &str) -> usize {
    match LAYERS.iter().find(|(k, _)| *k == krate) {
        Some(&(_, layer)) => layer,
        None => panic!("{krate} has no layer: place it in LAYERS (tests/tests/architecture.rs)"),
    }
}

/// What a dependency is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `[dependencies]`, also under a `[target.'cfg(...)']`.
    Normal,
    /// `[build-dependencies]`, also under a target.
    Build,
    /// `[dev-dependencies]`, also under a target: tests, examples and benches only.
    Dev,
}

/// One dependency of a manifest.
#[derive(Clone, Debug)]
struct Dependency {
    name: String,
    kind: Kind,
    /// The section it was declared in, for messages.
    section: String,
}

/// The dependency table a manifest section header (without its brackets) opens, and, for
/// a `[dependencies.NAME]` table, the one dependency it declares.
fn dependency_section(header: &str) -> Option<(Kind, Option<String>)> {
    // Longest first: "dependencies" is a suffix of the other two.
    for (table, kind) in
        [("dev-dependencies", Kind::Dev), ("build-dependencies", Kind::Build), ("dependencies", Kind::Normal)]
    {
        let under_target = header.starts_with("target.");
        if header == table || (under_target && header.ends_with(&format!(".{table}"))) {
            return Some((kind, None));
        }
        let opened = if under_target { header.find(&format!(".{table}.")).map(|i| i + 1) } else { Some(0) };
        if let Some(name) = opened.and_then(|i| header[i..].strip_prefix(&format!("{table}."))) {
            return Some((kind, Some(name.trim_matches('"').to_string())));
        }
    }
    None
}

/// Every dependency a crate's manifest declares: normal, build and dev, target-specific
/// ones included.
fn manifest_dependencies(krate: &str) -> Vec<Dependency> {
    let manifest = fs::read_to_string(root().join(krate).join("Cargo.toml")).expect("manifest is readable");
    let mut deps = Vec::new();
    let mut table: Option<(Kind, String)> = None;
    // Open brackets and braces of a value that continues on the next lines.
    let mut depth = 0i32;
    for line in manifest.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if depth > 0 {
            depth += line.matches(['{', '[']).count() as i32 - line.matches(['}', ']']).count() as i32;
            continue;
        }
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            table = None;
            if let Some((kind, single)) = dependency_section(header) {
                match single {
                    Some(name) => deps.push(Dependency { name, kind, section: header.to_string() }),
                    None => table = Some((kind, header.to_string())),
                }
            }
            continue;
        }
        if let (Some((kind, section)), Some((key, value))) = (&table, line.split_once('=')) {
            let name = key.trim().trim_matches('"').split('.').next().unwrap_or("").to_string();
            deps.push(Dependency { name, kind: *kind, section: section.clone() });
            depth = value.matches(['{', '[']).count() as i32 - value.matches(['}', ']']).count() as i32;
        }
    }
    deps
}

/// The names of a crate's dependencies that its library or binary links: normal ones, on
/// every target.
fn dependencies(krate: &str) -> Vec<String> {
    manifest_dependencies(krate).into_iter().filter(|d| d.kind == Kind::Normal).map(|d| d.name).collect()
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

/// Every `.rs` file under a crate's `src`.
fn sources(krate: &str) -> Vec<(PathBuf, String)> {
    files_under(krate, &["rs"])
}

/// Every file with one of `extensions` under a crate's `src`.
fn files_under(krate: &str, extensions: &[&str]) -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, extensions: &[&str], out: &mut Vec<(PathBuf, String)>) {
        for entry in fs::read_dir(dir).expect("src is readable").flatten() {
            let p = entry.path();
            if p.is_dir() {
                walk(&p, extensions, out);
            } else if p.extension().and_then(|e| e.to_str()).is_some_and(|e| extensions.contains(&e)) {
                let text = fs::read_to_string(&p).expect("source is readable");
                out.push((p, text));
            }
        }
    }
    let mut out = Vec::new();
    walk(&root().join(krate).join("src"), extensions, &mut out);
    out
}

#[test]
fn isa_has_no_gpu_or_engine_dependency() {
    let deps: Vec<String> =
        manifest_dependencies("isa").into_iter().filter(|d| d.kind != Kind::Dev).map(|d| d.name).collect();
    assert_eq!(deps, vec!["purebee-memory", "thiserror"], "isa may depend on memory (and thiserror) only");
}

#[test]
fn every_crate_is_placed_in_a_layer() {
    let members = members();
    for krate in &members {
        layer(krate);
    }
    for (krate, _) in LAYERS {
        assert!(members.iter().any(|m| m == krate), "{krate} is in LAYERS but not a workspace member");
    }
}

#[test]
fn every_arrow_of_the_import_graph_points_down() {
    // Dev-dependencies too: a crate's tests use only what lies below it.
    for krate in members() {
        for dep in manifest_dependencies(&krate) {
            if let Some(target) = dep.name.strip_prefix("purebee-") {
                assert!(
                    layer(target) < layer(&krate),
                    "{krate} (layer {}) must not depend on {} (layer {}) in [{}]",
                    layer(&krate),
                    dep.name,
                    layer(target),
                    dep.section
                );
            }
        }
    }
}

#[test]
fn target_specific_dependencies_are_read() {
    // memory maps files with libc's help on Linux only.
    let memory = manifest_dependencies("memory");
    let linux = memory.iter().find(|d| d.section.starts_with("target.")).expect("memory has a target table");
    assert_eq!(linux.kind, Kind::Normal, "{linux:?}");
    assert!(dependencies("memory").contains(&linux.name), "{memory:?}");
    assert_eq!(
        dependency_section("target.'cfg(unix)'.dev-dependencies.purebee-x"),
        Some((Kind::Dev, Some("purebee-x".to_string())))
    );
    assert_eq!(dependency_section("dependencies.purebee-x"), Some((Kind::Normal, Some("purebee-x".to_string()))));
    assert_eq!(dependency_section("target.'cfg(unix)'.build-dependencies"), Some((Kind::Build, None)));
    assert_eq!(dependency_section("package"), None);
}

#[test]
fn front_ends_reach_the_engines_only_through_the_loader() {
    // No dev-dependency either: a front end's tests run the engines through it too.
    for krate in FRONT_ENDS {
        let deps = manifest_dependencies(krate);
        assert!(deps.iter().any(|d| d.name == "purebee-loader" && d.kind == Kind::Normal), "{krate}: no loader");
        for dep in deps {
            assert!(
                !dep.name.starts_with("purebee-engine-"),
                "{krate} must not depend on {} [{}]",
                dep.name,
                dep.section
            );
        }
    }
}

#[test]
fn the_server_takes_a_path_and_knows_no_model_store_or_terminal() {
    for dep in dependencies("server") {
        assert!(dep != "purebee-hub", "the server must not depend on {dep}: the cli resolves model names");
        assert!(!["clap", "indicatif", "rustyline"].contains(&dep.as_str()), "the server must not depend on {dep}");
    }
}

#[test]
fn the_loader_knows_no_terminal_http_or_model_store() {
    for dep in dependencies("loader") {
        assert!(dep != "purebee-hub", "the loader must not depend on {dep}: callers resolve model names");
        assert!(!FRONT_END_LIBRARIES.contains(&dep.as_str()), "the loader must not depend on {dep}");
    }
    for (path, text) in sources("loader") {
        for print in ["eprintln!", "println!", "eprint!", "print!"] {
            assert!(
                !text.contains(print),
                "{} prints ({print}): the loader reports, its callers print",
                path.display()
            );
        }
    }
}

#[test]
fn the_hub_knows_no_gguf_engine_model_or_terminal() {
    for dep in dependencies("hub") {
        assert!(!dep.starts_with("purebee-"), "the hub must not depend on {dep}");
        assert!(!FRONT_END_LIBRARIES.contains(&dep.as_str()), "the hub must not depend on {dep}");
    }
    for (path, text) in sources("hub") {
        for print in ["eprintln!", "println!", "eprint!", "print!"] {
            assert!(
                !text.contains(print),
                "{} prints ({print}): the hub reports events, the cli draws them",
                path.display()
            );
        }
    }
}

#[test]
fn only_front_ends_draw_on_a_terminal_or_serve_http() {
    for krate in members().into_iter().filter(|k| !FRONT_ENDS.contains(&k.as_str())) {
        for dep in dependencies(&krate) {
            assert!(!FRONT_END_LIBRARIES.contains(&dep.as_str()), "{krate} must not depend on {dep}");
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

/// Words that name a model or a part of one, which no engine source or kernel may use.
/// An instruction's own operand roles stay allowed: ATTENTION's `q`, `k_cache`, its heads,
/// a "gate" operand of a fused multiply, EMBED's vocabulary.
const MODEL_WORDS: [&str; 20] = [
    // What a transformer is made of.
    "transformer",
    "layer",
    "attn_q",
    "ffn",
    "token_embd",
    "feed-forward",
    "feed forward",
    "mlp",
    "lm head",
    "lm_head",
    "lm-head",
    "gate/up",
    "gate and up",
    "gate and an up",
    "up projection",
    // Models by name.
    "llama",
    "bitnet",
    "b1.58",
    "smollm",
    "qwen",
];

/// Models by size ("the 2B decode"), matched as whole words.
const MODEL_SIZES: [&str; 2] = ["2b", "135m"];

/// Engine files that may use some of those words, and why.
const MODEL_WORDS_ALLOWED: [(&str, &[&str]); 0] = [];

/// Whether `word` occurs in `text` with no letter, digit or `_` on either side.
fn contains_whole_word(text: &str, word: &str) -> bool {
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(word).any(|(i, _)| {
        !text[..i].chars().next_back().is_some_and(is_word)
            && !text[i + word.len()..].chars().next().is_some_and(is_word)
    })
}

#[test]
fn engines_do_not_know_what_a_transformer_is() {
    for krate in members().into_iter().filter(|k| k.starts_with("engine-")) {
        for (path, text) in files_under(&krate, &["rs", "wgsl"]) {
            let lower = text.to_lowercase();
            let relative = path.strip_prefix(root()).unwrap_or(&path).to_string_lossy().replace('\\', "/");
            let allowed: &[&str] = MODEL_WORDS_ALLOWED.iter().find(|(f, _)| *f == relative).map_or(&[], |a| a.1);
            for w in MODEL_WORDS.into_iter().filter(|w| !allowed.contains(w)) {
                assert!(!lower.contains(w), "{} mentions '{w}'", path.display());
            }
            for w in MODEL_SIZES {
                assert!(!contains_whole_word(&lower, w), "{} mentions a model by its size ('{w}')", path.display());
            }
        }
    }
    // An allowance outlives nothing: its file exists and still uses each word.
    for (file, words) in MODEL_WORDS_ALLOWED {
        let text = fs::read_to_string(root().join(file)).map(|t| t.to_lowercase());
        let text = text.unwrap_or_else(|_| panic!("{file} is gone: remove it from MODEL_WORDS_ALLOWED"));
        for w in words {
            assert!(text.contains(w), "{file} no longer mentions '{w}': remove it from MODEL_WORDS_ALLOWED");
        }
    }
}

#[test]
fn the_model_word_check_reads_kernels_and_whole_words() {
    assert!(!files_under("engine-gpu", &["wgsl"]).is_empty(), "no .wgsl kernel found: is the scan broken?");
    assert!(contains_whole_word("on the 2b decode", "2b"));
    assert!(!contains_whole_word("0x2b, 32b", "2b"));
}

#[test]
fn every_source_file_opens_with_a_module_doc() {
    for krate in members() {
        for (path, text) in sources(&krate) {
            assert!(text.trim_start().starts_with("//!"), "{} does not open with a //! doc", path.display());
        }
    }
}
