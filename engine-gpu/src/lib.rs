//! # purebee-engine-gpu: the wgpu engine
//!
//! Every ISA instruction as a WGSL compute kernel, through wgpu (Vulkan, Metal, DX12, GL).
//! A [`GpuEngine`] keeps one GPU buffer per tensor; weights are uploaded once, packed as
//! their file stores them (or repacked once into one documented GPU layout), never
//! expanded to f32. A program is compiled once, on its first run: buffers, bind groups and
//! pipelines are created then; every later run records all of its dispatches into one
//! command encoder, writes the few bytes of its run-time parameters, and submits once.
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
