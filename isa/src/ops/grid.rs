//! Memory instructions: GRID_ALLOC, GRID_WRITE, FREE, SYNC.
//!
//! GRID_READ, and GRID_WRITE of data that changes on every run (token ids), are host
//! transfers: they are the [`crate::Engine::read`] and [`crate::Engine::write`] operations,
//! not instructions, since a recorded program cannot carry data that is not known yet.

use std::sync::Arc;

use purebee_memory::TensorId;

use crate::validate::Checker;
use crate::IsaError;

/// GRID_ALLOC: gives a declared (or freed) tensor storage, zero-filled.
///
/// Allocating a tensor that is already live zero-fills it again.
#[derive(Clone, Debug, PartialEq)]
pub struct GridAlloc {
    /// The tensor to allocate.
    pub tensor: TensorId,
}

impl GridAlloc {
    pub(crate) fn validate(&self, c: &Checker) -> Result<(), IsaError> {
        c.desc("tensor", self.tensor).map(|_| ())
    }
}

/// GRID_WRITE: copies constant bytes, fixed when the program is built, into a live tensor.
///
/// `data` is the tensor's exact byte image in its dtype's layout (little-endian).
#[derive(Clone, Debug, PartialEq)]
pub struct GridWrite {
    /// The destination; must be live when the instruction runs.
    pub tensor: TensorId,
    /// The bytes, exactly the tensor's size.
    pub data: Arc<[u8]>,
}

impl GridWrite {
    pub(crate) fn validate(&self, c: &Checker) -> Result<(), IsaError> {
        let d = c.desc("tensor", self.tensor)?;
        let size = d.dtype.tensor_bytes(d.shape.rows(), d.shape.cols()).unwrap_or(usize::MAX);
        if self.data.len() != size {
            return Err(c.invalid(format!("'{}' holds {size} bytes, the data has {}", d.name, self.data.len())));
        }
        Ok(())
    }
}

/// FREE: ends a tensor's lifetime; its storage is released. Using it afterwards (before a
/// new GRID_ALLOC) is an error that names it.
#[derive(Clone, Debug, PartialEq)]
pub struct Free {
    /// The tensor to free; must be live.
    pub tensor: TensorId,
}

impl Free {
    pub(crate) fn validate(&self, c: &Checker) -> Result<(), IsaError> {
        c.desc("tensor", self.tensor).map(|_| ())
    }
}
