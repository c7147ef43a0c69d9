//! A bounds-checked little-endian reader over the bytes of one GGUF file.
//!
//! It knows its offset in the file, so every error it raises says where the bad bytes are.
//! Nothing here can read past the end, overflow, or allocate: the only way forward is
//! [`Cursor::take`], which checks the length against what is left first.

use std::path::Path;

use super::GgufError;

/// A reader positioned inside the bytes of a file. `pos <= bytes.len()` always holds.
pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `bytes`, which are the contents of `path`.
    pub(crate) fn new(bytes: &'a [u8], path: &'a Path) -> Cursor<'a> {
        Cursor { bytes, pos: 0, path }
    }

    /// The file (for errors built outside the cursor).
    pub(crate) fn path(&self) -> &'a Path {
        self.path
    }

    /// The current offset in the file.
    pub(crate) fn offset(&self) -> u64 {
        self.pos as u64
    }

    /// Bytes left after the current offset.
    pub(crate) fn remaining(&self) -> u64 {
        self.bytes.len().saturating_sub(self.pos) as u64
    }

    /// The next `n` bytes, or [`GgufError::Truncated`] naming `what` when fewer are left.
    pub(crate) fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8], GgufError> {
        let available = self.remaining();
        let truncated = || GgufError::Truncated {
            path: self.path.to_path_buf(),
            offset: self.offset(),
            what: what(),
            needed: n,
            available,
        };
        if n > available {
            return Err(truncated());
        }
        let end = usize::try_from(n).ok().and_then(|n| self.pos.checked_add(n)).ok_or_else(truncated)?;
        let out = self.bytes.get(self.pos..end).ok_or_else(truncated)?;
        self.pos = end;
        Ok(out)
    }

    /// The next `N` bytes as an array.
    pub(crate) fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N], GgufError> {
        let offset = self.offset();
        let s = self.take(N as u64, what)?;
        <[u8; N]>::try_from(s).map_err(|_| GgufError::Truncated {
            path: self.path.to_path_buf(),
            offset,
            what: what(),
            needed: N as u64,
            available: s.len() as u64,
        })
    }

    /// A u8.
    pub(crate) fn u8(&mut self, what: &dyn Fn() -> String) -> Result<u8, GgufError> {
        Ok(u8::from_le_bytes(self.array(what)?))
    }

    /// An i8.
    pub(crate) fn i8(&mut self, what: &dyn Fn() -> String) -> Result<i8, GgufError> {
        Ok(i8::from_le_bytes(self.array(what)?))
    }

    /// A little-endian u16.
    pub(crate) fn u16(&mut self, what: &dyn Fn() -> String) -> Result<u16, GgufError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    /// A little-endian i16.
    pub(crate) fn i16(&mut self, what: &dyn Fn() -> String) -> Result<i16, GgufError> {
        Ok(i16::from_le_bytes(self.array(what)?))
    }

    /// A little-endian u32.
    pub(crate) fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    /// A little-endian i32.
    pub(crate) fn i32(&mut self, what: &dyn Fn() -> String) -> Result<i32, GgufError> {
        Ok(i32::from_le_bytes(self.array(what)?))
    }

    /// A little-endian u64.
    pub(crate) fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A little-endian i64.
    pub(crate) fn i64(&mut self, what: &dyn Fn() -> String) -> Result<i64, GgufError> {
        Ok(i64::from_le_bytes(self.array(what)?))
    }

    /// A little-endian f32.
    pub(crate) fn f32(&mut self, what: &dyn Fn() -> String) -> Result<f32, GgufError> {
        Ok(f32::from_le_bytes(self.array(what)?))
    }

    /// A little-endian f64.
    pub(crate) fn f64(&mut self, what: &dyn Fn() -> String) -> Result<f64, GgufError> {
        Ok(f64::from_le_bytes(self.array(what)?))
    }

    /// A GGUF string: u64 length, then that many bytes of UTF-8 (no terminator).
    pub(crate) fn string(&mut self, what: &dyn Fn() -> String) -> Result<&'a str, GgufError> {
        let len = self.u64(&|| format!("the length of {}", what()))?;
        let start = self.offset();
        let bytes = self.take(len, what)?;
        std::str::from_utf8(bytes).map_err(|e| GgufError::InvalidUtf8 {
            path: self.path.to_path_buf(),
            offset: start.saturating_add(e.valid_up_to() as u64),
            what: what(),
        })
    }

    /// Checks that `count` items of at least `min_bytes_each` bytes can fit in what is left
    /// of the file, and returns the count as a `usize` that is safe to reserve.
    /// `count_offset` is where the count was stored (for the error).
    pub(crate) fn check_count(
        &self,
        count: u64,
        min_bytes_each: u64,
        count_offset: u64,
        what: &dyn Fn() -> String,
    ) -> Result<usize, GgufError> {
        let available = self.remaining();
        let fits = count.checked_mul(min_bytes_each).is_some_and(|need| need <= available);
        match usize::try_from(count) {
            Ok(n) if fits => Ok(n),
            _ => Err(GgufError::CountTooLarge {
                path: self.path.to_path_buf(),
                offset: count_offset,
                what: what(),
                count,
                min_bytes_each,
                available,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_little_endian_and_refuses_to_run_past_the_end() {
        let bytes = [1u8, 0, 0, 0, 0xff, 3, 0, 0, 0, 0, 0, 0, 0, b'a', b'b'];
        let path = Path::new("t.gguf");
        let mut c = Cursor::new(&bytes, path);
        assert_eq!(c.u32(&|| "x".into()).ok(), Some(1));
        assert_eq!(c.i8(&|| "x".into()).ok(), Some(-1));
        let err = c.string(&|| "the test string".into()).err();
        match err {
            Some(GgufError::Truncated { offset: 13, needed: 3, available: 2, what, .. }) => {
                assert_eq!(what, "the test string");
            }
            other => panic!("expected Truncated, got {other:?}"),
        }
        assert!(matches!(
            c.check_count(u64::MAX, 2, 5, &|| "n".into()),
            Err(GgufError::CountTooLarge { count: u64::MAX, .. })
        ));
        assert_eq!(c.check_count(2, 1, 5, &|| "n".into()).ok(), Some(2));
    }
}
