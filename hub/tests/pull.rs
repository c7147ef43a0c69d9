//! Pulls against a local HTTP server (`common/server.rs`) that drops, stalls, ignores
//! `Range`, sends wrong bytes or refuses: every pull ends with the right bytes in the store
//! or a clear error and nothing half-written in place.

mod common;

use std::fs;
use std::path::Path;
use std::time::Duration;

use common::server::{sha256_hex, store_files, test_bytes, Fault, TestServer};
use purebee_hub::{pull, HubError, PullEvent, PullOptions, Sha256Digest, Source, Store};

/// Options for tests: no real waits (1 ms backoff, 300 ms stall timeout).
fn options(server: &TestServer, retries: u32) -> PullOptions {
    PullOptions {
        hf_endpoint: server.url(""),
        retries,
        backoff: Duration::from_millis(1),
        stall_timeout: Duration::from_millis(300),
        connect_timeout: Duration::from_secs(5),
        ..PullOptions::default()
    }
}

fn digest(hex: &str) -> Sha256Digest {
    Sha256Digest::parse(hex).expect("a digest")
}

#[test]
fn an_interrupted_pull_resumes_with_a_range_request() {
    let server = TestServer::start();
    let body = test_bytes(300_000, 1);
    server.serve("/m/model.gguf", body.clone(), vec![Fault::DropAfter(120_000)]);
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::new(dir.path());
    let source = Source::parse(&server.url("/m/model.gguf")).expect("source");
    let mut opts = options(&server, 0);
    opts.sha256 = Some(digest(&sha256_hex(&body)));

    let err = pull(&store, &source, &opts, &mut |_| {}).expect_err("the connection dropped");
    assert!(matches!(err, HubError::Transfer { downloaded: 120_000, .. }), "{err}");
    assert!(err.to_string().contains("pull again to resume"), "{err}");

    let mut resumed_from = None;
    let pulled = pull(&store, &source, &opts, &mut |e| {
        if let PullEvent::Started { offset, .. } = e {
            resumed_from = Some(*offset);
        }
    })
    .expect("resumed");
    assert_eq!(resumed_from, Some(120_000));
    assert_eq!(pulled.downloaded, 180_000, "only the rest was downloaded");
    let gets = server.gets("/m/model.gguf");
    assert_eq!(gets.len(), 2);
    assert_eq!(gets[0].range, None);
    assert_eq!(gets[1].range.as_deref(), Some("bytes=120000-"));
    assert_eq!(gets[1].status, 206);
    assert_eq!(fs::read(&pulled.path).expect("stored"), body);
    assert_eq!(sha256_hex(&fs::read(&pulled.path).expect("stored")), sha256_hex(&body));
    assert!(store_files(dir.path()).iter().all(|f| !f.ends_with(".incomplete")), "{:?}", store_files(dir.path()));
}

#[test]
fn a_dropped_connection_is_retried_within_one_pull() {
    let server = TestServer::start();
    let body = test_bytes(200_000, 2);
    server.serve("/m.gguf", body.clone(), vec![Fault::DropAfter(50_000), Fault::Status(503)]);
    let dir = tempfile::tempdir().expect("tempdir");
    let source = Source::parse(&server.url("/m.gguf")).expect("source");
    let mut retries = Vec::new();
    let pulled = pull(&Store::new(dir.path()), &source, &options(&server, 3), &mut |e| {
        if let PullEvent::Retrying { reason, .. } = e {
            retries.push(reason.to_string());
        }
    })
    .expect("pulled after two failures");
    assert_eq!(retries.len(), 2, "{retries:?}");
    assert!(retries[1].contains("503"), "{retries:?}");
    let gets = server.gets("/m.gguf");
    assert_eq!(
        gets.iter().map(|g| g.range.clone()).collect::<Vec<_>>(),
        vec![None, Some("bytes=50000-".to_string()), Some("bytes=50000-".to_string())]
    );
    assert_eq!(fs::read(&pulled.path).expect("stored"), body);
    assert_eq!(pulled.sha256.to_string(), sha256_hex(&body));
}

