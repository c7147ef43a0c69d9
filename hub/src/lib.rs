//! purebee-hub: models by name. It pulls GGUF files from `hf://OWNER/REPO/FILE[@REV]`
//! sources (resolved against the Hugging Face endpoint, `HF_ENDPOINT`) or plain http(s)
//! URLs into a local store laid out as the Hugging Face hub cache, and finds, lists and
//! removes what it pulled.
//!
//! A pull streams into a partial file while hashing it (sha256), resumes an interrupted
//! download with an HTTP `Range` request, retries with backoff, gives up on a stalled
//! connection, checks the digest (`--sha256` or the hub's `X-Linked-Etag`) and only then
//! moves the file into place. Concurrent pulls of one file are serialised by a file lock.
//!
//! It must not know GGUF, engines, models or terminals: it moves and checks bytes, and
//! reports its progress as [`PullEvent`]s for a front end (the cli, a server) to show.

#![forbid(unsafe_code)]

mod atomic;
mod digest;
mod error;
mod http;
mod pull;
mod source;
mod store;

pub use atomic::{write_atomically, AtomicWriteError};
pub use digest::Sha256Digest;
pub use error::HubError;
pub use pull::{pull, PullEvent, PullOptions, Pulled};
pub use source::{is_remote_source, Source};
pub use store::{CachedModel, Removed, Store};
