//! The pull protocol.
//!
//! 1. `hf://`: a `HEAD` of `{HF_ENDPOINT}/OWNER/REPO/resolve/REV/FILE` without following
//!    redirects gives the commit (`X-Repo-Commit`), the LFS sha256 (`X-Linked-Etag`) and
//!    where the bytes are (`Location`). A blob already named by that digest is linked into
//!    the snapshot with nothing downloaded.
//! 2. Under an exclusive lock on `.locks/<folder>/<digest or url-id>.lock` (so concurrent
//!    pulls of one file take turns; the second finds the blob in place), the bytes stream
//!    into `blobs/<key>.incomplete` and through sha256 as they are written.
//! 3. A partial file is resumed: its bytes are hashed again, then `Range: bytes=N-` is
//!    asked for. A 206 from `N` continues it; a 200 (the server ignored `Range`) or another
//!    range starts over from an empty file.
//! 4. Lost connections, stalls (no data for `stall_timeout`), 5xx and 429 are retried with
//!    exponential backoff (the count starts again whenever bytes arrived); 404, 401/403,
//!    another 4xx and a full disk are errors at once (a full disk keeps the partial file).
//! 5. The digest is checked against `--sha256` or the hub's; a mismatch deletes the
//!    partial file. Then the file is synced and renamed to `blobs/<sha256>` (atomic), the
//!    snapshot link and the ref are written (each through a rename), and the lock released.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};
use ureq::Agent;

use crate::digest::Sha256Digest;
use crate::error::HubError;
use crate::http::{self, Failure};
use crate::source::{encode_segment, Source};
use crate::store::{link_snapshot, url_id, write_text, Store};

/// How to pull.
#[derive(Clone, Debug)]
pub struct PullOptions {
    /// The digest the file must have (else the hub's `X-Linked-Etag`, else none).
    pub sha256: Option<Sha256Digest>,
    /// The Hugging Face endpoint (`HF_ENDPOINT`, default `https://huggingface.co`).
    pub hf_endpoint: String,
    /// A Hugging Face token (`HF_TOKEN`), sent to the endpoint only.
    pub hf_token: Option<String>,
    /// Retries after a failure that retrying may fix.
    pub retries: u32,
    /// The first retry's delay; each next one doubles it, up to 30 s.
    pub backoff: Duration,
    /// A download whose connection delivers nothing for this long is retried.
    pub stall_timeout: Duration,
    /// How long to wait for a connection.
    pub connect_timeout: Duration,
    /// Other Hugging Face hub caches (read only): an `hf://` file whose blob one of them
    /// holds, with the expected digest, is copied (hard-linked where it can be) instead of
    /// downloaded, so a file another tool pulled is not fetched twice.
    pub shared_caches: Vec<PathBuf>,
}

impl Default for PullOptions {
    fn default() -> PullOptions {
        PullOptions {
            sha256: None,
            hf_endpoint: "https://huggingface.co".to_string(),
            hf_token: None,
            retries: 5,
            backoff: Duration::from_secs(1),
            stall_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(30),
            shared_caches: Vec::new(),
        }
    }
}

impl PullOptions {
    /// The defaults with `HF_ENDPOINT` and `HF_TOKEN` from the environment, and the Hugging
    /// Face hub cache as huggingface_hub finds it (`HF_HUB_CACHE`, else `HF_HOME/hub`, else
    /// `~/.cache/huggingface/hub`) as a shared cache.
    pub fn from_env() -> PullOptions {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let mut o = PullOptions::default();
        if let Some(e) = var("HF_ENDPOINT") {
            o.hf_endpoint = e.trim().trim_end_matches('/').to_string();
        }
        o.hf_token = var("HF_TOKEN").or_else(|| var("HUGGING_FACE_HUB_TOKEN"));
        let hf_cache = var("HF_HUB_CACHE")
            .map(PathBuf::from)
            .or_else(|| var("HF_HOME").map(|h| Path::new(&h).join("hub")))
            .or_else(|| var("HOME").map(|h| Path::new(&h).join(".cache/huggingface/hub")));
        o.shared_caches.extend(hf_cache);
        o
    }
}