#[test]
fn a_stalled_download_times_out_and_resumes() {
    let server = TestServer::start();
    let body = test_bytes(100_000, 3);
    server.serve("/s.gguf", body.clone(), vec![Fault::StallAfter(30_000)]);
    let dir = tempfile::tempdir().expect("tempdir");
    let source = Source::parse(&server.url("/s.gguf")).expect("source");
    let mut stalled = false;
    let pulled = pull(&Store::new(dir.path()), &source, &options(&server, 2), &mut |e| {
        if let PullEvent::Retrying { reason, .. } = e {
            stalled |= reason.contains("stalled");
        }
    })
    .expect("pulled");
    assert!(stalled, "the retry says the download stalled");
    let gets = server.gets("/s.gguf");
    assert_eq!(gets.len(), 2);
    assert_eq!(gets[1].range.as_deref(), Some("bytes=30000-"));
    assert_eq!(gets[1].status, 206);
    assert_eq!(fs::read(&pulled.path).expect("stored"), body);
}

#[test]
fn a_server_that_ignores_range_means_a_clean_restart() {
    let server = TestServer::start();
    let body = test_bytes(150_000, 4);
    server.serve("/r.gguf", body.clone(), vec![Fault::DropAfter(60_000), Fault::IgnoreRange]);
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::new(dir.path());
    let source = Source::parse(&server.url("/r.gguf")).expect("source");
    let opts = options(&server, 0);
    assert!(pull(&store, &source, &opts, &mut |_| {}).is_err());
    let mut restarted = false;
    let pulled = pull(&store, &source, &opts, &mut |e| restarted |= matches!(e, PullEvent::Restarting { .. }))
        .expect("pulled from the start");
    assert!(restarted);
    let gets = server.gets("/r.gguf");
    assert_eq!((gets[1].range.as_deref(), gets[1].status), (Some("bytes=60000-"), 200));
    assert_eq!(fs::read(&pulled.path).expect("stored"), body, "not the first 60000 bytes twice");
    assert_eq!(pulled.sha256.to_string(), sha256_hex(&body));
}

#[test]
fn a_wrong_body_is_a_digest_error_and_leaves_nothing_behind() {
    let server = TestServer::start();
    let body = test_bytes(64_000, 5);
    server.serve("/w.gguf", body.clone(), vec![Fault::WrongBody]);
    let dir = tempfile::tempdir().expect("tempdir");
    let source = Source::parse(&server.url("/w.gguf")).expect("source");
    let mut opts = options(&server, 0);
    let expected = sha256_hex(&body);
    opts.sha256 = Some(digest(&expected));
    let err = pull(&Store::new(dir.path()), &source, &opts, &mut |_| {}).expect_err("wrong bytes");
    let actual = sha256_hex(&body.iter().map(|b| b.wrapping_add(1)).collect::<Vec<u8>>());
    match &err {
        HubError::DigestMismatch { expected: e, actual: a, .. } => assert_eq!((e, a), (&expected, &actual)),
        other => panic!("expected a digest mismatch, got {other}"),
    }
    assert!(err.to_string().contains(&expected) && err.to_string().contains(&actual), "{err}");
    assert_eq!(store_files(dir.path()), Vec::<String>::new(), "nothing is left in the store");
}

