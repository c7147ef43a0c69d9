//! Where a model comes from: `hf://OWNER/REPO/PATH/TO/FILE.gguf[@REVISION]` on the Hugging
//! Face hub, or a plain `http(s)://` URL. Parsing refuses every part that could escape the
//! store: `..`, `.`, empty or absolute path segments, backslashes, control characters.

use crate::error::HubError;

/// A model's source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A file of a Hugging Face repository.
    Hf {
        /// The repository's owner.
        owner: String,
        /// The repository's name.
        repo: String,
        /// The file's path in the repository (`/`-separated, checked segment by segment).
        file: String,
        /// The branch, tag or commit (`main` when not given).
        revision: Option<String>,
    },
    /// A plain http(s) URL.
    Url {
        /// The URL as given.
        url: String,
        /// `host[:port]`.
        host: String,
        /// The file's name: the last segment of the URL's path.
        file: String,
    },
}

/// Whether `text` names a remote source (`hf://`, `http://`, `https://`) rather than a path
/// or a pulled name.
pub fn is_remote_source(text: &str) -> bool {
    text.starts_with("hf://") || text.starts_with("http://") || text.starts_with("https://")
}

impl Source {
    /// Parses a source.
    pub fn parse(text: &str) -> Result<Source, HubError> {
        let bad = |reason: &str| HubError::BadSource { text: text.to_string(), reason: reason.to_string() };
        if let Some(rest) = text.strip_prefix("hf://") {
            Source::parse_repo_path(rest).map_err(|reason| bad(&reason))
        } else if text.starts_with("http://") || text.starts_with("https://") {
            let after_scheme = text.split_once("://").map_or("", |(_, r)| r);
            let (host, path) = after_scheme.split_once('/').ok_or_else(|| bad("the URL has no path to a file"))?;
            if host.is_empty() || host.contains('@') || !host.chars().all(|c| c.is_ascii_graphic()) {
                return Err(bad("the URL's host is empty or not plain"));
            }
            let path = path.split(['?', '#']).next().unwrap_or("");
            let file = path.rsplit('/').next().unwrap_or("");
            check_segment(file).map_err(|r| bad(&format!("the URL's file name {file:?} {r}")))?;
            Ok(Source::Url { url: text.to_string(), host: host.to_string(), file: file.to_string() })
        } else {
            Err(bad("unknown scheme"))
        }
    }

    /// Parses `OWNER/REPO/FILE[@REVISION]` (an `hf://` source without its scheme, or the
    /// name `list` shows). The error is the reason.
    pub(crate) fn parse_repo_path(text: &str) -> Result<Source, String> {
        let (path, revision) = match text.rsplit_once('@') {
            Some((p, r)) => (p, Some(r)),
            None => (text, None),
        };
        if path.starts_with('/') {
            return Err("an absolute path".into());
        }
        let mut parts = path.splitn(3, '/');
        let owner = parts.next().unwrap_or("");
        let repo = parts.next().unwrap_or("");
        let file = parts.next().ok_or("expected OWNER/REPO/FILE")?;
        for (what, part) in [("owner", owner), ("repository", repo)] {
            check_segment(part).map_err(|r| format!("the {what} {part:?} {r}"))?;
            if part.contains("--") {
                return Err(format!("the {what} {part:?} contains \"--\""));
            }
        }
        for segment in file.split('/') {
            check_segment(segment).map_err(|r| format!("the file path {file:?} has a segment {segment:?} that {r}"))?;
        }
        if let Some(rev) = revision {
            check_revision(rev).map_err(|r| format!("the revision {rev:?} {r}"))?;
        }
        Ok(Source::Hf {
            owner: owner.to_string(),
            repo: repo.to_string(),
            file: file.to_string(),
            revision: revision.map(str::to_string),
        })
    }

    /// The file's name in the store (the path inside the repository for `hf://`).
    pub fn file(&self) -> &str {
        match self {
            Source::Hf { file, .. } | Source::Url { file, .. } => file,
        }
    }

    /// The name this source is listed under: `OWNER/REPO/FILE[@REV]`, or the URL.
    pub fn name(&self) -> String {
        match self {
            Source::Hf { owner, repo, file, revision: Some(rev) } => format!("{owner}/{repo}/{file}@{rev}"),
            Source::Hf { owner, repo, file, revision: None } => format!("{owner}/{repo}/{file}"),
            Source::Url { url, .. } => url.clone(),
        }
    }
}

/// Checks one path segment: not empty, not `.` or `..`, no separators or control
/// characters, not starting with `.` (hidden files and `..x` tricks) or `-`.
fn check_segment(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("is empty".into());
    }
    if s == "." || s == ".." {
        return Err("is a relative path component".into());
    }
    if s.starts_with('.') {
        return Err("starts with a dot".into());
    }
    if s.chars().any(|c| c == '\\' || c == '/' || c == ':' || c.is_control()) {
        return Err("holds a separator or a control character".into());
    }
    Ok(())
}

/// Checks a revision: a branch, tag or commit of letters, digits, `.`, `_`, `-` and `/`,
/// without `..` or empty segments.
fn check_revision(rev: &str) -> Result<(), String> {
    if rev.is_empty() {
        return Err("is empty".into());
    }
    if !rev.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/')) {
        return Err("has characters other than letters, digits, '.', '_', '-' and '/'".into());
    }
    if rev.split('/').any(|s| s.is_empty() || s == "." || s == "..") {
        return Err("has an empty, '.' or '..' segment".into());
    }
    Ok(())
}

/// Percent-encodes a path segment (everything but RFC 3986's unreserved characters).
pub(crate) fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hf_sources() {
        let s = Source::parse("hf://owner/repo/sub/model.Q4_0.gguf@v1.0").expect("parses");
        assert_eq!(
            s,
            Source::Hf {
                owner: "owner".into(),
                repo: "repo".into(),
                file: "sub/model.Q4_0.gguf".into(),
                revision: Some("v1.0".into())
            }
        );
        assert_eq!(s.name(), "owner/repo/sub/model.Q4_0.gguf@v1.0");
        let s = Source::parse("https://example.com:8080/a/b/model.gguf?download=1").expect("parses");
        assert_eq!(s.file(), "model.gguf");
    }

    #[test]
    fn refuses_escaping_or_malformed_sources() {
        for bad in [
            "hf://owner/repo/../x.gguf",
            "hf://owner/../x.gguf",
            "hf://../repo/x.gguf",
            "hf:///etc/passwd",
            "hf://owner/repo//x.gguf",
            "hf://owner/repo/x.gguf@../main",
            "hf://owner/repo/x.gguf@",
            "hf://owner/repo",
            "hf://owner/repo/.hidden",
            "hf://ow--ner/repo/x.gguf",
            "hf://owner/repo/a\\b.gguf",
            "https://example.com/",
            "https://example.com/a/..",
            "https://example.com",
            "ftp://example.com/x.gguf",
            "/abs/path.gguf",
        ] {
            assert!(matches!(Source::parse(bad), Err(HubError::BadSource { .. })), "{bad} must be refused");
        }
    }

    #[test]
    fn encodes_path_segments() {
        assert_eq!(encode_segment("a b%/c.gguf"), "a%20b%25%2Fc.gguf");
    }
}
