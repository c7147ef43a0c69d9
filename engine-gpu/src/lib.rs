//! # purebee-engine-gpu: the wgpu engine
//!
//! Every ISA instruction as a WGSL compute kernel, through wgpu (Vulkan, Metal, DX12, GL;
//! in a browser tab, built for wasm32, the page's WebGPU). A [`GpuEngine`] keeps one GPU
//! buffer per tensor part (several, its shards, for a part larger than the largest buffer;
//! `tensors.rs`); weights are uploaded once, packed as their file stores them (or repacked
//! once into one documented GPU layout), never expanded to f32. A program is compiled once,
//! on its first run: buffers, bind groups and pipelines are created then; every later run
//! records all of its dispatches into one command encoder, writes the few bytes of its
//! run-time parameters, and submits once.
//!
//! **In a browser** nothing may block: a mapping resolves only when the page's event loop
//! runs. The engine is created with [`GpuEngine::new_async`] (natively [`GpuEngine::new`]
//! blocks on it), and the page reads with `Engine::read_later`, yields to its event loop
//! until `Engine::read_ready` is true, then calls `Engine::finish_read`, which then does not
//! wait. Whatever would wait there (`Engine::read`, `Engine::sync`, finishing a read that is
//! not ready) is [`GpuError::WouldBlock`]; writes and weight uploads go through the queue and
//! never wait.
//!
//! Each kernel lives in `kernels/` as a `.wgsl` file beside the Rust that dispatches it,
//! with its parameters in a `#[repr(C)]` Pod struct that mirrors the WGSL struct.
//!
//! It must not know what a model is: it implements instructions, nothing more.

#![forbid(unsafe_code)]

mod cache;
mod compile;
mod context;
mod engine;
mod error;
mod fuse;
mod host_index;
mod kernels;
mod pipelines;
mod plan;
mod poison;
mod profile;
mod tensors;

pub use context::{quiet_display_probing, GpuContext, GpuOptions};
pub use engine::{GpuEngine, COMPILED_PROGRAMS};
pub use error::GpuError;
pub use kernels::ScratchKey;

/// A WGSL module the engine may create: its name (the kernel files it is made of), its whole
/// source, and whether it needs subgroup operations.
#[derive(Clone, Copy, Debug)]
pub struct WgslModule {
    /// The kernel files it is made of, as in labels and messages.
    pub name: &'static str,
    /// The whole WGSL source, as given to `create_shader_module`.
    pub source: &'static str,
    /// Whether it uses subgroup operations (only on a device with wgpu's SUBGROUP feature).
    pub uses_subgroups: bool,
}

/// Every WGSL module the engine may create, for checking them with another WGSL compiler
/// than naga (a browser's: `tests/browser/wgsl_compile.py`, through the `wgsl_modules`
/// example).
pub fn wgsl_modules() -> impl Iterator<Item = WgslModule> {
    kernels::Shader::ALL.into_iter().map(|s| WgslModule {
        name: s.name(),
        source: s.source(),
        uses_subgroups: s.uses_subgroups(),
    })
}

// The loader boxes engines as `dyn Engine + Send`, natively and in a browser (where wgpu's
// handles are marked Send: a wasm build without atomics has one thread).
const _: () = {
    const fn send<T: Send>() {}
    send::<GpuEngine>();
};
