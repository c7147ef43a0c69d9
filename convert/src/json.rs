//! Reading a checkpoint's JSON files, with errors that name the file and the key.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::ConvertError;

/// The JSON in the file at `path`.
pub fn read(path: &Path) -> Result<Value, ConvertError> {
    let text = std::fs::read(path).map_err(|source| ConvertError::Io { path: path.to_path_buf(), source })?;
    serde_json::from_slice(&text)
        .map_err(|e| ConvertError::Json { path: path.to_path_buf(), reason: format!("not JSON: {e}") })
}

/// A JSON object read from a file, whose getters name the file and the key in errors.
pub struct JsonFile {
    /// The file.
    pub path: PathBuf,
    /// Its JSON.
    pub value: Value,
}

impl JsonFile {
    /// Reads the file at `path`.
    pub fn open(path: &Path) -> Result<JsonFile, ConvertError> {
        Ok(JsonFile { path: path.to_path_buf(), value: read(path)? })
    }

    /// An error about `key`.
    pub fn error(&self, key: &str, what: impl std::fmt::Display) -> ConvertError {
        ConvertError::Json { path: self.path.clone(), reason: format!("\"{key}\": {what}") }
    }

    /// The value of `key`, if present and not null.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.value.get(key).filter(|v| !v.is_null())
    }

    /// A required count.
    pub fn usize(&self, key: &str) -> Result<usize, ConvertError> {
        self.opt_usize(key)?.ok_or_else(|| self.error(key, "missing"))
    }

    /// An optional count.
    pub fn opt_usize(&self, key: &str) -> Result<Option<usize>, ConvertError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| self.error(key, format!("{v} is not a count"))),
        }
    }

    /// An optional number.
    pub fn opt_f64(&self, key: &str) -> Result<Option<f64>, ConvertError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_f64().map(Some).ok_or_else(|| self.error(key, format!("{v} is not a number"))),
        }
    }

    /// An optional string.
    pub fn opt_str(&self, key: &str) -> Result<Option<&str>, ConvertError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_str().map(Some).ok_or_else(|| self.error(key, format!("{v} is not a string"))),
        }
    }

    /// An optional boolean.
    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>, ConvertError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_bool().map(Some).ok_or_else(|| self.error(key, format!("{v} is not true or false"))),
        }
    }
}
