//! The sha256 digest of a file: parsed from, and printed as, 64 lowercase hex digits.

use std::fmt;
use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::error::HubError;

/// A sha256 digest.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sha256Digest([u8; 32]);

impl Sha256Digest {
    /// Parses 64 hex digits (either case); anything else is [`HubError::BadDigest`].
    pub fn parse(text: &str) -> Result<Sha256Digest, HubError> {
        let bad = || HubError::BadDigest { digest: text.to_string() };
        let bytes = text.as_bytes();
        if bytes.len() != 64 {
            return Err(bad());
        }
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            let hi = hex_value(pair[0]).ok_or_else(bad)?;
            let lo = hex_value(pair[1]).ok_or_else(bad)?;
            out[i] = hi << 4 | lo;
        }
        Ok(Sha256Digest(out))
    }

    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Sha256Digest {
        Sha256Digest::from_hasher(Sha256::new_with_prefix(bytes))
    }

    /// The digest of a file's content.
    pub fn of_file(path: &Path) -> Result<Sha256Digest, HubError> {
        let io = |source| HubError::Io { path: path.to_path_buf(), source };
        let mut file = std::fs::File::open(path).map_err(io)?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = file.read(&mut buf).map_err(io)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
        }
        Ok(Sha256Digest::from_hasher(hasher))
    }

    pub(crate) fn from_hasher(hasher: Sha256) -> Sha256Digest {
        let mut out = [0u8; 32];
        out.copy_from_slice(hasher.finalize().as_slice());
        Sha256Digest(out)
    }

    /// The 32 bytes.
    pub fn bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

impl fmt::Display for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sha256Digest({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_hex() {
        let d = Sha256Digest::of(b"abc");
        assert_eq!(d.to_string(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(Sha256Digest::parse(&d.to_string().to_uppercase()).ok(), Some(d));
        for bad in ["", "ab", &"g".repeat(64), &"a".repeat(63), &"a".repeat(65), &format!("{}é", "a".repeat(62))] {
            assert!(matches!(Sha256Digest::parse(bad), Err(HubError::BadDigest { .. })), "{bad:?}");
        }
    }
}
