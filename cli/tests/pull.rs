//! `purebee-rs pull`, `list`, `show`, `rm`, and `run` by name, end to end against a local
//! HTTP server (the hub crate's test server: ranges, dropped connections, wrong bodies,
//! the Hugging Face hub's resolve/redirect protocol), with `PUREBEE_CACHE` in a temporary
//! folder and `HF_ENDPOINT` pointed at the server.

#[path = "../../hub/tests/common/server.rs"]
mod server;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use server::{sha256_hex, store_files, test_bytes, Fault, TestServer};

fn tiny_model() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/bitnet-tiny/tiny_b158_f32.gguf")
}

/// The binary with its store in `cache` and the hub at `server`.
fn purebee(cache: &Path, server: &TestServer) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_purebee-rs"));
    // No Hugging Face cache of the machine's own: what a test pulls comes from its server.
    c.env("PUREBEE_CACHE", cache).env("HF_ENDPOINT", server.url("")).env_remove("HF_TOKEN");
    c.env("HF_HUB_CACHE", cache.join("no-hf-cache"));
    c
}

fn run(cmd: &mut Command, args: &[&str]) -> (bool, String, String) {
    let o: Output = cmd.args(args).output().expect("the binary runs");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn an_interrupted_pull_resumes_where_it_stopped() {
    let server = TestServer::start();
    let body = test_bytes(400_000, 11);
    let sha = sha256_hex(&body);
    server.serve("/files/model.gguf", body.clone(), vec![Fault::DropAfter(150_000)]);
    let cache = tempfile::tempdir().expect("tempdir");
    let url = server.url("/files/model.gguf");

    let (ok, _, stderr) = run(&mut purebee(cache.path(), &server), &["pull", &url, "--sha256", &sha, "--retries", "0"]);
    assert!(!ok, "the connection dropped: {stderr}");
    assert!(stderr.contains("pull again to resume") && stderr.contains(&url), "{stderr}");

    let (ok, stdout, stderr) = run(&mut purebee(cache.path(), &server), &["pull", &url, "--sha256", &sha]);
    assert!(ok, "{stderr}");
    assert!(stderr.contains("resuming at"), "{stderr}");
    let gets = server.gets("/files/model.gguf");
    assert_eq!(gets.len(), 2);
    assert_eq!((gets[1].range.as_deref(), gets[1].status), (Some("bytes=150000-"), 206));
    let path = PathBuf::from(stdout.trim());
    assert_eq!(sha256_hex(&fs::read(&path).expect("the stored file")), sha);
    assert!(store_files(cache.path()).iter().all(|f| !f.ends_with(".incomplete")));
}

#[test]
fn a_wrong_digest_fails_naming_both_and_leaves_nothing() {
    let server = TestServer::start();
    let body = test_bytes(50_000, 12);
    let expected = sha256_hex(&body);
    let actual = sha256_hex(&body.iter().map(|b| b.wrapping_add(1)).collect::<Vec<u8>>());
    server.serve("/w.gguf", body, vec![Fault::WrongBody]);
    let cache = tempfile::tempdir().expect("tempdir");
    let (ok, stdout, stderr) =
        run(&mut purebee(cache.path(), &server), &["pull", &server.url("/w.gguf"), "--sha256", &expected]);
    assert!(!ok);
    assert!(stdout.is_empty());
    assert!(stderr.contains(&expected) && stderr.contains(&actual), "{stderr}");
    assert_eq!(store_files(cache.path()), Vec::<String>::new(), "nothing is left in the store");
}

#[test]
fn an_hf_pull_lands_in_the_hub_layout_and_runs_by_name() {
    let server = TestServer::start();
    let body = fs::read(tiny_model()).expect("fixture");
    let commit = "00112233445566778899aabbccddeeff00112233";
    let sha = server.hub_file("tiny/bitnet", "main", "tiny.gguf", commit, body.clone(), None, vec![]);
    let cache = tempfile::tempdir().expect("tempdir");

    let (ok, stdout, stderr) = run(&mut purebee(cache.path(), &server), &["pull", "hf://tiny/bitnet/tiny.gguf"]);
    assert!(ok, "{stderr}");
    let repo = cache.path().join("models--tiny--bitnet");
    let link = repo.join("snapshots").join(commit).join("tiny.gguf");
    assert_eq!(stdout.trim(), link.display().to_string());
    assert_eq!(fs::read_link(&link).expect("a link"), Path::new("../../blobs").join(&sha));
    assert_eq!(fs::read_to_string(repo.join("refs/main")).expect("ref"), commit);
    assert_eq!(fs::metadata(repo.join("blobs").join(&sha)).expect("blob").len(), body.len() as u64);
    assert!(stderr.contains("verified"), "{stderr}");

    // A second pull downloads nothing.
    let (ok, _, stderr) = run(&mut purebee(cache.path(), &server), &["pull", "hf://tiny/bitnet/tiny.gguf"]);
    assert!(ok, "{stderr}");
    assert!(stderr.contains("is in the store"), "{stderr}");
    assert_eq!(server.gets("/cdn/").len(), 1);

    // run by name, and by hf:// source (found in the store, no request at all).
    let requests = server.requests().len();
    for model in ["tiny/bitnet/tiny.gguf", "hf://tiny/bitnet/tiny.gguf"] {
        let (ok, stdout, stderr) = run(
            &mut purebee(cache.path(), &server),
            &["run", model, "-p", "Hello", "-n", "2", "--temp", "0", "--engine", "ref", "--verbose"],
        );
        assert!(ok, "{model}: {stderr}");
        assert!(stdout.starts_with("Hello"), "{stdout}");
        assert!(stderr.contains("loaded the model on the ref engine in"), "{stderr}");
        assert!(stderr.contains("mapped"), "{stderr}");
    }
    assert_eq!(server.requests().len(), requests, "a pulled model runs without the network");

    let (ok, stdout, stderr) = run(&mut purebee(cache.path(), &server), &["list"]);
    assert!(ok, "{stderr}");
    let row = stdout.lines().find(|l| l.starts_with("tiny/bitnet/tiny.gguf")).expect("listed");
    assert!(row.contains("bitnet") && row.contains("F32") && row.contains(&link.display().to_string()), "{stdout}");

    let (ok, stdout, stderr) = run(&mut purebee(cache.path(), &server), &["show", "tiny/bitnet/tiny.gguf"]);
    assert!(ok, "{stderr}");
    for want in ["architecture:", "parameters:", "context:", "tensor types:", "chat template", &sha] {
        assert!(stdout.contains(want), "{want}: {stdout}");
    }

    let (ok, stdout, stderr) = run(&mut purebee(cache.path(), &server), &["rm", "tiny/bitnet/tiny.gguf"]);
    assert!(ok && stdout.contains("removed"), "{stderr}");
    assert!(!repo.exists());
    let (ok, stdout, _) = run(&mut purebee(cache.path(), &server), &["list"]);
    assert!(ok && stdout.contains("no pulled models"), "{stdout}");
    let (ok, _, stderr) = run(&mut purebee(cache.path(), &server), &["run", "tiny/bitnet/tiny.gguf", "-p", "x"]);
    assert!(!ok && stderr.contains("no pulled model of that name"), "{stderr}");
}

#[test]
fn run_pulls_an_hf_source_on_first_use() {
    let server = TestServer::start();
    let body = fs::read(tiny_model()).expect("fixture");
    server.hub_file("o/r", "main", "m.gguf", "aaaabbbbccccddddeeeeffff0000111122223333", body, None, vec![]);
    let cache = tempfile::tempdir().expect("tempdir");
    let (ok, stdout, stderr) = run(
        &mut purebee(cache.path(), &server),
        &["run", "hf://o/r/m.gguf", "-p", "Hi", "-n", "1", "--temp", "0", "--engine", "ref"],
    );
    assert!(ok, "{stderr}");
    assert!(stdout.starts_with("Hi"), "{stdout}");
    assert!(stderr.contains("pulling it"), "{stderr}");
    assert_eq!(server.gets("/cdn/").len(), 1);
}

#[test]
fn two_concurrent_pulls_end_with_one_correct_blob() {
    let server = TestServer::start();
    let body = test_bytes(3_000_000, 13);
    let sha = sha256_hex(&body);
    server.serve("/c.gguf", body, vec![]);
    let cache = tempfile::tempdir().expect("tempdir");
    let url = server.url("/c.gguf");
    let children: Vec<_> = (0..2)
        .map(|_| {
            purebee(cache.path(), &server)
                .args(["pull", &url, "--sha256", &sha])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("starts")
        })
        .collect();
    for child in children {
        let o = child.wait_with_output().expect("ends");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let all = store_files(cache.path());
    let blobs: Vec<_> = all.iter().filter(|f| f.contains("/blobs/")).collect();
    assert_eq!(blobs.len(), 1, "{all:?}");
    assert_eq!(sha256_hex(&fs::read(cache.path().join(blobs[0])).expect("blob")), sha);
}

#[test]
fn bad_sources_digests_and_server_refusals_are_clear_errors() {
    let server = TestServer::start();
    server.serve("/secret.gguf", vec![0; 10], vec![Fault::Status(401)]);
    let cache = tempfile::tempdir().expect("tempdir");
    let cases: [(&[&str], &str); 7] = [
        (&["pull", "hf://owner/repo/../../etc/passwd"], "not a model source"),
        (&["pull", "hf:///etc/passwd"], "not a model source"),
        (&["pull", "hf://o/r/m.gguf", "--sha256", "1234"], "64 hex digits"),
        (&["pull", &server.url("/missing.gguf")], "404"),
        (&["pull", &server.url("/secret.gguf")], "HF_TOKEN"),
        (&["rm", "o/r/../x.gguf"], "not a model source"),
        (&["show", "o/r/none.gguf"], "no such pulled model"),
    ];
    for (args, want) in cases {
        let (ok, _, stderr) = run(&mut purebee(cache.path(), &server), args);
        assert!(!ok, "{args:?} must fail");
        assert!(stderr.starts_with("error: ") && stderr.contains(want), "{args:?}: {stderr}");
    }
    assert_eq!(store_files(cache.path()), Vec::<String>::new());
}
