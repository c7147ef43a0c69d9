//! The store: a folder (`$PUREBEE_CACHE`, default `~/.cache/purebee`) laid out as the
//! Hugging Face hub cache, so that a file another tool already pulled there is found:
//!
//! ```text
//! models--OWNER--REPO/blobs/<sha256>                 the file's bytes, named by their digest
//! models--OWNER--REPO/blobs/<sha256>.incomplete      a download in progress (resumable)
//! models--OWNER--REPO/snapshots/<commit>/PATH/FILE   a relative symbolic link to the blob
//! models--OWNER--REPO/refs/<revision>                the commit a branch or tag pointed at
//! urls--HOST/blobs/<sha256>                          a plain URL's file
//! urls--HOST/snapshots/<url-id>/FILE                 its link (url-id: 16 hex digits of the URL's sha256)
//! urls--HOST/sources/<url-id>                        the URL itself
//! .locks/<folder>/<key>.lock                         held while a pull writes (one pull per file at once)
//! ```
//!
//! A model's name is `OWNER/REPO/FILE` (its `main` revision), `OWNER/REPO/FILE@REVISION`,
//! or the URL it was pulled from.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::atomic::{temp_name, write_atomically};
use crate::digest::Sha256Digest;
use crate::error::HubError;
use crate::source::{is_remote_source, Source};

/// A pulled file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedModel {
    /// Its name: `OWNER/REPO/FILE[@REVISION]` or its URL.
    pub name: String,
    /// The snapshot path (a link to the blob): what `run` opens.
    pub path: PathBuf,
    /// The blob the path links to.
    pub blob: PathBuf,
    /// The blob's name when it is a sha256 digest.
    pub sha256: Option<Sha256Digest>,
    /// Bytes.
    pub size: u64,
    /// The commit (or url-id) of its snapshot.
    pub snapshot: String,
    repo_dir: PathBuf,
}

/// What `Store::remove` removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Removed {
    /// The model's name.
    pub name: String,
    /// Bytes freed (0 when the blob is still used by another snapshot).
    pub freed: u64,
}

/// The store's folder.
#[derive(Clone, Debug)]
pub struct Store {
    root: PathBuf,
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> HubError + '_ {
    move |source| HubError::Io { path: path.to_path_buf(), source }
}

impl Store {
    /// A store in `root`.
    pub fn new(root: impl Into<PathBuf>) -> Store {
        Store { root: root.into() }
    }

    /// The store in `$PUREBEE_CACHE`, else `$HOME/.cache/purebee`.
    pub fn from_env() -> Result<Store, HubError> {
        if let Some(dir) = std::env::var_os("PUREBEE_CACHE").filter(|d| !d.is_empty()) {
            return Ok(Store::new(dir));
        }
        let home = std::env::var_os("HOME").or_else(|| std::env::var_os("USERPROFILE")).filter(|d| !d.is_empty());
        home.map(|h| Store::new(Path::new(&h).join(".cache").join("purebee"))).ok_or(HubError::NoCacheDir)
    }

    /// The store's folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The folder of a source's repository (or URL host).
    pub(crate) fn repo_dir(&self, source: &Source) -> PathBuf {
        self.root.join(repo_folder(source))
    }

    /// The lock file of `key` (a digest or url-id) in a source's folder.
    pub(crate) fn lock_path(&self, source: &Source, key: &str) -> PathBuf {
        self.root.join(".locks").join(repo_folder(source)).join(format!("{key}.lock"))
    }

    /// The pulled file of a source, looked up without the network: `refs/<revision>`
    /// (default `main`) or the snapshot of that commit for `hf://`, the URL's snapshot for a
    /// URL. `None` when it is not (completely) there.
    pub fn find(&self, source: &Source) -> Option<CachedModel> {
        let dir = self.repo_dir(source);
        let snapshot = match source {
            Source::Hf { revision, .. } => {
                let rev = revision.as_deref().unwrap_or("main");
                match fs::read_to_string(dir.join("refs").join(rev)) {
                    Ok(commit) => commit.trim().to_string(),
                    Err(_) => rev.to_string(),
                }
            }
            Source::Url { url, .. } => url_id(url),
        };
        if snapshot.is_empty() || snapshot.contains(['/', '\\']) || snapshot.starts_with('.') {
            return None;
        }
        self.cached(&dir, &snapshot, source.file(), source.name())
    }

