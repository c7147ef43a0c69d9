//! Where the CPU engine's tensors live: weights stay in the registry (views of the mapped
//! file, never copied); everything an instruction or the host writes lives in an owned
//! buffer of 4-byte words here, indexed like the registry by [`TensorId`].
//!
//! Lifetimes mirror the ISA (GRID_ALLOC, FREE) and the reference engine's errors: a tensor
//! this store never touched is live exactly when the registry holds data for it. Writing a
//! registry tensor (a KV cache given as input, say) copies it here first, so a mapped file
//! is never modified.

use purebee_isa::ExecError;
use purebee_memory::{MemoryError, Registry, TensorId};

/// A tensor's lifetime as the engine sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Liveness {
    Live,
    Freed,
}

#[derive(Default)]
struct Slot {
    /// `None`: as the registry says.
    state: Option<Liveness>,
    /// The tensor's bytes (padded to whole words) when the engine owns them.
    words: Option<Vec<u32>>,
    /// Changes whenever the tensor's contents may have changed (see [`Store::version`]).
    version: u64,
}

/// The engine's tensors.
#[derive(Default)]
pub(crate) struct Store {
    slots: Vec<Slot>,
    next_version: u64,
}

/// Wraps a registry error with the instruction's name.
pub(crate) fn mem(op: &'static str) -> impl Fn(MemoryError) -> ExecError {
    move |source| ExecError::Memory { op, source }
}

impl Store {
    fn slot(&self, id: TensorId) -> Option<&Slot> {
        self.slots.get(id.index())
    }

    fn slot_mut(&mut self, id: TensorId) -> &mut Slot {
        if self.slots.len() <= id.index() {
            self.slots.resize_with(id.index() + 1, Slot::default);
        }
        &mut self.slots[id.index()]
    }

    fn bump(&mut self, id: TensorId) {
        self.next_version += 1;
        let v = self.next_version;
        self.slot_mut(id).version = v;
    }

    /// A number that changes whenever `id`'s contents may have changed: equal versions mean
    /// equal contents (for caches of derived data, such as BITLINEAR's int8 activations).
    /// `None` for a tensor whose bytes are the registry's (the host may replace those).
    pub fn version(&self, id: TensorId) -> Option<u64> {
        self.slot(id).filter(|s| s.words.is_some()).map(|s| s.version)
    }

    /// Fails, as the reference engine would, unless `id` is live.
    pub fn check_live(&self, reg: &Registry, op: &'static str, id: TensorId) -> Result<(), ExecError> {
        match self.slot(id).and_then(|s| s.state) {
            Some(Liveness::Live) => Ok(()),
            Some(Liveness::Freed) => {
                Err(ExecError::Memory { op, source: MemoryError::Freed { name: reg.name(id).to_string() } })
            }
            None => reg.get(id).map(|_| ()).map_err(mem(op)),
        }
    }

