//! `purebee-rs run` and `tokenize` end to end on the committed tiny models.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/bitnet-tiny").join(name)
}

fn purebee(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_purebee-rs")).args(args).output().expect("runs")
}

fn case_ids(file: &str, key: &str) -> Vec<u64> {
    let text = std::fs::read_to_string(fixture(file)).expect("case json");
    let j: serde_json::Value = serde_json::from_str(&text).expect("json");
    j[key].as_array().expect(key).iter().map(|v| v.as_u64().expect("id")).collect()
}

const P16: &str = "The quick brown fox jumps over the lazy dog. Once";

#[test]
fn greedy_json_output_reproduces_llama_cpp_on_the_f32_model() {
    let model = fixture("tiny_b158_f32.gguf");
    let o = purebee(&[
        "run",
        model.to_str().expect("utf-8"),
        "-p",
        P16,
        "-n",
        "32",
        "--temp",
        "0",
        "--engine",
        "ref",
        // llama.cpp's ids on F32 caches (ours, at least, hold them exactly).
        "-ctk",
        "f32",
        "-ctv",
        "f32",
        "--output",
        "json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    let ids = |k: &str| j[k].as_array().expect(k).iter().map(|v| v.as_u64().expect("id")).collect::<Vec<_>>();
    assert_eq!(ids("prompt_ids"), case_ids("tiny_b158_f32.p16.json", "prompt_token_ids"));
    assert_eq!(ids("generated_ids"), case_ids("tiny_b158_f32.p16.json", "llamacpp_greedy_ids"));
    assert!(j["text"].as_str().is_some_and(|t| !t.is_empty()));
    assert!(j["prompt_tokens_per_s"].as_f64().is_some_and(|v| v > 0.0));
    assert!(j["decode_tokens_per_s"].as_f64().is_some_and(|v| v > 0.0));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("tokens/s") && stderr.contains("ms/token"), "{stderr}");
}

#[test]
fn text_output_streams_the_prompt_and_the_continuation() {
    let model = fixture("tiny_b158_i2_s.gguf");
    let o = purebee(&["run", model.to_str().expect("utf-8"), "-p", P16, "-n", "8", "--temp", "0", "--engine", "ref"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).expect("utf-8 text");
    // llama.cpp's first greedy tokens here are " once bo bo bo" (fixture llamacpp.json).
    assert!(text.starts_with(&format!("{P16} once bo bo")), "{text}");
}

#[test]
fn tokenize_prints_llama_cpp_ids() {
    let model = fixture("tiny_b158_i2_s.gguf");
    let o = purebee(&["tokenize", model.to_str().expect("utf-8"), "-p", P16]);
    assert!(o.status.success());
    let want: Vec<String> =
        case_ids("tiny_b158_i2_s.p16.json", "prompt_token_ids").iter().map(u64::to_string).collect();
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), want.join(","));
}

#[test]
fn bad_input_is_a_clear_error_and_a_non_zero_exit() {
    let model = fixture("tiny_b158_i2_s.gguf");
    let m = model.to_str().expect("utf-8");
    let long = "word ".repeat(100);
    let cases: [(Vec<&str>, &str); 7] = [
        (vec!["--temp", "-1"], "--temp -1 is invalid"),
        (vec!["--top-p", "1.5"], "--top-p 1.5 is invalid"),
        (vec!["--top-p", "0"], "--top-p 0 is invalid"),
        (vec!["--top-k", "0"], "--top-k 0 is invalid"),
        (vec!["-c", "16", "-p", long.as_str()], "do not fit the context of 16 tokens"),
        (vec!["--tokens", "1,8192"], "id 8192 is outside the vocabulary of 8192"),
        (vec![], "--prompt"),
    ];
    for (extra, message) in cases {
        let mut args = vec!["run", m, "--engine", "ref"];
        if !extra.iter().any(|a| *a == "-p" || *a == "--tokens") && !extra.is_empty() {
            args.extend(["-p", "hi"]);
        }
        args.extend(extra.iter().copied());
        let o = purebee(&args);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    // An engine that cannot be made: the error and nothing before it (no sampling seed).
    let o = purebee(&["run", m, "--engine", "cpu", "-t", "0", "-p", "hi", "--temp", "0.8"]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "-t 0 succeeded");
    assert_eq!(stderr.trim(), "error: --threads 0: the CPU engine needs at least one thread", "{stderr}");
    let o = purebee(&["run", "/nonexistent.gguf", "-p", "hi"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("/nonexistent.gguf"));
}
