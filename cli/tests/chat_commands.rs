//! The built `purebee-rs` binary: `run --chat` and `chat` on a tiny fixture (reference
//! engine, greedy), and the flag and file errors they report.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use purebee_memory::gguf::{GgufFile, GgufWriter};
use purebee_runtime::chat::{tokenize_prompt, ChatMessage, ChatTemplate};
use purebee_runtime::tokenizer::Tokenizer;

fn tiny_model() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/bitnet-tiny/tiny_b158_f32.gguf")
}

/// Runs the binary with `args`, feeding `stdin`.
fn purebee(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_purebee-rs"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    child.stdin.take().expect("stdin").write_all(stdin.as_bytes()).expect("stdin written");
    child.wait_with_output().expect("the binary ends")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const GREEDY_REF: [&str; 6] = ["--engine", "ref", "-n", "4", "--temp", "0"];

#[test]
fn run_chat_prints_only_the_answer_to_the_templated_prompt() {
    let model = tiny_model();
    let model = model.to_str().expect("utf-8 path");
    let question = "What is the capital of France?";
    let out = purebee(&[&["run", model, "--chat", "-p", question], &GREEDY_REF[..]].concat(), "");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(!stdout.trim().is_empty(), "an answer is printed");
    assert!(!stdout.contains(question) && !stdout.contains("<|im_start|>"), "only the answer: {stdout}");
    assert!(stderr.contains("tokens/s"), "{stderr}");

    // The JSON output shows the prompt ids: the template's, rendered with the system message.
    let out = purebee(
        &[&["run", model, "--chat", "--system", "Be brief.", "-p", question, "--output", "json"], &GREEDY_REF[..]]
            .concat(),
        "",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let j: serde_json::Value = serde_json::from_str(&text(&out.stdout)).expect("one JSON object");
    let file = GgufFile::open(tiny_model()).expect("fixture opens");
    let tokenizer = Tokenizer::from_gguf(&file).expect("tokenizer");
    let template = ChatTemplate::from_gguf(&file, &tokenizer).expect("template");
    let messages = [ChatMessage::new("system", "Be brief."), ChatMessage::new("user", question)];
    let want = tokenize_prompt(&tokenizer, &template.render(&messages, true).expect("renders"));
    let got: Vec<u32> =
        j["prompt_ids"].as_array().expect("prompt_ids").iter().map(|v| v.as_u64().expect("id") as u32).collect();
    assert_eq!(got, want);
    assert_eq!(j["generated_ids"].as_array().map(Vec::len), Some(4));
}

#[test]
fn chat_answers_each_line_and_reuses_the_cache() {
    let model = tiny_model();
    let model = model.to_str().expect("utf-8 path");
    let out = purebee(&[&["chat", model], &GREEDY_REF[..]].concat(), "Hello there.\nWhat is the capital of France?\n");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    let answers: Vec<&str> = stdout.lines().collect();
    assert_eq!(answers.len(), 2, "one line per answer: {stdout:?}");
    assert!(answers.iter().all(|a| !a.trim().is_empty()), "{stdout:?}");
    let speed_lines: Vec<&str> = stderr.lines().filter(|l| l.contains("tokens/s")).collect();
    assert_eq!(speed_lines.len(), 2, "{stderr}");
    assert!(speed_lines[0].contains("(0 reused"), "{stderr}");
    assert!(!speed_lines[1].contains("(0 reused"), "the second turn reuses the cache: {stderr}");
    // Not a terminal: no "> " prompt.
    assert!(!stderr.contains("> "), "{stderr}");

    // /clear starts over (the second turn prefills from 0 again); /exit stops reading.
    let out =
        purebee(&[&["chat", model], &GREEDY_REF[..]].concat(), "Hello there.\n/clear\nHello there.\n/exit\nMore\n");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    let answers: Vec<&str> = stdout.lines().collect();
    assert_eq!(answers.len(), 2, "{stdout:?}");
    assert_eq!(answers[0], answers[1], "greedy: the same first turn gives the same answer");
    assert_eq!(stderr.matches("(0 reused").count(), 2, "{stderr}");
}

#[test]
fn chat_stops_cleanly_when_the_conversation_outgrows_the_context() {
    let model = tiny_model();
    let model = model.to_str().expect("utf-8 path");
    let out = purebee(&[&["chat", model, "-c", "50"], &GREEDY_REF[..]].concat(), "Hello\nMore\nEven more\n");
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(text(&out.stdout).lines().count(), 1);
    assert!(stderr.contains("the conversation has outgrown the context of 50 tokens"), "{stderr}");
}

#[test]
fn system_without_chat_is_an_error_naming_the_flag() {
    let model = tiny_model();
    let out =
        purebee(&["run", model.to_str().expect("utf-8 path"), "--system", "x", "-p", "Hi", "--engine", "ref"], "");
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("--system") && stderr.contains("--chat"), "{stderr}");
}

#[test]
fn a_model_without_a_chat_template_is_an_error_naming_the_key() {
    // The tiny model with every key but the template.
    let src = GgufFile::open(tiny_model()).expect("fixture opens");
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata().iter().filter(|(k, _)| k != "tokenizer.chat_template" && k != "general.alignment") {
        w.add(k, v.clone()).expect("valid key");
    }
    for info in src.tensors() {
        w.add_tensor(&info.name, info.dtype, &info.ne, src.tensor_bytes(info).to_vec()).expect("valid tensor");
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("no-template.gguf");
    w.write_file(&path).expect("written");
    let path = path.to_str().expect("utf-8 path");
    for args in [vec!["run", path, "--chat", "-p", "Hi"], vec!["chat", path]] {
        let out = purebee(&[&args[..], &GREEDY_REF[..]].concat(), "Hi\n");
        assert!(!out.status.success());
        let stderr = text(&out.stderr);
        assert!(stderr.contains("tokenizer.chat_template") && stderr.contains("no-template.gguf"), "{stderr}");
    }
}