/// What a pull reports as it goes.
#[derive(Debug)]
#[non_exhaustive]
pub enum PullEvent<'a> {
    /// The file was already in the store: nothing to download.
    Cached {
        /// Its path.
        path: &'a Path,
    },
    /// The file was taken from another Hugging Face hub cache (`PullOptions::shared_caches`).
    Shared {
        /// The blob it was taken from.
        from: &'a Path,
    },
    /// Another pull of the same file holds its lock; this one waits for it.
    Waiting {
        /// The lock file.
        lock: &'a Path,
    },
    /// A partial file from an earlier pull is hashed before it is resumed.
    Checking {
        /// Its bytes.
        bytes: u64,
    },
    /// Bytes are flowing: from `offset` (a resume when above 0) of `total`.
    Started {
        /// The URL the bytes come from.
        url: &'a str,
        /// Where the transfer starts.
        offset: u64,
        /// The file's size when the server said it.
        total: Option<u64>,
    },
    /// Bytes written so far.
    Progress {
        /// Bytes in the partial file.
        done: u64,
        /// The file's size when known.
        total: Option<u64>,
    },
    /// The partial file was discarded and the download starts over.
    Restarting {
        /// Why.
        reason: &'a str,
    },
    /// An attempt failed; the next starts after `delay`.
    Retrying {
        /// The failure count (1 for the first retry).
        attempt: u32,
        /// The most retries allowed.
        retries: u32,
        /// The wait before it.
        delay: Duration,
        /// What failed.
        reason: &'a str,
    },
}

/// The result of a pull.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pulled {
    /// The model's name (`OWNER/REPO/FILE[@REV]` or the URL).
    pub name: String,
    /// The path to open (the snapshot link).
    pub path: PathBuf,
    /// The file's digest.
    pub sha256: Sha256Digest,
    /// Its bytes.
    pub size: u64,
    /// Bytes this pull transferred (0 when it was already there).
    pub downloaded: u64,
    /// Whether the digest was checked against one given or announced by the hub (a URL
    /// pulled without `--sha256` is only hashed).
    pub verified: bool,
}

/// Pulls `source` into `store`, reporting to `on`.
pub fn pull(
    store: &Store,
    source: &Source,
    opts: &PullOptions,
    on: &mut dyn FnMut(&PullEvent),
) -> Result<Pulled, HubError> {
    match source {
        Source::Hf { owner, repo, file, revision } => {
            let rev = revision.as_deref().unwrap_or("main");
            let file_path: Vec<String> = file.split('/').map(encode_segment).collect();
            let url = format!(
                "{}/{owner}/{repo}/resolve/{}/{}",
                opts.hf_endpoint.trim_end_matches('/'),
                encode_segment(rev),
                file_path.join("/")
            );
            let meta = hub_metadata(&url, rev, opts, on)?;
            let expected = match (opts.sha256, meta.sha256) {
                (Some(given), Some(hub)) if given != hub => {
                    return Err(HubError::DigestConflict { url, hub: hub.to_string(), given: given.to_string() })
                }
                (given, hub) => given.or(hub),
            };
            let repo_dir = store.repo_dir(source);
            let auth = opts.hf_token.as_deref().filter(|_| http::origin(&meta.location) == http::origin(&url));
            let target = Target { store, source, repo_dir: &repo_dir, snapshot: &meta.commit, expected };
            let key = expected.map_or_else(|| url_id(&url), |d| d.to_string());
            let pulled = target.fetch(&meta.location, auth, &key, opts, on)?;
            if meta.commit != rev {
                write_text(&repo_dir.join("refs").join(rev), &meta.commit)?;
            }
            Ok(pulled)
        }
        Source::Url { url, .. } => {
            let repo_dir = store.repo_dir(source);
            let id = url_id(url);
            let target = Target { store, source, repo_dir: &repo_dir, snapshot: &id, expected: opts.sha256 };
            let key = opts.sha256.map_or_else(|| id.clone(), |d| d.to_string());
            let pulled = target.fetch(url, None, &key, opts, on)?;
            write_text(&repo_dir.join("sources").join(&id), url)?;
            Ok(pulled)
        }
    }
}

