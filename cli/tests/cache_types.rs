//! `-ctk/--cache-type-k` and `-ctv/--cache-type-v` (llama.cpp's flags): F16 caches by
//! default, F32 on request, on every command that loads a model; a bad value is an error
//! naming the flag.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/bitnet-tiny").join(name)
}

fn purebee(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_purebee-rs")).args(args).output().expect("runs")
}

const PROMPT: &str = "The quick brown fox jumps over the lazy dog. Once";

/// Greedy tokens of the tiny model with the given cache flags.
fn run(extra: &[&str]) -> String {
    let model = fixture("tiny_b158_i2_s.gguf");
    let mut args =
        vec!["run", model.to_str().expect("utf-8"), "-p", PROMPT, "-n", "6", "--temp", "0", "--engine", "ref"];
    args.extend(extra);
    let o = purebee(&args);
    assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).expect("utf-8 text")
}

#[test]
fn f32_and_f16_caches_both_run() {
    let f32 = run(&["-ctk", "f32", "-ctv", "f32"]);
    let f16 = run(&["-ctk", "f16"]);
    let mixed = run(&["--cache-type-k", "f32", "--cache-type-v", "f16"]);
    let default = run(&[]);
    // llama.cpp's first greedy tokens here are " once bo bo" (fixture llamacpp.json).
    for text in [&f32, &f16, &mixed, &default] {
        assert!(text.starts_with(&format!("{PROMPT} once bo bo")), "{text}");
    }
    // F16 is the default.
    assert_eq!(f16, default);
}

#[test]
fn a_bad_cache_type_is_an_error_naming_the_flag() {
    let model = fixture("tiny_b158_i2_s.gguf");
    let m = model.to_str().expect("utf-8");
    for (flag, long) in [("-ctk", "--cache-type-k"), ("-ctv", "--cache-type-v")] {
        for command in ["run", "logits", "bench", "serve", "chat"] {
            let o = purebee(&[command, m, flag, "q8_0"]);
            let stderr = String::from_utf8_lossy(&o.stderr);
            assert!(!o.status.success(), "{command} {flag} q8_0 succeeded");
            assert!(stderr.contains(long) && stderr.contains("q8_0"), "{command} {flag}: {stderr}");
            assert!(stderr.contains("f16") && stderr.contains("f32"), "{command} {flag}: {stderr}");
        }
    }
}
