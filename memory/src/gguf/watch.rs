//! [`FileWatch`]: whether a mapped GGUF file is still the file that was mapped.
//!
//! A memory map is only as stable as its file. If another process truncates the file while
//! it is mapped, touching a page past the new end raises SIGBUS, which kills the process
//! with no message (measured: a tiny model opened, one forward pass run, the file truncated
//! to half or to 0 bytes, the next forward pass dies with SIGBUS, exit status 135, on the
//! reference and on the CPU engine); if it rewrites the file in place, the map shows the new
//! bytes. Replacing the file by a rename is harmless: the map keeps the old inode.
//!
//! No safe code can catch that signal, but the common case, a file truncated or rewritten
//! between two uses (a model re-downloaded over itself while a chat waits for its next
//! turn), can be seen before the map is touched again: [`FileWatch::check`] compares the
//! open file's length and modification time (`fstat` of the descriptor kept since the map
//! was made, so a rename does not count) with those at open, and says which changed. The
//! runtime checks before every forward pass. A truncation during a pass still raises SIGBUS,
//! which `map_guard.rs` turns into an exit with a message naming the file.

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use super::GgufError;

/// The open file behind a map, with its length and modification time when it was mapped.
/// Cheap to clone; a file image from memory ([`super::GgufFile::from_bytes`]) has nothing to
/// watch and always passes.
#[derive(Clone, Debug, Default)]
pub struct FileWatch {
    watched: Option<Arc<Watched>>,
}

#[derive(Debug)]
struct Watched {
    path: PathBuf,
    file: File,
    len: u64,
    modified: Option<SystemTime>,
}

impl FileWatch {
    /// Watches `file`, mapped from `path` with `len` bytes; `modified` is its modification
    /// time read before it was mapped.
    pub(crate) fn new(path: PathBuf, file: File, len: u64, modified: Option<SystemTime>) -> FileWatch {
        FileWatch { watched: Some(Arc::new(Watched { path, file, len, modified })) }
    }

    /// Nothing to watch (a file image held in memory).
    pub(crate) fn none() -> FileWatch {
        FileWatch::default()
    }

    /// `Ok` if the file still has the length and modification time it had when it was
    /// mapped; [`GgufError::ChangedSinceOpen`] naming the file and what changed otherwise
    /// (or [`GgufError::Io`] if the file cannot be examined). One `fstat`, about a
    /// microsecond.
    pub fn check(&self) -> Result<(), GgufError> {
        let Some(w) = &self.watched else { return Ok(()) };
        let meta = w.file.metadata().map_err(|source| GgufError::Io { path: w.path.clone(), source })?;
        let changed = |what: String| Err(GgufError::ChangedSinceOpen { path: w.path.clone(), what });
        if meta.len() < w.len {
            return changed(format!("it was truncated from {} to {} bytes", w.len, meta.len()));
        }
        if w.modified.is_some() && meta.modified().ok() != w.modified {
            return changed("it was modified (its modification time changed)".to_string());
        }
        if meta.len() != w.len {
            return changed(format!("it grew from {} to {} bytes", w.len, meta.len()));
        }
        Ok(())
    }
}