#[test]
fn an_hf_pull_lands_in_the_hub_layout_and_a_second_pull_downloads_nothing() {
    let server = TestServer::start();
    let body = test_bytes(80_000, 6);
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let sha = server.hub_file("owner/repo", "main", "model.Q4_0.gguf", commit, body.clone(), None, vec![]);
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::new(dir.path());
    let source = Source::parse("hf://owner/repo/model.Q4_0.gguf").expect("source");
    let opts = options(&server, 0);

    let pulled = pull(&store, &source, &opts, &mut |_| {}).expect("pulled");
    let repo = dir.path().join("models--owner--repo");
    assert_eq!(pulled.path, repo.join("snapshots").join(commit).join("model.Q4_0.gguf"));
    assert_eq!(fs::read_link(&pulled.path).expect("a link"), Path::new("../../blobs").join(&sha));
    assert_eq!(fs::read(repo.join("blobs").join(&sha)).expect("blob"), body);
    assert_eq!(fs::read_to_string(repo.join("refs/main")).expect("ref"), commit);
    assert_eq!(pulled.downloaded, body.len() as u64);
    assert_eq!(server.gets("/cdn/").len(), 1);
    assert!(pulled.verified, "checked against X-Linked-Etag");
    assert!(server
        .requests()
        .iter()
        .any(|r| r.method == "HEAD" && r.path == "/owner/repo/resolve/main/model.Q4_0.gguf"));

    let mut cached = false;
    let again = pull(&store, &source, &opts, &mut |e| cached |= matches!(e, PullEvent::Cached { .. })).expect("again");
    assert!(cached);
    assert_eq!(again.downloaded, 0);
    assert_eq!(again.path, pulled.path);
    assert_eq!(server.gets("/cdn/").len(), 1, "the second pull downloaded nothing");

    // Found offline by name and by source, listed, and removed.
    assert_eq!(store.find(&source).map(|m| m.path), Some(pulled.path.clone()));
    let listed = store.list().expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].name, "owner/repo/model.Q4_0.gguf");
    assert_eq!(listed[0].size, body.len() as u64);
    assert_eq!(listed[0].sha256.map(|d| d.to_string()), Some(sha.clone()));
    let removed = store.remove("owner/repo/model.Q4_0.gguf").expect("removed");
    assert_eq!(removed.freed, body.len() as u64);
    assert!(!repo.exists());
    assert!(matches!(store.find_name("owner/repo/model.Q4_0.gguf"), Err(HubError::NotInStore { .. })));
}

/// A file another tool pulled into its own Hugging Face cache is taken from there, after its
/// digest is checked, with nothing downloaded; a blob there that does not match is ignored.
#[test]
fn an_hf_file_in_another_hub_cache_is_taken_from_there_after_its_digest_is_checked() {
    let server = TestServer::start();
    let body = test_bytes(50_000, 9);
    let commit = "89abcdef0123456789abcdef0123456789abcdef";
    let sha = server.hub_file("owner/repo", "main", "model.gguf", commit, body.clone(), None, vec![]);
    let source = Source::parse("hf://owner/repo/model.gguf").expect("source");
    let shared = tempfile::tempdir().expect("tempdir");
    let shared_blob = shared.path().join("models--owner--repo/blobs").join(&sha);
    fs::create_dir_all(shared_blob.parent().expect("blobs")).expect("mkdir");
    let opts = PullOptions { shared_caches: vec![shared.path().to_path_buf()], ..options(&server, 0) };

    // A blob of the right name with other bytes is not trusted: the file is downloaded.
    fs::write(&shared_blob, test_bytes(50_000, 10)).expect("write");
    let dir = tempfile::tempdir().expect("tempdir");
    let pulled = pull(&Store::new(dir.path()), &source, &opts, &mut |_| {}).expect("pulled");
    assert_eq!((pulled.downloaded, server.gets("/cdn/").len()), (body.len() as u64, 1));

    // The right bytes: taken, nothing downloaded, the store's blob and links as after a download.
    fs::write(&shared_blob, &body).expect("write");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut shared_event = false;
    let pulled =
        pull(&Store::new(dir.path()), &source, &opts, &mut |e| shared_event |= matches!(e, PullEvent::Shared { .. }))
            .expect("pulled");
    assert!(shared_event && pulled.verified);
    assert_eq!((pulled.downloaded, server.gets("/cdn/").len()), (0, 1), "nothing more was downloaded");
    assert_eq!(fs::read(&pulled.path).expect("the linked file"), body);
    assert_eq!(fs::read(&shared_blob).expect("the shared blob"), body, "the other cache is left as it was");
}

