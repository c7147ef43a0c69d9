//! Speculative decoding from the command line on the committed tiny models: `run` with
//! n-gram lookup and with the model as its own draft gives the plain greedy tokens and
//! reports its drafts; a draft model of another vocabulary is refused, naming both files;
//! flags that cannot work are errors before anything loads.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/bitnet-tiny").join(name)
}

fn purebee(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_purebee-rs")).args(args).output().expect("runs")
}

/// A prompt that repeats itself, so that lookups find drafts.
const PROMPT: &str = "one two three four five six. one two three four five six. one two three";

/// `run`'s JSON on the tiny I2_S model with `extra` flags: (generated ids, drafted, accepted).
fn run(extra: &[&str]) -> (Vec<u64>, u64, u64) {
    let model = fixture("tiny_b158_i2_s.gguf");
    let mut args = vec!["run", model.to_str().expect("utf-8"), "-p", PROMPT, "-n", "32", "--temp", "0"];
    args.extend_from_slice(&["--engine", "cpu", "--ignore-eos", "--output", "json"]);
    args.extend_from_slice(extra);
    let o = purebee(&args);
    assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    let ids = j["generated_ids"].as_array().expect("ids").iter().map(|v| v.as_u64().expect("id")).collect();
    let count = |k: &str| j[k].as_u64().expect(k);
    (ids, count("draft_tokens"), count("draft_tokens_accepted"))
}

#[test]
fn speculation_gives_the_plain_greedy_tokens() {
    let (plain, drafted, _) = run(&[]);
    assert_eq!(drafted, 0);
    let (ngram, drafted, _) = run(&["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "1"]);
    assert_eq!(ngram, plain, "ngram-simple");
    assert!(drafted > 0, "lookups drafted");
    let model = fixture("tiny_b158_i2_s.gguf");
    let (own, drafted, accepted) = run(&["--spec-type", "draft-simple", "-md", model.to_str().expect("utf-8")]);
    assert_eq!(own, plain, "the model as its own draft");
    assert!(drafted > 0 && accepted == drafted, "its own drafts are all kept: {accepted} of {drafted}");
}

#[test]
fn a_draft_model_of_another_vocabulary_is_refused_naming_both_files() {
    let dir = std::env::temp_dir().join(format!("purebee-spec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let synthetic = dir.join("synthetic.gguf");
    let s = synthetic.to_str().expect("utf-8");
    let o = purebee(&["synth", "--shape", "tiny", "--out", s]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let model = fixture("tiny_b158_i2_s.gguf");
    let m = model.to_str().expect("utf-8");
    let o = purebee(&["run", m, "-p", "hi", "-n", "2", "--spec-type", "draft-simple", "-md", s]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains(s) && err.contains(m) && err.contains("vocabulary"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn speculation_flags_that_cannot_work_are_errors() {
    let model = fixture("tiny_b158_i2_s.gguf");
    let m = model.to_str().expect("utf-8");
    for (flags, says) in [
        (&["--spec-type", "draft-simple"][..], "-md"),
        (&["-md", m][..], "--spec-type draft-simple"),
        (&["--spec-type", "ngram-simple", "--spec-draft-n-max", "0"][..], "--spec-draft-n-max"),
        (&["--spec-type", "ngram-simple", "--spec-draft-n-max", "64"][..], "--spec-draft-n-max"),
        (
            &["--spec-type", "ngram-simple", "--spec-draft-n-min", "9", "--spec-draft-n-max", "8"][..],
            "--spec-draft-n-min",
        ),
        (&["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "0"][..], "--spec-ngram-simple-size-n"),
        (&["--spec-type", "draft-simple", "-md", m, "--spec-draft-p-min", "2"][..], "--spec-draft-p-min"),
    ] {
        let mut args = vec!["run", m, "-p", "hi", "-n", "2"];
        args.extend_from_slice(flags);
        let o = purebee(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(says), "{flags:?}: {err}");
    }
}
