//! Where the REPL keeps its history: `$PUREBEE_CACHE/chat_history` when `PUREBEE_CACHE` is
//! set (everything of purebee-rs in one folder), else `$XDG_DATA_HOME/purebee/chat_history`,
//! else `~/.local/share/purebee/chat_history`.

use std::path::PathBuf;

/// The file name of the history.
const FILE: &str = "chat_history";

/// The history file from the environment; `None` when neither variable nor `HOME` is set.
pub fn path() -> Option<PathBuf> {
    path_from(|k| std::env::var_os(k))
}

/// [`path`] with the environment given as a lookup.
fn path_from(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<PathBuf> {
    let var = |k: &str| var(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = var("PUREBEE_CACHE") {
        return Some(dir.join(FILE));
    }
    let data = var("XDG_DATA_HOME").or_else(|| var("HOME").map(|h| h.join(".local/share")))?;
    Some(data.join("purebee").join(FILE))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> Option<PathBuf> {
        path_from(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.into()))
    }

    #[test]
    fn the_cache_variable_wins_then_xdg_then_home() {
        let all = [("PUREBEE_CACHE", "/c"), ("XDG_DATA_HOME", "/x"), ("HOME", "/h")];
        assert_eq!(with(&all), Some(PathBuf::from("/c/chat_history")));
        assert_eq!(with(&all[1..]), Some(PathBuf::from("/x/purebee/chat_history")));
        assert_eq!(with(&all[2..]), Some(PathBuf::from("/h/.local/share/purebee/chat_history")));
        assert_eq!(
            with(&[("PUREBEE_CACHE", ""), ("HOME", "/h")]),
            Some(PathBuf::from("/h/.local/share/purebee/chat_history"))
        );
        assert_eq!(with(&[]), None);
    }
}
