//! The engine trait: what every engine (reference, GPU, ...) implements.

use purebee_memory::{Registry, TensorId};

use crate::{ExecError, ParamValue, Program};

/// Cumulative counts of the work an engine handed to its device (see [`Engine::counters`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DispatchCounters {
    /// Kernel dispatches recorded.
    pub dispatches: u64,
    /// Command submissions to the device queue (each one a round of driver overhead).
    pub submits: u64,
}

/// A GRID_READ begun with [`Engine::read_later`], to be completed with
/// [`Engine::finish_read`]. Dropping it abandons the read.
#[derive(Debug)]
pub struct PendingRead(PendingBytes);

#[derive(Debug)]
enum PendingBytes {
    /// Read at once (engines whose reads cannot overlap later work).
    Ready(Vec<u8>),
    /// An engine-defined ticket for bytes still in flight.
    Ticket(u64),
}

impl PendingRead {
    /// A read that completed when it began.
    pub fn ready(bytes: Vec<u8>) -> PendingRead {
        PendingRead(PendingBytes::Ready(bytes))
    }

    /// A read in flight, named by an engine's own ticket.
    pub fn ticket(ticket: u64) -> PendingRead {
        PendingRead(PendingBytes::Ticket(ticket))
    }

    /// The ticket of a read in flight; `None` for one that completed when it began.
    pub fn ticket_number(&self) -> Option<u64> {
        match self.0 {
            PendingBytes::Ready(_) => None,
            PendingBytes::Ticket(t) => Some(t),
        }
    }

    /// The bytes of a read that completed when it began, or the ticket of one in flight.
    pub fn into_parts(self) -> Result<Vec<u8>, u64> {
        match self.0 {
            PendingBytes::Ready(bytes) => Ok(bytes),
            PendingBytes::Ticket(t) => Err(t),
        }
    }
}

impl DispatchCounters {
    /// The counts since `earlier`.
    pub fn since(self, earlier: DispatchCounters) -> DispatchCounters {
        DispatchCounters {
            dispatches: self.dispatches.saturating_sub(earlier.dispatches),
            submits: self.submits.saturating_sub(earlier.submits),
        }
    }
}

/// One kernel family's share of a profiled span (see [`Engine::set_profiling`]).
#[derive(Clone, Debug, PartialEq)]
pub struct KernelProfile {
    /// The kernel family, as the engine names it (the GPU engine: `file:entry`, for example
    /// `bitlinear.wgsl:gemv`).
    pub family: String,
    /// Dispatches of the family.
    pub dispatches: u64,
    /// Device time of those dispatches in seconds, from device timestamps; `None` where the
    /// device has none.
    pub seconds: Option<f64>,
    /// Bytes the dispatches read, as the engine estimates them (the GPU engine documents
    /// what it counts on `GpuEngine`).
    pub bytes_read: u64,
}

/// What [`Engine::set_profiling`] could turn on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProfileSupport {
    /// Dispatch counts, bytes read and device time per kernel family.
    Timed,
    /// Dispatch counts and bytes read per kernel family, without times: the reason.
    Untimed(String),
    /// The engine runs no kernels it can profile.
    Unsupported,
}

/// An engine runs programs over the tensors of its [`Registry`].
///
/// Models build programs against [`Engine::memory_mut`] (declaring activations, looking up
/// weights), then run them many times with [`Engine::execute`]. Host data crosses the engine
/// boundary only through [`Engine::write`] (GRID_WRITE) and [`Engine::read`] (GRID_READ).
pub trait Engine {
    /// A short name for messages (`"ref"`, `"gpu"`).
    fn name(&self) -> &'static str;

    /// The engine's named-tensor registry.
    fn memory(&self) -> &Registry;

    /// The engine's named-tensor registry, to load weights and build programs against.
    fn memory_mut(&mut self) -> &mut Registry;

    /// Runs every instruction of `program`, in order, with `params` as the values of its
    /// declared parameters. Stops at the first failing instruction.
    fn execute(&mut self, program: &Program, params: &[ParamValue]) -> Result<(), ExecError>;

    /// GRID_WRITE from the host: copies `bytes` (the tensor's exact byte image) into a live
    /// tensor.
    fn write(&mut self, tensor: TensorId, bytes: &[u8]) -> Result<(), ExecError>;

    /// GRID_READ: the bytes of a live tensor, after every instruction submitted so far.
    fn read(&mut self, tensor: TensorId) -> Result<Vec<u8>, ExecError>;

    /// Waits until every instruction submitted so far has completed.
    fn sync(&mut self) -> Result<(), ExecError>;

    /// GRID_READ without waiting for it: the bytes the tensor will hold after every
    /// instruction submitted so far, delivered by [`Engine::finish_read`]. Instructions
    /// executed in between do not change them. An engine whose device runs asynchronously
    /// (see [`Engine::reads_overlap`]) lets the host queue the next program before the bytes
    /// arrive; the default reads at once.
    fn read_later(&mut self, tensor: TensorId) -> Result<PendingRead, ExecError> {
        Ok(PendingRead::ready(self.read(tensor)?))
    }

    /// [`Engine::read_later`] of several tensors at once: one submission for all of them on
    /// an engine that batches (a sampled decode step reads TOP_K's values and ids). The
    /// default reads them one after the other.
    fn read_later_all(&mut self, tensors: &[TensorId]) -> Result<Vec<PendingRead>, ExecError> {
        tensors.iter().map(|&t| self.read_later(t)).collect()
    }