/// What the hub says of a file.
struct HubMetadata {
    commit: String,
    sha256: Option<Sha256Digest>,
    location: String,
}

/// The `HEAD` of a hub file's resolve URL, redirects not followed, retried as downloads are.
fn hub_metadata(
    url: &str,
    rev: &str,
    opts: &PullOptions,
    on: &mut dyn FnMut(&PullEvent),
) -> Result<HubMetadata, HubError> {
    let agent = http::agent(opts.stall_timeout, opts.connect_timeout, false);
    let mut failures = 0;
    loop {
        let mut request = agent.head(url);
        if let Some(token) = &opts.hf_token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        let failure = match request.call() {
            Ok(response) => {
                let status = response.status().as_u16();
                if (200..400).contains(&status) {
                    return read_hub_metadata(url, rev, status, &response);
                }
                http::status_failure(url, status)
            }
            Err(e) => http::call_failure(url, e, opts.stall_timeout),
        };
        match failure {
            Failure::Fatal(e) => return Err(e),
            Failure::Retry { reason, .. } => {
                failures += 1;
                if failures > opts.retries {
                    return Err(HubError::Transfer { url: url.to_string(), reason, attempts: failures, downloaded: 0 });
                }
                let delay = backoff(opts.backoff, failures);
                on(&PullEvent::Retrying { attempt: failures, retries: opts.retries, delay, reason: &reason });
                std::thread::sleep(delay);
            }
        }
    }
}

fn read_hub_metadata(
    url: &str,
    rev: &str,
    status: u16,
    response: &ureq::http::Response<ureq::Body>,
) -> Result<HubMetadata, HubError> {
    let bad = |reason: String| HubError::BadResponse { url: url.to_string(), reason };
    let is_commit = |s: &str| (7..=64).contains(&s.len()) && s.chars().all(|c| c.is_ascii_alphanumeric());
    let commit = match http::header(response, "x-repo-commit") {
        Some(c) if is_commit(c) => c.to_string(),
        Some(c) => return Err(bad(format!("X-Repo-Commit {c:?} is not a commit hash"))),
        None if rev.len() == 40 && is_commit(rev) => rev.to_string(),
        None => return Err(bad("no X-Repo-Commit header: is HF_ENDPOINT a Hugging Face hub?".into())),
    };
    let etag = http::header(response, "x-linked-etag").or_else(|| http::header(response, "etag"));
    let sha256 = etag.and_then(|e| Sha256Digest::parse(http::unquote_etag(e)).ok());
    let location = if (300..400).contains(&status) {
        let l = http::header(response, "location").ok_or_else(|| bad(format!("HTTP {status} without Location")))?;
        http::join_url(url, l)
    } else {
        url.to_string()
    };
    Ok(HubMetadata { commit, sha256, location })
}

/// The delay before retry `n` (1-based): `first · 2^(n-1)`, at most 30 s.
fn backoff(first: Duration, n: u32) -> Duration {
    first.saturating_mul(1u32 << (n - 1).min(16)).min(Duration::from_secs(30))
}

/// Where a pull lands.
struct Target<'a> {
    store: &'a Store,
    source: &'a Source,
    repo_dir: &'a Path,
    snapshot: &'a str,
    expected: Option<Sha256Digest>,
}

