//! The official `openai` Python package (pinned in `tests/openai/requirements.txt`) against
//! a started server: `tests/openai/check_client.py` drives chat and completions, streaming
//! and not, usage chunks, stop strings, the prompt cache, log-probabilities and typed errors.
//!
//! `PUREBEE_TEST_PYTHON` names the python that has the package (`scripts/test.sh` sets it
//! from `scripts/python-env.sh`); without it this test fails saying so, unless
//! `PUREBEE_SKIP_OPENAI=1` skips it explicitly.

mod common;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use common::*;

fn python() -> Option<PathBuf> {
    match std::env::var_os("PUREBEE_TEST_PYTHON") {
        Some(p) => Some(PathBuf::from(p)),
        None if std::env::var("PUREBEE_SKIP_OPENAI").as_deref() == Ok("1") => {
            eprintln!("PUREBEE_SKIP_OPENAI=1: the openai client checks are NOT run");
            None
        }
        None => panic!(
            "PUREBEE_TEST_PYTHON is not set: run `export PUREBEE_TEST_PYTHON=$(scripts/python-env.sh)` (or \
             scripts/test.sh, which does), or set PUREBEE_SKIP_OPENAI=1 to skip these checks explicitly"
        ),
    }
}

#[test]
fn the_official_openai_client_works_against_the_server() {
    let Some(python) = python() else { return };
    let mut c = tiny_config();
    c.api_key = Some("sk-client-test".to_string());
    let s = TestServer::start(c);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/openai/check_client.py");
    let mut child = Command::new(&python)
        .arg(&script)
        .arg(format!("http://{}/v1", s.addr))
        .arg("sk-client-test")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {}: {e}", python.display()));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the script") {
            break status;
        }
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            panic!("{} did not finish within {TIMEOUT:?}", script.display());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut out = String::new();
    let mut err = String::new();
    child.stdout.take().map(|mut o| o.read_to_string(&mut out));
    child.stderr.take().map(|mut e| e.read_to_string(&mut err));
    eprintln!("{out}");
    assert!(status.success(), "{} failed ({status}):\n{out}\n{err}", script.display());
    assert!(out.contains("checks passed"), "{out}\n{err}");
}
