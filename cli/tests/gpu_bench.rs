//! `purebee-rs bench --engine gpu` on a tiny fixture (Mesa's lavapipe where there is no GPU):
//! dispatch and submit counts per token, `--profile`'s per-kernel table, and quiet adapter
//! probing without `XDG_RUNTIME_DIR`. No test asserts a timing. Skipped with
//! `PUREBEE_SKIP_GPU_TESTS=1`, like every GPU test.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_purebee-rs");

use purebee_testenv::gpu_tests_skipped as skipped;

fn tiny(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/bitnet-tiny").join(name)
}

fn ok(command: &mut Command) -> Output {
    let o = command.output().expect("the binary runs");
    assert!(o.status.success(), "{command:?}: {}", String::from_utf8_lossy(&o.stderr));
    o
}

/// `bench MODEL --engine ENGINE -p 5 -n 3 -r 1 --output json EXTRA...` with `env` set: its
/// JSON report and its stderr.
fn bench_on(engine: &str, env: &[(&str, &str)], model: &Path, extra: &[&str]) -> (Value, String) {
    let model = model.to_str().expect("utf-8 path");
    let mut args = vec!["bench", model, "--engine", engine, "-p", "5", "-n", "3", "-r", "1", "--output", "json"];
    args.extend_from_slice(extra);
    let o = ok(Command::new(BIN).envs(env.iter().copied()).args(&args));
    let j = serde_json::from_slice(&o.stdout).expect("one JSON object");
    (j, String::from_utf8_lossy(&o.stderr).into_owned())
}

fn bench(model: &Path, extra: &[&str]) -> (Value, String) {
    bench_on("gpu", &[], model, extra)
}

fn number(v: &Value, what: &str) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("{what}: not a number: {v}"))
}

#[test]
fn bench_reports_dispatches_and_submits_per_token_and_a_kernel_profile() {
    if skipped() {
        return;
    }
    let model = tiny("tiny_b158_i2_s.gguf");
    let (j, _) = bench(&model, &[]);
    assert_eq!(j["engine"], "gpu");
    let layers = number(&j["shape"]["n_layer"], "n_layer");
    let decode = &j["decode"];
    let dispatches = number(&decode["dispatches_per_token"], "decode dispatches_per_token");
    let submits = number(&decode["submits_per_token"], "decode submits_per_token");
    // Every layer dispatches kernels (norms, products, attention) each token, and a token is
    // at least one submit (the pass; the read-back of its id may be another).
    assert!(dispatches >= layers && dispatches.fract() == 0.0, "{dispatches} dispatches per token");
    assert!(submits >= 1.0 && submits.fract() == 0.0, "{submits} submits per token");
    // The prefill runs the same kernels once for its 5 tokens.
    let prefill = number(&j["prefill"]["dispatches_per_token"], "prefill dispatches_per_token");
    assert!(prefill > 0.0 && prefill < dispatches, "{prefill} prefill dispatches per token");
    assert!(j["decode"].get("profile").is_none(), "no profile without --profile");

    let (j, stderr) = bench(&model, &["--profile"]);
    let timed = j["profile_timed"].as_bool().expect("profile_timed");
    if !timed {
        assert!(stderr.contains("--profile: ") && stderr.contains("no kernel times"), "{stderr}");
    }
    for phase in ["prefill", "decode"] {
        let p = &j[phase];
        let profile = p["profile"].as_array().unwrap_or_else(|| panic!("{phase}: no profile: {p}"));
        let families: Vec<&str> = profile.iter().filter_map(|k| k["family"].as_str()).collect();
        assert!(families.iter().any(|f| f.starts_with("bitlinear.wgsl")), "{phase}: {families:?}");
        assert!(families.iter().any(|f| f.starts_with("attention.wgsl")), "{phase}: {families:?}");
        // The profiled repetition dispatches what the timed ones did, per token.
        let sum: f64 = profile.iter().map(|k| number(&k["dispatches_per_token"], "dispatches_per_token")).sum();
        let counted = number(&p["dispatches_per_token"], "dispatches_per_token");
        assert!((sum - counted).abs() < 1e-9, "{phase}: profile {sum} vs counted {counted}");
        for k in profile {
            assert!(number(&k["bytes"], "bytes") > 0.0, "{phase}: {k}");
            if timed {
                assert!(number(&k["ms"], "ms") >= 0.0, "{phase}: {k}");
            } else {
                assert!(k["ms"].is_null() && k["gb_per_s"].is_null(), "{phase}: {k}");
            }
        }
    }

    // The text output shows the counts and the profile table.
    let model = model.to_str().expect("utf-8 path");
    let o =
        ok(Command::new(BIN).args(["bench", model, "--engine", "gpu", "-p", "2", "-n", "2", "-r", "1", "--profile"]));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("dispatches/token") && text.contains("submits/token"), "{text}");
    assert!(text.contains("profile of the decode") && text.contains("bitlinear.wgsl"), "{text}");
}