impl Target<'_> {
    /// The file already in the store: the blob of the expected digest (linked into this
    /// snapshot), or, without one, this snapshot's link.
    fn already_there(&self) -> Result<Option<Pulled>, HubError> {
        let blob_there = |d: &Sha256Digest| self.repo_dir.join("blobs").join(d.to_string()).is_file();
        let sha256 = match self.expected {
            Some(d) if blob_there(&d) => d,
            Some(_) => return Ok(None),
            None => match self.store.find(self.source).and_then(|m| m.sha256) {
                Some(d) if blob_there(&d) => d,
                _ => return Ok(None),
            },
        };
        let path = link_snapshot(self.repo_dir, self.snapshot, self.source.file(), &sha256.to_string())?;
        let size = fs::metadata(&path).map_err(|source| HubError::Io { path: path.clone(), source })?.len();
        Ok(Some(Pulled {
            name: self.source.name(),
            path,
            sha256,
            size,
            downloaded: 0,
            verified: self.expected.is_some(),
        }))
    }

    /// Downloads `url` under the lock of `key` unless the file is there, then links it.
    fn fetch(
        &self,
        url: &str,
        auth: Option<&str>,
        key: &str,
        opts: &PullOptions,
        on: &mut dyn FnMut(&PullEvent),
    ) -> Result<Pulled, HubError> {
        if let Some(p) = self.already_there()? {
            on(&PullEvent::Cached { path: &p.path });
            return Ok(p);
        }
        let lock_path = self.store.lock_path(self.source, key);
        let _lock = lock(&lock_path, on)?;
        // Another pull may have finished while this one waited.
        if let Some(p) = self.already_there()? {
            on(&PullEvent::Cached { path: &p.path });
            return Ok(p);
        }
        let blobs = self.repo_dir.join("blobs");
        fs::create_dir_all(&blobs).map_err(|source| HubError::Io { path: blobs.clone(), source })?;
        if let Some(p) = self.take_from_shared_cache(&opts.shared_caches, on)? {
            return Ok(p);
        }
        let partial = blobs.join(format!("{key}.incomplete"));
        let download = Download { url, auth, partial: &partial, expected: self.expected, opts };
        let result = download.run(on);
        let (sha256, downloaded) = match result {
            Ok(r) => r,
            Err(e) => {
                // An empty partial file is no use to a resume: leave nothing behind, the
                // empty folders of a first pull included (a digest mismatch has already
                // deleted its partial file; a non-empty one is kept for the next pull).
                if fs::metadata(&partial).map_or(true, |m| m.len() == 0) {
                    let _ = fs::remove_file(&partial);
                    let _ = fs::remove_dir(&blobs);
                    let _ = fs::remove_dir(self.repo_dir);
                }
                return Err(e);
            }
        };
        let blob = blobs.join(sha256.to_string());
        fs::rename(&partial, &blob).map_err(|source| HubError::Io { path: blob.clone(), source })?;
        let path = link_snapshot(self.repo_dir, self.snapshot, self.source.file(), &sha256.to_string())?;
        let size = fs::metadata(&blob).map_err(|source| HubError::Io { path: blob.clone(), source })?.len();
        Ok(Pulled { name: self.source.name(), path, sha256, size, downloaded, verified: self.expected.is_some() })
    }

    /// The expected blob taken from another hub cache that holds it under the same repo
    /// folder, after checking its digest (a blob that does not match is left alone): hard
    /// linked into the store, or copied across file systems.
    fn take_from_shared_cache(
        &self,
        caches: &[PathBuf],
        on: &mut dyn FnMut(&PullEvent),
    ) -> Result<Option<Pulled>, HubError> {
        let (Some(expected), Some(folder)) = (self.expected, self.repo_dir.file_name()) else { return Ok(None) };
        let blob = self.repo_dir.join("blobs").join(expected.to_string());
        for cache in caches {
            let shared = cache.join(folder).join("blobs").join(expected.to_string());
            if shared == blob || !shared.is_file() || Sha256Digest::of_file(&shared).ok() != Some(expected) {
                continue;
            }
            let io = |source| HubError::Io { path: blob.clone(), source };
            let partial = blob.with_extension("shared.incomplete");
            let _ = fs::remove_file(&partial);
            if fs::hard_link(&shared, &partial).is_err() {
                fs::copy(&shared, &partial).map_err(io)?;
            }
            fs::rename(&partial, &blob).map_err(io)?;
            on(&PullEvent::Shared { from: &shared });
            let path = link_snapshot(self.repo_dir, self.snapshot, self.source.file(), &expected.to_string())?;
            let size = fs::metadata(&blob).map_err(io)?.len();
            return Ok(Some(Pulled {
                name: self.source.name(),
                path,
                sha256: expected,
                size,
                downloaded: 0,
                verified: true,
            }));
        }
        Ok(None)
    }
}