    /// The bytes of a live tensor: owned here, or the registry's (mapped) view.
    pub fn bytes<'a>(&'a self, reg: &'a Registry, op: &'static str, id: TensorId) -> Result<&'a [u8], ExecError> {
        self.check_live(reg, op, id)?;
        match self.slot(id).and_then(|s| s.words.as_deref()) {
            Some(words) => {
                let len = byte_len(reg, op, id)?;
                Ok(&bytemuck::cast_slice(words)[..len])
            }
            None => Ok(reg.get(id).map_err(mem(op))?.bytes()),
        }
    }

    /// The elements of a live F32 tensor.
    pub fn f32s<'a>(&'a self, reg: &'a Registry, op: &'static str, id: TensorId) -> Result<&'a [f32], ExecError> {
        self.check_live(reg, op, id)?;
        self.typed(reg, op, id)
    }

    /// The elements of a live U32 tensor.
    pub fn u32s<'a>(&'a self, reg: &'a Registry, op: &'static str, id: TensorId) -> Result<&'a [u32], ExecError> {
        self.check_live(reg, op, id)?;
        self.typed(reg, op, id)
    }

    fn typed<'a, T: bytemuck::Pod>(
        &'a self,
        reg: &'a Registry,
        op: &'static str,
        id: TensorId,
    ) -> Result<&'a [T], ExecError> {
        let numel = reg.desc(id).map_err(mem(op))?.shape.numel();
        match self.slot(id).and_then(|s| s.words.as_deref()) {
            Some(words) => Ok(&bytemuck::cast_slice(words)[..numel]),
            None => bytemuck::try_cast_slice(reg.get(id).map_err(mem(op))?.bytes()).map_err(|_| ExecError::Decode {
                op,
                tensor: reg.name(id).to_string(),
                reason: "its bytes are not 4-byte aligned".to_string(),
            }),
        }
    }

    /// Copies a registry tensor whose bytes are not word-aligned into an owned buffer, so
    /// that [`Store::f32s`] can view it (GGUF aligns tensor data, so this is rare).
    pub fn align(&mut self, reg: &Registry, id: TensorId) {
        let unaligned = self.slot(id).and_then(|s| s.words.as_ref()).is_none()
            && reg.get(id).is_ok_and(|t| t.bytes().as_ptr().align_offset(4) != 0);
        if unaligned {
            if let Ok(t) = reg.get(id) {
                let words = words_of(t.bytes());
                self.slot_mut(id).words = Some(words);
            }
        }
    }

    /// GRID_ALLOC: zero-filled storage (the buffer is reused when it has one).
    pub fn allocate(&mut self, reg: &Registry, id: TensorId) -> Result<(), ExecError> {
        let len = byte_len(reg, "GRID_ALLOC", id)?;
        let slot = self.slot_mut(id);
        match &mut slot.words {
            Some(w) if w.len() == len.div_ceil(4) => w.fill(0),
            other => *other = Some(vec![0; len.div_ceil(4)]),
        }
        slot.state = Some(Liveness::Live);
        self.bump(id);
        Ok(())
    }

    /// FREE: the storage is released.
    pub fn free(&mut self, reg: &Registry, id: TensorId) -> Result<(), ExecError> {
        self.check_live(reg, "FREE", id)?;
        let slot = self.slot_mut(id);
        slot.words = None;
        slot.state = Some(Liveness::Freed);
        self.bump(id);
        Ok(())
    }

    /// Takes a live tensor's words out to be written (copied from the registry the first
    /// time); give them back with [`Store::put`]. Its version changes.
    pub fn take(&mut self, reg: &Registry, op: &'static str, id: TensorId) -> Result<Vec<u32>, ExecError> {
        self.check_live(reg, op, id)?;
        let words = match self.slot_mut(id).words.take() {
            Some(w) => w,
            None => words_of(reg.get(id).map_err(mem(op))?.bytes()),
        };
        self.slot_mut(id).state = Some(Liveness::Live);
        self.bump(id);
        Ok(words)
    }

    /// Gives back what [`Store::take`] took.
    pub fn put(&mut self, id: TensorId, words: Vec<u32>) {
        self.slot_mut(id).words = Some(words);
    }

    /// Runs `f` on the words of live output `out` (taken, then put back even when `f`
    /// fails). `f` sees the store without `out`'s words: it must not read `out` through it.
    pub fn with_output<R>(
        &mut self,
        reg: &Registry,
        op: &'static str,
        out: TensorId,
        f: impl FnOnce(&Store, &mut [u32]) -> Result<R, ExecError>,
    ) -> Result<R, ExecError> {
        let mut words = self.take(reg, op, out)?;
        let result = f(self, &mut words);
        self.put(out, words);
        result
    }
}

/// Bytes as little-endian words, the last one zero-padded.
fn words_of(bytes: &[u8]) -> Vec<u32> {
    let mut words = vec![0u32; bytes.len().div_ceil(4)];
    bytemuck::cast_slice_mut::<u32, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
    words
}

/// The byte size of a tensor as declared.
pub(crate) fn byte_len(reg: &Registry, op: &'static str, id: TensorId) -> Result<usize, ExecError> {
    let d = reg.desc(id).map_err(mem(op))?;
    Ok(d.dtype.tensor_bytes(d.shape.rows(), d.shape.cols()).unwrap_or(0))
}

/// The `[rows, cols]` of a tensor as declared.
pub(crate) fn dims(reg: &Registry, op: &'static str, id: TensorId) -> Result<(usize, usize), ExecError> {
    let d = reg.desc(id).map_err(mem(op))?;
    Ok((d.shape.rows(), d.shape.cols()))
}