    /// The pulled file named `name`: `OWNER/REPO/FILE[@REVISION]`, an `hf://` source or a URL.
    pub fn find_name(&self, name: &str) -> Result<CachedModel, HubError> {
        let source = if is_remote_source(name) {
            Source::parse(name)?
        } else {
            Source::parse_repo_path(name).map_err(|reason| HubError::BadSource { text: name.to_string(), reason })?
        };
        self.find(&source).ok_or_else(|| HubError::NotInStore { name: name.to_string(), store: self.root.clone() })
    }

    fn cached(&self, dir: &Path, snapshot: &str, file: &str, name: String) -> Option<CachedModel> {
        let path = dir.join("snapshots").join(snapshot).join(file);
        let meta = fs::metadata(&path).ok()?;
        if !meta.is_file() {
            return None;
        }
        let blob = fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        let sha256 = blob.file_name().and_then(|n| n.to_str()).and_then(|n| Sha256Digest::parse(n).ok());
        Some(CachedModel {
            name,
            path,
            blob,
            sha256,
            size: meta.len(),
            snapshot: snapshot.to_string(),
            repo_dir: dir.to_path_buf(),
        })
    }

    /// Every pulled file, sorted by name. Links whose blob is missing are left out.
    pub fn list(&self) -> Result<Vec<CachedModel>, HubError> {
        let mut out = Vec::new();
        let entries = match fs::read_dir(&self.root) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(HubError::Io { path: self.root.clone(), source: e }),
        };
        for entry in entries.flatten() {
            let folder = entry.file_name().to_string_lossy().into_owned();
            let dir = entry.path();
            if let Some(rest) = folder.strip_prefix("models--") {
                let Some((owner, repo)) = rest.split_once("--") else { continue };
                let refs = refs_by_commit(&dir.join("refs"));
                for snapshot in subfolders(&dir.join("snapshots")) {
                    for file in files_under(&dir.join("snapshots").join(&snapshot)) {
                        let names = refs.get(&snapshot);
                        let name = match names {
                            Some(r) if r.iter().any(|r| r == "main") => format!("{owner}/{repo}/{file}"),
                            Some(r) if !r.is_empty() => format!("{owner}/{repo}/{file}@{}", r[0]),
                            _ => format!("{owner}/{repo}/{file}@{snapshot}"),
                        };
                        out.extend(self.cached(&dir, &snapshot, &file, name));
                    }
                }
            } else if folder.starts_with("urls--") {
                for id in subfolders(&dir.join("snapshots")) {
                    let Ok(url) = fs::read_to_string(dir.join("sources").join(&id)) else { continue };
                    for file in files_under(&dir.join("snapshots").join(&id)) {
                        out.extend(self.cached(&dir, &id, &file, url.trim().to_string()));
                    }
                }
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Removes the pulled file `name`: its snapshot link, the snapshot's refs when it is
    /// left empty, its blob when no other snapshot links to it, and the repository's folder
    /// when nothing is left in it.
    pub fn remove(&self, name: &str) -> Result<Removed, HubError> {
        let m = self.find_name(name)?;
        fs::remove_file(&m.path).map_err(io_err(&m.path))?;
        let snapshots = m.repo_dir.join("snapshots");
        let snapshot_dir = snapshots.join(&m.snapshot);
        // Empty folders between the link and its snapshot go, the snapshot too.
        let mut dir = m.path.parent().map(Path::to_path_buf);
        while let Some(d) = dir {
            if !d.starts_with(&snapshot_dir) || fs::remove_dir(&d).is_err() {
                break;
            }
            dir = d.parent().map(Path::to_path_buf);
        }
        if !snapshot_dir.exists() {
            for (commit, names) in refs_by_commit(&m.repo_dir.join("refs")) {
                if commit == m.snapshot {
                    for r in names {
                        let _ = fs::remove_file(m.repo_dir.join("refs").join(r));
                    }
                }
            }
            let _ = fs::remove_file(m.repo_dir.join("sources").join(&m.snapshot));
        }
        let still_used = subfolders(&snapshots).into_iter().any(|s| {
            files_under(&snapshots.join(&s))
                .into_iter()
                .any(|f| fs::canonicalize(snapshots.join(&s).join(f)).is_ok_and(|b| b == m.blob))
        });
        let mut freed = 0;
        if !still_used && m.blob.starts_with(m.repo_dir.join("blobs")) {
            fs::remove_file(&m.blob).map_err(io_err(&m.blob))?;
            freed = m.size;
        }
        if subfolders(&snapshots).is_empty() {
            fs::remove_dir_all(&m.repo_dir).map_err(io_err(&m.repo_dir))?;
        }
        Ok(Removed { name: m.name, freed })
    }
}

/// The folder of a source in the store.
fn repo_folder(source: &Source) -> String {
    match source {
        Source::Hf { owner, repo, .. } => format!("models--{owner}--{repo}"),
        Source::Url { host, .. } => {
            let host: String =
                host.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' }).collect();
            format!("urls--{host}")
        }
    }
}

/// The snapshot id of a URL: 16 hex digits of its sha256.
pub(crate) fn url_id(url: &str) -> String {
    Sha256Digest::of(url.as_bytes()).to_string()[..16].to_string()
}

/// The names of the folders in `dir` (none when it is missing).
fn subfolders(dir: &Path) -> Vec<String> {
    let Ok(entries) = fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<String> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect();
    out.sort();
    out
}

/// The files (and links) under `dir`, as `/`-separated relative paths; hidden names skipped.
fn files_under(dir: &Path) -> Vec<String> {
    fn walk(dir: &Path, prefix: &str, out: &mut Vec<String>) {
        let Ok(entries) = fs::read_dir(dir) else { return };
        for e in entries.flatten() {
            let Some(name) = e.file_name().to_str().map(str::to_string) else { continue };
            if name.starts_with('.') {
                continue;
            }
            let rel = if prefix.is_empty() { name.clone() } else { format!("{prefix}/{name}") };
            match e.file_type() {
                Ok(t) if t.is_dir() => walk(&e.path(), &rel, out),
                Ok(_) => out.push(rel),
                Err(_) => {}
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, "", &mut out);
    out.sort();
    out
}

/// commit → the refs (branch or tag names, `/`-separated) that point at it.
fn refs_by_commit(dir: &Path) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in files_under(dir) {
        if let Ok(commit) = fs::read_to_string(dir.join(&r)) {
            out.entry(commit.trim().to_string()).or_default().push(r);
        }
    }
    out
}

/// Writes `text` to `path` (creating its folder) through a temporary file renamed onto it.
pub(crate) fn write_text(path: &Path, text: &str) -> Result<(), HubError> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(io_err(parent))?;
    }
    write_atomically(path, |f| f.write_all(text.as_bytes()).map_err(io_err(path)))
}

/// Links `snapshots/<snapshot>/<file>` to `blobs/<blob>` in `repo_dir` (a relative symbolic
/// link, as the hub cache has it; a copy where links are not available), replacing any
/// older link atomically. Returns the link's path.
pub(crate) fn link_snapshot(repo_dir: &Path, snapshot: &str, file: &str, blob: &str) -> Result<PathBuf, HubError> {
    let path = repo_dir.join("snapshots").join(snapshot).join(file);
    let parent = path.parent().unwrap_or(repo_dir);
    fs::create_dir_all(parent).map_err(io_err(parent))?;
    let tmp = temp_name(&path);
    let up = "../".repeat(2 + file.matches('/').count());
    let target = format!("{up}blobs/{blob}");
    #[cfg(unix)]
    let made = std::os::unix::fs::symlink(&target, &tmp);
    #[cfg(not(unix))]
    let made = fs::copy(repo_dir.join("blobs").join(blob), &tmp).map(|_| ());
    let result = made.and_then(|_| fs::rename(&tmp, &path));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map_err(io_err(&path))?;
    Ok(path)
}