/// Takes the exclusive lock of `path` (created if missing), saying so when it must wait.
fn lock(path: &Path, on: &mut dyn FnMut(&PullEvent)) -> Result<File, HubError> {
    let io = |source| HubError::Io { path: path.to_path_buf(), source };
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(|source| HubError::Io { path: parent.to_path_buf(), source })?;
    }
    let file = OpenOptions::new().create(true).truncate(false).write(true).open(path).map_err(io)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            on(&PullEvent::Waiting { lock: path });
            file.lock().map_err(io)?;
        }
        Err(fs::TryLockError::Error(e)) => return Err(io(e)),
    }
    Ok(file)
}

/// One file's resumable, hashed download into its partial file.
struct Download<'a> {
    url: &'a str,
    auth: Option<&'a str>,
    partial: &'a Path,
    expected: Option<Sha256Digest>,
    opts: &'a PullOptions,
}

/// The partial file and the hash of what it holds.
struct Partial {
    file: File,
    hasher: Sha256,
    len: u64,
}

impl Download<'_> {
    fn io(&self) -> impl FnOnce(io::Error) -> HubError + '_ {
        move |source| HubError::Io { path: self.partial.to_path_buf(), source }
    }

    /// Downloads to the partial file and checks its digest: returns it and the bytes
    /// transferred.
    fn run(&self, on: &mut dyn FnMut(&PullEvent)) -> Result<(Sha256Digest, u64), HubError> {
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(self.partial)
            .map_err(self.io())?;
        let mut hasher = Sha256::new();
        let len = file.metadata().map_err(self.io())?.len();
        let mut read = 0u64;
        if len > 0 {
            on(&PullEvent::Checking { bytes: len });
            let mut buf = vec![0u8; 1 << 18];
            while read < len {
                let n = file.read(&mut buf).map_err(self.io())?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
                read += n as u64;
            }
            file.seek(SeekFrom::Start(read)).map_err(self.io())?;
        }
        let mut partial = Partial { file, hasher, len: read };
        let agent = http::agent(self.opts.stall_timeout, self.opts.connect_timeout, true);
        let mut downloaded = 0u64;
        let mut failures = 0u32;
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            match self.attempt(&agent, &mut partial, &mut downloaded, on) {
                Ok(()) => break,
                Err(Failure::Fatal(e)) => return Err(e),
                Err(Failure::Retry { reason, progressed }) => {
                    if progressed {
                        failures = 0;
                    }
                    failures += 1;
                    if failures > self.opts.retries {
                        return Err(HubError::Transfer {
                            url: self.url.to_string(),
                            reason,
                            attempts,
                            downloaded: partial.len,
                        });
                    }
                    let delay = backoff(self.opts.backoff, failures);
                    on(&PullEvent::Retrying { attempt: failures, retries: self.opts.retries, delay, reason: &reason });
                    std::thread::sleep(delay);
                }
            }
        }
        partial.file.sync_all().map_err(self.io())?;
        drop(partial.file);
        let actual = Sha256Digest::from_hasher(partial.hasher);
        if let Some(expected) = self.expected {
            if expected != actual {
                let _ = fs::remove_file(self.partial);
                return Err(HubError::DigestMismatch {
                    url: self.url.to_string(),
                    expected: expected.to_string(),
                    actual: actual.to_string(),
                });
            }
        }
        Ok((actual, downloaded))
    }

    /// Empties the partial file and its hash.
    fn restart(&self, partial: &mut Partial, reason: &str, on: &mut dyn FnMut(&PullEvent)) -> Result<(), Failure> {
        on(&PullEvent::Restarting { reason });
        let fatal = |e| Failure::Fatal(HubError::Io { path: self.partial.to_path_buf(), source: e });
        partial.file.set_len(0).map_err(fatal)?;
        partial.file.seek(SeekFrom::Start(0)).map_err(fatal)?;
        partial.hasher = Sha256::new();
        partial.len = 0;
        Ok(())
    }

    /// One request: appends what arrives to the partial file.
    fn attempt(
        &self,
        agent: &Agent,
        partial: &mut Partial,
        downloaded: &mut u64,
        on: &mut dyn FnMut(&PullEvent),
    ) -> Result<(), Failure> {
        let mut request = agent.get(self.url);
        if partial.len > 0 {
            request = request.header("Range", format!("bytes={}-", partial.len));
        }
        if let Some(token) = self.auth {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        let response = request.call().map_err(|e| http::call_failure(self.url, e, self.opts.stall_timeout))?;
        let status = response.status().as_u16();
        match status {
            200 if partial.len > 0 => {
                self.restart(partial, "the server ignored the Range request; downloading from the start", on)?
            }
            200 => {}
            206 => {
                let start = http::header(&response, "content-range")
                    .and_then(|r| r.strip_prefix("bytes "))
                    .and_then(|r| r.split('-').next())
                    .and_then(|s| s.trim().parse::<u64>().ok());
                if start != Some(partial.len) {
                    self.restart(partial, "the server sent another range than asked for", on)?;
                    return Err(Failure::Retry { reason: "the server sent the wrong range".into(), progressed: false });
                }
            }
            416 if partial.len > 0 => {
                // The partial file holds at least the whole file: complete if its digest is right.
                if self.expected.is_some_and(|d| d == Sha256Digest::from_hasher(partial.hasher.clone())) {
                    return Ok(());
                }
                self.restart(partial, "the server has fewer bytes than the partial file", on)?;
                return Err(Failure::Retry {
                    reason: "HTTP 416 for the partial file's range".into(),
                    progressed: false,
                });
            }
            _ => return Err(http::status_failure(self.url, status)),
        }
        let length = http::header(&response, "content-length").and_then(|l| l.parse::<u64>().ok());
        let total = length.map(|l| l + partial.len);
        let start = partial.len;
        on(&PullEvent::Started { url: self.url, offset: start, total });
        let mut reader = response.into_body().into_reader();
        let mut buf = vec![0u8; 1 << 18];
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(Failure::Retry {
                        reason: http::describe_io(&e, self.opts.stall_timeout),
                        progressed: partial.len > start,
                    })
                }
            };
            if let Err(e) = partial.file.write_all(&buf[..n]) {
                return Err(Failure::Fatal(if e.kind() == io::ErrorKind::StorageFull {
                    HubError::DiskFull { path: self.partial.to_path_buf(), written: partial.len }
                } else {
                    HubError::Io { path: self.partial.to_path_buf(), source: e }
                }));
            }
            partial.hasher.update(&buf[..n]);
            partial.len += n as u64;
            *downloaded += n as u64;
            on(&PullEvent::Progress { done: partial.len, total });
        }
        if let Some(t) = total {
            if partial.len < t {
                return Err(Failure::Retry {
                    reason: format!("the connection closed at byte {} of {t}", partial.len),
                    progressed: partial.len > start,
                });
            }
        }
        Ok(())
    }
}
