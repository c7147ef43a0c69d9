//! Errors of the GPU engine: each says what is missing or what failed.

use purebee_isa::ExecError;

/// What went wrong on the GPU side.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum GpuError {
    /// No adapter: no GPU, or no driver for one.
    #[error(
        "no GPU adapter found (wgpu backends: Vulkan, Metal, DX12, GL; in a browser, WebGPU's navigator.gpu). On \
         Linux without a GPU, install Mesa's software Vulkan driver: `apt-get install -y mesa-vulkan-drivers`"
    )]
    NoAdapter,
    /// The device could not be created with the limits or features needed.
    #[error("GPU adapter '{adapter}': {reason}")]
    Device {
        /// The adapter's name.
        adapter: String,
        /// What failed.
        reason: String,
    },
    /// A tensor larger than the device can bind (or, for a tensor that cannot be cut in
    /// shards of whole row windows, store in one buffer).
    #[error("tensor '{tensor}' needs {bytes} bytes in one binding or buffer; the adapter allows {limit}")]
    TooLarge {
        /// The tensor.
        tensor: String,
        /// Its size.
        bytes: u64,
        /// `max_storage_buffer_binding_size`.
        limit: u64,
    },
    /// A dtype a kernel does not take (the ISA validated it, so this is a missing kernel).
    #[error("{op}: the GPU engine has no kernel for {what}")]
    Unsupported {
        /// The instruction.
        op: &'static str,
        /// What is missing.
        what: String,
    },
    /// A per-row index tensor (a paged KV_WRITE's or ATTENTION's positions, sequences or
    /// page table) whose contents the host does not know: the engine checks them on the host
    /// before a run (`host_index.rs`), from what `Engine::write`, GRID_WRITE or GRID_ALLOC
    /// put there, and a kernel wrote this one (or it is too large to keep).
    #[error(
        "{op}: the GPU engine checks the indices in '{tensor}' on the host before it runs, but a kernel wrote \
         them (or they are too many to keep): write them with GRID_WRITE or from the host"
    )]
    IndicesUnknown {
        /// The instruction.
        op: &'static str,
        /// The index tensor.
        tensor: String,
    },
    /// An operation that would have to wait for the GPU, in a browser tab: there a mapping
    /// resolves only when the page's event loop runs, after the call returns, so nothing may
    /// block (a read, a sync, a read later not yet ready, a timed profile).
    #[error(
        "{op}: a browser tab cannot wait for the GPU; read with read_later, yield to the event loop until \
         read_ready is true, then finish_read"
    )]
    WouldBlock {
        /// What would have waited.
        op: &'static str,
    },
    /// A validation or out-of-memory error wgpu reported, or a lost device.
    #[error("wgpu: {0}")]
    Wgpu(String),
}

impl From<GpuError> for ExecError {
    fn from(e: GpuError) -> ExecError {
        ExecError::Device { engine: "gpu", reason: e.to_string() }
    }
}
