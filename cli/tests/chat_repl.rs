//! `chat` on a terminal: the built binary in a pseudo-terminal (rexpect) on the tiny fixture
//! with the reference engine. Every wait is for an output pattern, bounded by a timeout; a
//! failing wait fails the test and the child is killed when its session is dropped.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rexpect::session::{spawn_with_options, Options, PtySession};

/// The longest any single wait may take.
const TIMEOUT_MS: u64 = 60_000;

const QUESTION: &str = "What is the capital of France?";

fn tiny_model() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/bitnet-tiny/tiny_b158_f32.gguf");
    path.to_str().expect("utf-8 path").to_string()
}

/// The answer of the plain (piped) mode to `QUESTION` with `flags`: what the REPL must show.
fn piped_answer(flags: &[&str]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_purebee-rs"))
        .args(["chat", &tiny_model(), "--engine", "ref", "-n", "4"])
        .args(flags)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    child.stdin.take().expect("stdin").write_all(format!("{QUESTION}\n").as_bytes()).expect("stdin written");
    let out = child.wait_with_output().expect("the binary ends");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let answer = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(!answer.is_empty() && !answer.contains('\n'), "one short line: {answer:?}");
    answer
}

/// The REPL in a pseudo-terminal, its history in `home`.
fn repl(home: &Path, flags: &[&str]) -> PtySession {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_purebee-rs"));
    cmd.args(["chat", &tiny_model(), "--engine", "ref", "-c", "2048"])
        .args(flags)
        .env("PUREBEE_CACHE", home)
        .env("HOME", home)
        .env("TERM", "xterm")
        .env_remove("XDG_DATA_HOME");
    let options = Options::new().timeout_ms(Some(TIMEOUT_MS)).strip_ansi_escape_codes(true);
    let mut p = spawn_with_options(cmd, options).expect("the REPL starts in a pty");
    p.exp_string(">>> ").expect("the prompt");
    p
}

/// Checks that the ended REPL exited with status 0 (rexpect does not re-export nix's
/// `WaitStatus`, so its debug form is read).
fn assert_exited_with_0(p: &PtySession) {
    let status = format!("{:?}", p.process().wait());
    assert!(status.starts_with("Ok(Exited(") && status.ends_with(", 0))"), "{status}");
}

/// Leaves with `/bye` and checks the exit status.
fn bye(mut p: PtySession) {
    p.send_line("/bye").expect("sent");
    p.exp_eof().expect("the REPL ends");
    assert_exited_with_0(&p);
}

#[test]
fn a_question_streams_an_answer_then_the_speed_and_the_context_in_use() {
    let answer = piped_answer(&["--temp", "0"]);
    let home = tempfile::tempdir().expect("temp dir");
    let mut p = repl(home.path(), &["--temp", "0", "-n", "4"]);
    p.send_line(QUESTION).expect("sent");
    p.exp_string(&answer).expect("the answer");
    let (_, speed) = p.exp_regex(r"tokens/s, context \d+/2048").expect("the speed line");
    let used: usize =
        speed.rsplit(' ').next().and_then(|c| c.split('/').next()).and_then(|n| n.parse().ok()).expect("n");
    assert!(used > 4, "the prompt and the answer are in the context: {speed}");
    p.exp_string(">>> ").expect("the next prompt");
    bye(p);
}

#[test]
fn ctrl_c_stops_an_answer_and_keeps_the_process_and_the_conversation() {
    let answer = piped_answer(&["--temp", "0"]);
    let home = tempfile::tempdir().expect("temp dir");
    // 1500 tokens: the answer is still being written long after its first words.
    let mut p = repl(home.path(), &["--temp", "0", "-n", "1500"]);
    p.send_line(QUESTION).expect("sent");
    p.exp_string(&answer).expect("the answer starts");
    p.send_control('c').expect("Ctrl-C");
    p.exp_string("stopped (the answer so far is kept)").expect("the answer stops");
    p.exp_string(">>> ").expect("the process goes on");

    // The conversation holds the question and the partial answer, in the KV cache too.
    p.send_line("/show info").expect("sent");
    let (_, info) = p.exp_regex(r"conversation:  \d+ messages, \d+/2048").expect("the conversation");
    assert!(info.contains(" 2 messages"), "{info}");
    let used: usize =
        info.rsplit(' ').next().and_then(|c| c.split('/').next()).and_then(|n| n.parse().ok()).expect("n");
    assert!((20..1500).contains(&used), "the prompt and part of the answer: {info}");

    // Ctrl-C at an empty prompt says how to leave; Ctrl-D leaves.
    p.exp_string(">>> ").expect("prompt");
    p.send_control('c').expect("Ctrl-C");
    p.exp_string("Use Ctrl-D or /bye to leave.").expect("the hint");
    p.exp_string(">>> ").expect("prompt");
    p.send_control('d').expect("Ctrl-D");
    p.exp_eof().expect("the REPL ends");
    assert_exited_with_0(&p);
}

#[test]
fn set_temperature_0_makes_the_answers_greedy() {
    let greedy = piped_answer(&["--temp", "0"]);
    let sampled = piped_answer(&["--temp", "1.5", "--seed", "7"]);
    assert_ne!(greedy, sampled, "the fixture samples something else than its greedy answer");
    let home = tempfile::tempdir().expect("temp dir");
    let mut p = repl(home.path(), &["--temp", "1.5", "--seed", "7", "-n", "4"]);

    // A bad value names the parameter and the range, and changes nothing.
    p.send_line("/set top_p 2").expect("sent");
    p.exp_string("/set top_p: \"2\" is not accepted: expected a number in (0, 1]").expect("the message");
    p.send_line("/set temperature 0").expect("sent");
    p.exp_string("temperature set to 0").expect("the confirmation");
    p.send_line("/show parameters").expect("sent");
    p.exp_regex(r"temperature +0\r?\n").expect("the new temperature");
    p.exp_regex(r"top_p +0.95\r?\n").expect("top_p unchanged");
    p.exp_string(">>> ").expect("prompt");
    p.send_line(QUESTION).expect("sent");
    p.exp_string(&greedy).expect("the greedy answer");
    p.exp_string(">>> ").expect("prompt");
    bye(p);
}

#[test]
fn the_history_survives_a_restart() {
    let answer = piped_answer(&["--temp", "0"]);
    let home = tempfile::tempdir().expect("temp dir");
    let mut p = repl(home.path(), &["--temp", "0", "-n", "4"]);
    p.send_line(QUESTION).expect("sent");
    p.exp_string(&answer).expect("the answer");
    p.exp_string(">>> ").expect("prompt");
    bye(p);
    let history = std::fs::read_to_string(home.path().join("chat_history")).expect("the history file");
    assert!(history.contains(QUESTION) && history.contains("/bye"), "{history}");

    // Up twice recalls the question of the last session; Enter asks it again.
    let mut p = repl(home.path(), &["--temp", "0", "-n", "4"]);
    p.send("\x1b[A").expect("up");
    p.flush().expect("flushed");
    p.exp_string("/bye").expect("the last line");
    p.send("\x1b[A").expect("up");
    p.flush().expect("flushed");
    p.exp_string(QUESTION).expect("the line before");
    p.send("\r").expect("enter");
    p.flush().expect("flushed");
    p.exp_string(&answer).expect("the answer again");
    p.exp_string(">>> ").expect("prompt");
    bye(p);
}
