//! # purebee-isa: the instruction set
//!
//! What a model asks an engine to compute, never how: typed [`Instruction`]s over
//! [`TensorId`] handles, validated (shapes, dtypes, aliasing, parameters) when a
//! [`Program`] is built, and the [`Engine`] trait every engine implements. Each
//! instruction's exact semantics (shapes, dtypes, rounding, accumulation) is written once,
//! in the rustdoc of its struct in [`ops`]; engines implement that text.
//!
//! It must not know about GPUs, wgpu, shaders, threads, or what a transformer is.

#![forbid(unsafe_code)]

mod args;
mod engine;
mod error;
mod instruction;
pub mod ops;
mod program;
mod validate;

pub use args::{F32Arg, ParamDecl, ParamId, ParamKind, ParamValue, U32Arg};
pub use engine::{DispatchCounters, Engine, KernelProfile, PendingRead, ProfileSupport};
pub use error::{ExecError, IsaError};
pub use instruction::Instruction;
pub use program::{Program, ProgramBuilder, ProgramId};
pub use purebee_memory::{DType, Registry, TensorId};
