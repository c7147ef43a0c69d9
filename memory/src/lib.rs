//! # purebee-memory: where tensors live
//!
//! The bottom layer of purebee-rs. It knows:
//! - the element types ([`DType`]), plain and block-quantized, their byte layouts and
//!   a plain dequantize-to-f32 routine for each ([`quant`]);
//! - host tensors ([`HostTensor`]): a dtype, a row-major [`Shape`] and bytes that are
//!   either owned or a zero-copy view into a memory-mapped file;
//! - the named-tensor [`Registry`]: names resolve once to [`TensorId`] handles, lifetimes
//!   are explicit (free), and using a freed or unknown tensor is a typed error naming it;
//! - the GGUF v2/v3 file format ([`gguf`]), read zero-copy through memmap2 with every
//!   count, length and offset checked against the file before use.
//!
//! It must not know about instructions, engines, GPUs or models.

mod dtype;
mod error;
pub mod gguf;
pub mod quant;
mod registry;
mod shape;
mod tensor;

pub use dtype::{ggml_type_name, DType, ALL_DTYPES};
pub use error::MemoryError;
pub use registry::{Registry, TensorDesc, TensorId};
pub use shape::Shape;
pub use tensor::HostTensor;
