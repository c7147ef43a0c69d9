//! What can go wrong pulling, finding or removing a model; each error names the source,
//! URL, file or digest at fault.

use std::io;
use std::path::PathBuf;

/// An error of the hub.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// A source that is neither `hf://OWNER/REPO/FILE[@REV]` nor an http(s) URL, or one
    /// with a part that could escape the store.
    #[error(
        "{text:?}: not a model source: {reason} (expected hf://OWNER/REPO/FILE.gguf[@REVISION] or an http(s):// URL)"
    )]
    BadSource {
        /// The source as given.
        text: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A digest that is not 64 hex digits.
    #[error("{digest:?}: not a sha256 digest (expected 64 hex digits)")]
    BadDigest {
        /// The text given.
        digest: String,
    },
    /// The server has no such file.
    #[error("{url}: not found (HTTP 404)")]
    NotFound {
        /// The URL.
        url: String,
    },
    /// The server wants credentials.
    #[error(
        "{url}: access denied (HTTP {status}); a gated or private Hugging Face repository needs a token in HF_TOKEN"
    )]
    Unauthorized {
        /// The URL.
        url: String,
        /// 401 or 403.
        status: u16,
    },
    /// Another HTTP status that retrying cannot fix.
    #[error("{url}: the server answered HTTP {status}")]
    Status {
        /// The URL.
        url: String,
        /// The status.
        status: u16,
    },
    /// The hub's answer lacks what a pull needs.
    #[error("{url}: unexpected answer: {reason}")]
    BadResponse {
        /// The URL.
        url: String,
        /// What is missing or wrong.
        reason: String,
    },
    /// The transfer kept failing (connection lost, stalled, server errors) after every retry.
    #[error(
        "{url}: {reason}; gave up after {attempts} attempts with {downloaded} bytes downloaded (pull again to resume)"
    )]
    Transfer {
        /// The URL.
        url: String,
        /// The last failure.
        reason: String,
        /// Attempts made.
        attempts: u32,
        /// Bytes kept in the partial file.
        downloaded: u64,
    },
    /// The downloaded bytes do not have the expected sha256; nothing was kept.
    #[error("{url}: sha256 mismatch: expected {expected}, got {actual}; the download was deleted")]
    DigestMismatch {
        /// The URL.
        url: String,
        /// The digest asked for (`--sha256` or the hub's).
        expected: String,
        /// The digest of what arrived.
        actual: String,
    },
    /// `--sha256` and the hub's digest of the file disagree; nothing was downloaded.
    #[error("{url}: the hub's sha256 of the file is {hub}, but {given} was asked for; nothing was downloaded")]
    DigestConflict {
        /// The URL.
        url: String,
        /// The hub's digest (`X-Linked-Etag`).
        hub: String,
        /// The digest given.
        given: String,
    },
    /// The disk filled up while writing; the partial file is kept for a later resume.
    #[error("{path}: the disk is full after {written} bytes; free some space and pull again to resume")]
    DiskFull {
        /// The partial file.
        path: PathBuf,
        /// Bytes in it.
        written: u64,
    },
    /// A file system operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The system's error.
        source: io::Error,
    },
    /// Writing a file through a temporary one failed.
    #[error(transparent)]
    Write(#[from] crate::atomic::AtomicWriteError),
    /// No pulled model has this name.
    #[error("{name}: no such pulled model in {store} (`purebee-rs list` shows them; `purebee-rs pull hf://OWNER/REPO/FILE.gguf` pulls one)")]
    NotInStore {
        /// The name.
        name: String,
        /// The store's folder.
        store: PathBuf,
    },
    /// No folder for the store: neither `PUREBEE_CACHE` nor `HOME` is set.
    #[error("no cache folder: set PUREBEE_CACHE (or HOME)")]
    NoCacheDir,
}