#[test]
fn an_hf_pull_checks_the_hubs_digest_and_a_conflicting_sha256() {
    let server = TestServer::start();
    let body = test_bytes(10_000, 7);
    let commit = "89abcdef0123456789abcdef0123456789abcdef";
    server.hub_file("o/r", "main", "bad.gguf", commit, body.clone(), None, vec![Fault::WrongBody]);
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::new(dir.path());
    let err = pull(&store, &Source::parse("hf://o/r/bad.gguf").expect("source"), &options(&server, 0), &mut |_| {})
        .expect_err("the body does not match X-Linked-Etag");
    assert!(matches!(err, HubError::DigestMismatch { .. }), "{err}");
    assert_eq!(store_files(dir.path()), Vec::<String>::new());

    let mut opts = options(&server, 0);
    opts.sha256 = Some(digest(&"ab".repeat(32)));
    let err = pull(&store, &Source::parse("hf://o/r/bad.gguf").expect("source"), &opts, &mut |_| {})
        .expect_err("the hub's digest is another");
    assert!(matches!(err, HubError::DigestConflict { .. }), "{err}");
}

#[test]
fn a_revision_gets_its_own_ref() {
    let server = TestServer::start();
    let body = test_bytes(5_000, 8);
    let commit = "fedcba9876543210fedcba9876543210fedcba98";
    server.hub_file("o/r", "v1.0", "m.gguf", commit, body, None, vec![]);
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::new(dir.path());
    let source = Source::parse("hf://o/r/m.gguf@v1.0").expect("source");
    pull(&store, &source, &options(&server, 0), &mut |_| {}).expect("pulled");
    let repo = dir.path().join("models--o--r");
    assert_eq!(fs::read_to_string(repo.join("refs/v1.0")).expect("ref"), commit);
    assert!(!repo.join("refs/main").exists());
    assert_eq!(store.list().expect("list")[0].name, "o/r/m.gguf@v1.0");
    assert!(store.find_name("o/r/m.gguf@v1.0").is_ok());
    assert!(store.find_name(&format!("o/r/m.gguf@{commit}")).is_ok());
    assert!(store.find_name("o/r/m.gguf").is_err(), "main was never pulled");
}

#[test]
fn not_found_and_unauthorized_are_clear_errors_without_retries() {
    let server = TestServer::start();
    server.serve("/private.gguf", vec![1, 2, 3], vec![Fault::Status(401)]);
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::new(dir.path());
    let opts = options(&server, 5);
    let url = server.url("/missing.gguf");
    let err = pull(&store, &Source::parse(&url).expect("source"), &opts, &mut |_| {}).expect_err("404");
    assert!(matches!(&err, HubError::NotFound { url: u } if *u == url), "{err}");
    let err = pull(&store, &Source::parse(&server.url("/private.gguf")).expect("source"), &opts, &mut |_| {})
        .expect_err("401");
    assert!(matches!(err, HubError::Unauthorized { status: 401, .. }), "{err}");
    assert!(err.to_string().contains("HF_TOKEN"), "{err}");
    let err = pull(&store, &Source::parse("hf://nobody/nothing/x.gguf").expect("source"), &opts, &mut |_| {})
        .expect_err("404 from the hub");
    assert!(matches!(err, HubError::NotFound { .. }), "{err}");
    assert_eq!(server.requests().len(), 3, "no retries");
}

#[test]
fn two_concurrent_pulls_of_one_file_end_with_one_correct_blob() {
    let server = TestServer::start();
    let body = test_bytes(2_000_000, 9);
    let sha = sha256_hex(&body);
    server.serve("/big.gguf", body.clone(), vec![]);
    let dir = tempfile::tempdir().expect("tempdir");
    let source = Source::parse(&server.url("/big.gguf")).expect("source");
    let mut opts = options(&server, 0);
    opts.sha256 = Some(digest(&sha));
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> =
            (0..2).map(|_| s.spawn(|| pull(&Store::new(dir.path()), &source, &opts, &mut |_| {}))).collect();
        handles.into_iter().map(|h| h.join().expect("no panic")).collect()
    });
    let paths: Vec<_> = results.into_iter().map(|r| r.expect("both pulls succeed").path).collect();
    assert_eq!(paths[0], paths[1]);
    assert_eq!(fs::read(&paths[0]).expect("stored"), body);
    let host = store_files(dir.path());
    let blobs: Vec<_> = host.iter().filter(|f| f.contains("/blobs/")).collect();
    assert_eq!(blobs.len(), 1, "{host:?}");
    assert!(blobs[0].ends_with(&sha), "{host:?}");
    assert_eq!(server.gets("/big.gguf").len(), 1, "the second pull found the first one's blob");
}

