//! The host's copies of small U32 tensors, for the run-time checks kernels cannot make.
//!
//! A paged KV_WRITE or ATTENTION must fail with the ISA's `ExecError::IndexOutOfRange`
//! before anything is written when a row's sequence, position or page is out of range
//! (`PagedRows::check`). A kernel cannot return an error, so the engine checks on the host,
//! from what it knows of the three index tensors: what the host wrote (`Engine::write`), a
//! program's constants (GRID_WRITE), zeros (GRID_ALLOC), or the registry's data for a tensor
//! the engine never changed. A tensor a kernel wrote (an ARGMAX's ids, say) is not known on
//! the host, and neither is one larger than [`MAX_WORDS`]: a check that needs one fails with
//! [`crate::GpuError::IndicesUnknown`] rather than guess.

use std::borrow::Cow;
use std::collections::HashMap;

use purebee_memory::{DType, Registry, TensorId};

/// The largest U32 tensor the host keeps a copy of, in words (4 MiB).
pub(crate) const MAX_WORDS: usize = 1 << 20;

/// What the host knows of the U32 tensors that the engine wrote.
#[derive(Default)]
pub(crate) struct HostCopies {
    /// Per tensor the engine changed: its words, or `None` when they are not known. A tensor
    /// without an entry holds what the registry holds for it, if anything.
    known: HashMap<TensorId, Option<Vec<u32>>>,
}

/// `bytes` as little-endian u32 words.
pub(crate) fn words(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

impl HostCopies {
    /// Records a tensor's new contents: `Some(words)` (kept while at most [`MAX_WORDS`]),
    /// or `None` when they are not known.
    pub fn set(&mut self, id: TensorId, words: Option<Vec<u32>>) {
        self.known.insert(id, words.filter(|w| w.len() <= MAX_WORDS));
    }

    /// `Engine::write` of `bytes` (already checked against the tensor's size) to `id`: a copy
    /// for a U32 tensor.
    pub fn written(&mut self, reg: &Registry, id: TensorId, bytes: &[u8]) {
        if reg.desc(id).is_ok_and(|d| d.dtype == DType::U32) {
            let copy = (bytes.len() / 4 <= MAX_WORDS).then(|| words(bytes));
            self.set(id, copy);
        }
    }

    /// The tensor's words as the host knows them; `None` when it does not.
    pub fn contents<'a>(&'a self, reg: &'a Registry, id: TensorId) -> Option<Cow<'a, [u32]>> {
        match self.known.get(&id) {
            Some(Some(w)) => Some(Cow::Borrowed(w.as_slice())),
            Some(None) => None,
            None if reg.is_live(id) => reg.get(id).ok().map(|t| Cow::Owned(words(t.bytes()))),
            None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use purebee_memory::{HostTensor, Registry, Shape};

    use super::HostCopies;

    #[test]
    fn writes_override_the_registry_and_unknown_stays_unknown() {
        let mut reg = Registry::new();
        let t = HostTensor::from_u32("ids", Shape::vector(3), vec![1, 2, 3]).expect("sizes agree");
        let id = reg.insert("ids", t).expect("unique");
        let mut copies = HostCopies::default();
        assert_eq!(copies.contents(&reg, id).as_deref(), Some(&[1, 2, 3][..]));
        copies.written(&reg, id, &[7, 0, 0, 0, 8, 0, 0, 0, 9, 0, 0, 0]);
        assert_eq!(copies.contents(&reg, id).as_deref(), Some(&[7, 8, 9][..]));
        copies.set(id, None);
        assert_eq!(copies.contents(&reg, id), None);
        copies.set(id, Some(vec![0; super::MAX_WORDS + 1]));
        assert_eq!(copies.contents(&reg, id), None);
    }
}
