//! A model file truncated while its map is being read: the process exits with a message
//! naming the file (`gguf/map_guard.rs`), instead of dying silently on SIGBUS; a SIGBUS
//! that has nothing to do with a map meets the action it would have met without the guard.
//!
//! Each case runs in a child process (this test binary again, with `PUREBEE_SIGBUS_CHILD`
//! naming the case), since the outcome is the process's end.

#![cfg(target_os = "linux")]

use std::fs::OpenOptions;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use purebee_memory::gguf::GgufFile;

const CHILD: &str = "PUREBEE_SIGBUS_CHILD";

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/bitnet-tiny/tiny_b158_f32.gguf")
}

/// Runs this test binary's test `name` as a child acting out `case` on a copy of the fixture
/// at `model`.
fn child(name: &str, case: &str, model: &Path) -> Output {
    Command::new(std::env::current_exe().expect("the test binary"))
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, case)
        .env("PUREBEE_SIGBUS_MODEL", model)
        .output()
        .expect("the child runs")
}

/// The child's part: open the model, then `act`; returns true when this process is a child.
fn as_child(case: &str, act: impl FnOnce(&GgufFile, &Path)) -> bool {
    if std::env::var(CHILD).as_deref() != Ok(case) {
        return false;
    }
    let path = PathBuf::from(std::env::var_os("PUREBEE_SIGBUS_MODEL").expect("the model's path"));
    let file = GgufFile::open(&path).expect("the copy opens");
    act(&file, &path);
    true
}

fn copy_of_fixture(dir: &Path) -> PathBuf {
    let model = dir.join("model.gguf");
    std::fs::copy(fixture(), &model).expect("copy the fixture");
    model
}

#[test]
fn a_file_truncated_under_its_map_ends_the_process_with_a_message_naming_it() {
    if as_child("truncate", |file, path| {
        // Cut the file down to its first page, then read the last tensor's bytes (pages
        // now past the end of the file).
        OpenOptions::new().write(true).open(path).and_then(|f| f.set_len(4096)).expect("truncate");
        let last = file.tensors().last().expect("a tensor");
        let bytes = file.tensor_bytes(last);
        let sum: u64 = bytes.iter().map(|&b| u64::from(b)).sum();
        println!("read {sum} without a fault");
    }) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let model = copy_of_fixture(dir.path());
    let out = child("a_file_truncated_under_its_map_ends_the_process_with_a_message_naming_it", "truncate", &model);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "exit status {:?}, stderr: {stderr}", out.status);
    assert!(
        stderr.contains(&model.display().to_string()) && stderr.contains("truncated or rewritten while it was in use"),
        "stderr: {stderr}"
    );
}

#[test]
fn a_sigbus_outside_every_map_still_kills_the_process() {
    if as_child("kill", |_file, _path| {
        // SIGBUS sent from outside, twice: no faulting address in a map, so each goes where it
        // would without the guard. Rust's runtime takes the first (its stack-overflow handler
        // finds no overflow, restores the default action and returns); the second kills.
        let pid = std::process::id().to_string();
        for _ in 0..2 {
            Command::new("kill").args(["-BUS", &pid]).status().expect("kill runs");
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        println!("still alive");
    }) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let model = copy_of_fixture(dir.path());
    let out = child("a_sigbus_outside_every_map_still_kills_the_process", "kill", &model);
    assert_eq!(
        out.status.signal(),
        Some(7),
        "status {:?}, stdout: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
}
