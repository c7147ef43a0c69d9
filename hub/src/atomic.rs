//! Writing a file so that a reader sees its old contents or its new ones, never a part: the
//! bytes go to a new temporary file beside it, which is synced and renamed onto it. The
//! model store writes its references this way, and `quantize` and `synth` their models.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A step of [`write_atomically`] that failed, and the file it was about.
#[derive(Debug, thiserror::Error)]
#[error("{}: cannot {action}: {source}", path.display())]
pub struct AtomicWriteError {
    /// The file being written.
    pub path: PathBuf,
    /// What was being done (names the temporary file where it applies).
    pub action: String,
    /// The operating system's error.
    #[source]
    pub source: io::Error,
}

/// Creates a new temporary file beside `path` (the same directory, so the rename stays on one
/// file system), lets `write` fill it, syncs it and renames it onto `path`, then makes the
/// rename durable (best effort: not every platform opens directories). The temporary file is
/// removed on any error, and on a panic inside `write`.
pub fn write_atomically<T, E: From<AtomicWriteError>>(
    path: &Path,
    write: impl FnOnce(&mut File) -> Result<T, E>,
) -> Result<T, E> {
    let tmp = temp_name(path);
    let tmp_text = tmp.display().to_string();
    let fail = |action: String| move |source| AtomicWriteError { path: path.to_path_buf(), action, source };
    // `create_new`: never truncate or follow a file that is already there.
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(fail(format!("create the temporary file {tmp_text}")))?;
    let mut guard = RemoveOnDrop { path: tmp.clone(), keep: false };
    let value = write(&mut file)?;
    file.sync_all().map_err(fail(format!("sync the temporary file {tmp_text}")))?;
    drop(file);
    fs::rename(&tmp, path).map_err(fail(format!("rename the temporary file {tmp_text} onto it")))?;
    guard.keep = true;
    if let Some(dir) = path.parent().map(|d| if d.as_os_str().is_empty() { Path::new(".") } else { d }) {
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(value)
}

/// A name for a temporary file next to `target`, unique in this process and machine.
pub(crate) fn temp_name(target: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    target.with_file_name(format!(".{name}.tmp-{}-{n}", std::process::id()))
}

/// Removes the temporary file unless it was renamed.
struct RemoveOnDrop {
    path: PathBuf,
    keep: bool,
}

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if !self.keep {
            // Best effort: the error being reported already says what went wrong.
            let _ = fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temporary_one() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("model.gguf");
        fs::write(&path, b"old").expect("write");
        let r: Result<(), AtomicWriteError> = write_atomically(&path, |f| {
            f.write_all(b"half").map_err(|source| AtomicWriteError {
                path: path.clone(),
                action: "write".into(),
                source,
            })?;
            Err(AtomicWriteError { path: path.clone(), action: "write".into(), source: io::Error::other("disk full") })
        });
        assert!(r.is_err());
        assert_eq!(fs::read(&path).expect("read"), b"old");
        assert_eq!(fs::read_dir(dir.path()).expect("list").count(), 1, "only the old file is left");
        write_atomically(&path, |f| {
            f.write_all(b"new").map_err(|source| AtomicWriteError {
                path: path.clone(),
                action: "write".into(),
                source,
            })
        })
        .expect("written");
        assert_eq!(fs::read(&path).expect("read"), b"new");
        assert_eq!(fs::read_dir(dir.path()).expect("list").count(), 1);
    }
}