#[test]
fn an_adapter_without_timestamps_profiles_dispatches_and_bytes_without_times() {
    if skipped() {
        return;
    }
    let model = tiny("tiny_b158_i2_s.gguf");
    let (j, stderr) = bench_on("gpu", &[("PUREBEE_GPU_NO_TIMESTAMPS", "1")], &model, &["--profile"]);
    let notes: Vec<&str> = stderr.lines().filter(|l| l.contains("--profile")).collect();
    assert_eq!(notes.len(), 1, "{stderr}");
    assert!(notes[0].contains("no timestamp queries") && notes[0].contains("no kernel times"), "{stderr}");
    assert_eq!(j["profile_timed"], false);
    assert!(number(&j["decode"]["dispatches_per_token"], "dispatches_per_token") > 0.0);
    let profile = j["decode"]["profile"].as_array().expect("a profile without times");
    assert!(!profile.is_empty());
    for k in profile {
        assert!(k["ms"].is_null() && k["gb_per_s"].is_null() && number(&k["dispatches"], "dispatches") > 0.0, "{k}");
    }
}

#[test]
fn the_ref_engine_has_no_counts_and_the_cpu_engine_counts_its_joins() {
    let model = tiny("tiny_b158_i2_s.gguf");
    let (j, stderr) = bench_on("ref", &[], &model, &["--profile"]);
    assert!(j["decode"]["dispatches_per_token"].is_null(), "{j}");
    assert!(j["profile_timed"].is_null(), "{j}");
    assert!(stderr.contains("--profile: the ref engine has no kernel profile"), "{stderr}");
    // The CPU engine counts its thread pool's joins as dispatches (none on one thread), and
    // submits nothing.
    let (j, _) = bench_on("cpu", &[], &model, &[]);
    assert!(number(&j["decode"]["dispatches_per_token"], "dispatches_per_token") >= 0.0, "{j}");
    assert_eq!(j["decode"]["submits_per_token"], 0.0, "{j}");
}

#[test]
fn the_cpu_engine_profiles_each_instruction_family_with_times_and_bytes() {
    let model = tiny("tiny_b158_i2_s.gguf");
    let (j, stderr) = bench_on("cpu", &[], &model, &["--profile"]);
    assert!(!stderr.contains("no kernel"), "{stderr}");
    assert_eq!(j["profile_timed"], true, "{j}");
    let layers = number(&j["shape"]["n_layer"], "n_layer");
    let profile = j["decode"]["profile"].as_array().expect("a decode profile");
    let family = |name: &str| profile.iter().find(|k| k["family"] == name).unwrap_or_else(|| panic!("{name}: {j}"));
    // Seven projections per layer (q, k, v, o, gate, up, down), one ATTENTION.
    assert_eq!(number(&family("BITLINEAR I2_S")["dispatches_per_token"], "dispatches_per_token"), 7.0 * layers);
    assert_eq!(number(&family("ATTENTION")["dispatches_per_token"], "dispatches_per_token"), layers);
    for k in profile {
        assert!(number(&k["ms"], "ms") >= 0.0 && number(&k["bytes"], "bytes") > 0.0, "{k}");
    }
}

/// Mesa's Vulkan device-select layer opens a Wayland connection while wgpu enumerates
/// adapters; without `XDG_RUNTIME_DIR`, libwayland printed
/// `error: XDG_RUNTIME_DIR is invalid or not set in the environment.` before every answer.
#[test]
fn probing_adapters_without_xdg_runtime_dir_prints_no_driver_errors() {
    if skipped() {
        return;
    }
    let model = tiny("tiny_b158_i2_s.gguf");
    let model = model.to_str().expect("utf-8 path");
    for engine in ["gpu", "auto"] {
        let mut command = Command::new(BIN);
        // As on a headless machine where nobody configured Mesa's device-select layer.
        for var in ["XDG_RUNTIME_DIR", "NODEVICE_SELECT", "MESA_VK_DEVICE_SELECT", "DRI_PRIME"] {
            command.env_remove(var);
        }
        let o = ok(command.args(["run", model, "--engine", engine, "-p", "ab", "-n", "1", "--temp", "0"]));
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!stderr.contains("XDG_RUNTIME_DIR"), "--engine {engine}: {stderr}");
        assert!(!stderr.to_lowercase().contains("error"), "--engine {engine}: {stderr}");
    }
}