#[test]
fn a_url_pull_is_listed_by_its_url_and_removed() {
    let server = TestServer::start();
    let body = test_bytes(1_000, 10);
    server.serve("/dl/tiny.gguf", body.clone(), vec![]);
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::new(dir.path());
    let url = server.url("/dl/tiny.gguf");
    let pulled =
        pull(&store, &Source::parse(&url).expect("source"), &options(&server, 0), &mut |_| {}).expect("pulled");
    assert!(pulled.path.to_string_lossy().contains("urls--127.0.0.1_"), "{}", pulled.path.display());
    assert_eq!(pulled.path.file_name().and_then(|n| n.to_str()), Some("tiny.gguf"));
    assert!(!pulled.verified, "no digest was given for the URL");
    let listed = store.list().expect("list");
    assert_eq!(listed.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(), vec![url.as_str()]);
    assert_eq!(store.find_name(&url).expect("found").path, pulled.path);
    // A second pull of a URL without a digest finds the stored file too.
    let again = pull(&store, &Source::parse(&url).expect("source"), &options(&server, 0), &mut |_| {}).expect("again");
    assert_eq!(again.downloaded, 0);
    assert_eq!(server.gets("/dl/tiny.gguf").len(), 1);
    store.remove(&url).expect("removed");
    assert_eq!(store_files(dir.path()), Vec::<String>::new());
}

#[test]
fn bad_names_and_digests_are_refused() {
    for bad in ["hf://o/r/../../etc/passwd", "hf:///abs/x.gguf", "hf://o/r/x.gguf@..", "http://h/"] {
        assert!(matches!(Source::parse(bad), Err(HubError::BadSource { .. })), "{bad}");
    }
    for bad in ["abc", &"z".repeat(64), &"0".repeat(63)] {
        let err = Sha256Digest::parse(bad).expect_err("refused");
        assert!(err.to_string().contains("64 hex digits"), "{err}");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::new(dir.path());
    assert!(matches!(store.find_name("../x/y.gguf"), Err(HubError::BadSource { .. })));
    assert!(matches!(store.remove("o/r/../../x"), Err(HubError::BadSource { .. })));
}

/// A full disk, simulated by pointing the partial file at `/dev/full` (every write fails with
/// ENOSPC): a clear error naming the file, no retry.
#[cfg(target_os = "linux")]
#[test]
fn a_full_disk_is_a_clear_error() {
    if !Path::new("/dev/full").exists() {
        return;
    }
    let server = TestServer::start();
    let body = test_bytes(10_000, 14);
    let sha = sha256_hex(&body);
    server.serve("/f.gguf", body, vec![]);
    let dir = tempfile::tempdir().expect("tempdir");
    let url = server.url("/f.gguf");
    let port = url.rsplit(':').next().and_then(|p| p.split('/').next()).expect("a port");
    let blobs = dir.path().join(format!("urls--127.0.0.1_{port}")).join("blobs");
    fs::create_dir_all(&blobs).expect("blobs");
    std::os::unix::fs::symlink("/dev/full", blobs.join(format!("{sha}.incomplete"))).expect("link");
    let mut opts = options(&server, 3);
    opts.sha256 = Some(digest(&sha));
    let err = pull(&Store::new(dir.path()), &Source::parse(&url).expect("source"), &opts, &mut |_| {})
        .expect_err("the disk is full");
    assert!(matches!(err, HubError::DiskFull { .. }), "{err}");
    assert!(err.to_string().contains("disk is full") && err.to_string().contains(".incomplete"), "{err}");
    assert_eq!(server.gets("/f.gguf").len(), 1, "no retry");
}