    /// The bytes of a read begun with [`Engine::read_later`], waiting for them if needed.
    fn finish_read(&mut self, pending: PendingRead) -> Result<Vec<u8>, ExecError> {
        pending.into_parts().map_err(|ticket| ExecError::UnknownRead { ticket })
    }

    /// Whether [`Engine::finish_read`] of `pending` would return without waiting: the bytes
    /// have arrived, or the read failed (then `finish_read` says how). Never blocks. A caller
    /// that must not block (a browser tab, whose GPU mappings resolve only when its event
    /// loop runs) yields to its event loop until this is true, then finishes the read. A
    /// read that completed when it began is ready; the default says every read is.
    fn read_ready(&mut self, pending: &PendingRead) -> bool {
        let _ = pending;
        true
    }

    /// Whether [`Engine::read_later`] returns before the bytes exist, so that a caller gains
    /// by queueing more work before [`Engine::finish_read`] (a GPU engine). False for
    /// engines that run each instruction to completion when it is executed.
    fn reads_overlap(&self) -> bool {
        false
    }

    /// The largest `k` this engine's TOP_K takes, where it has a limit (the GPU engine: 256);
    /// a program with a larger one fails when it runs. `None`: any `k` the ISA allows.
    fn top_k_limit(&self) -> Option<u32> {
        None
    }

    /// The work this engine has handed to its device since it was created, for an engine
    /// that dispatches kernels (a GPU engine) or jobs to a thread pool (the CPU engine counts
    /// each join as a dispatch, with no submits); `None` for one that runs instructions in
    /// place. `bench` divides the difference over a run by its tokens.
    fn counters(&self) -> Option<DispatchCounters> {
        None
    }

    /// Turns per-kernel profiling on or off and says what a profile will hold. Profiling
    /// may slow the engine (the GPU engine gives each dispatch its own timed pass and waits
    /// for the timestamps after each run); off, it costs nothing. Engines without kernels
    /// answer [`ProfileSupport::Unsupported`].
    fn set_profiling(&mut self, on: bool) -> ProfileSupport {
        let _ = on;
        ProfileSupport::Unsupported
    }

    /// What was profiled since profiling was turned on or since the last call, one entry per
    /// kernel family in the order each was first dispatched; empty when profiling is off.
    fn take_profile(&mut self) -> Vec<KernelProfile> {
        Vec::new()
    }

    /// GRID_WRITE of f32 values.
    fn write_f32(&mut self, tensor: TensorId, values: &[f32]) -> Result<(), ExecError> {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.write(tensor, &bytes)
    }

    /// GRID_WRITE of u32 values.
    fn write_u32(&mut self, tensor: TensorId, values: &[u32]) -> Result<(), ExecError> {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.write(tensor, &bytes)
    }

    /// GRID_READ of an F32 tensor as values.
    fn read_f32(&mut self, tensor: TensorId) -> Result<Vec<f32>, ExecError> {
        let bytes = self.read(tensor)?;
        Ok(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }

    /// GRID_READ of a U32 tensor as values.
    fn read_u32(&mut self, tensor: TensorId) -> Result<Vec<u32>, ExecError> {
        let bytes = self.read(tensor)?;
        Ok(bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }
}

/// A boxed engine is an engine, so a caller can pick one at run time (`--engine`).
impl<E: Engine + ?Sized> Engine for Box<E> {
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn memory(&self) -> &Registry {
        (**self).memory()
    }
    fn memory_mut(&mut self) -> &mut Registry {
        (**self).memory_mut()
    }
    fn execute(&mut self, program: &Program, params: &[ParamValue]) -> Result<(), ExecError> {
        (**self).execute(program, params)
    }
    fn write(&mut self, tensor: TensorId, bytes: &[u8]) -> Result<(), ExecError> {
        (**self).write(tensor, bytes)
    }
    fn read(&mut self, tensor: TensorId) -> Result<Vec<u8>, ExecError> {
        (**self).read(tensor)
    }
    fn sync(&mut self) -> Result<(), ExecError> {
        (**self).sync()
    }
    fn read_later(&mut self, tensor: TensorId) -> Result<PendingRead, ExecError> {
        (**self).read_later(tensor)
    }
    fn read_later_all(&mut self, tensors: &[TensorId]) -> Result<Vec<PendingRead>, ExecError> {
        (**self).read_later_all(tensors)
    }
    fn finish_read(&mut self, pending: PendingRead) -> Result<Vec<u8>, ExecError> {
        (**self).finish_read(pending)
    }
    fn read_ready(&mut self, pending: &PendingRead) -> bool {
        (**self).read_ready(pending)
    }
    fn reads_overlap(&self) -> bool {
        (**self).reads_overlap()
    }
    fn top_k_limit(&self) -> Option<u32> {
        (**self).top_k_limit()
    }
    fn counters(&self) -> Option<DispatchCounters> {
        (**self).counters()
    }
    fn set_profiling(&mut self, on: bool) -> ProfileSupport {
        (**self).set_profiling(on)
    }
    fn take_profile(&mut self) -> Vec<KernelProfile> {
        (**self).take_profile()
    }
}
