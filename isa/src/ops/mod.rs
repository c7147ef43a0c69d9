//! The instructions, one file each: fields, exact semantics (in the rustdoc), validation.

mod argmax;
mod attention;
mod bitlinear;
mod elementwise;
mod embed;
mod grid;
mod kv_write;
mod linear;
mod rms_norm;
mod rope;
mod rows;
mod softmax;
mod top_k;

pub use argmax::Argmax;
pub use attention::Attention;
pub use bitlinear::{bitlinear_act_scale, bitlinear_quantize, BitLinear};
pub use elementwise::{Binary, Unary};
pub use embed::Embed;
pub use grid::{Free, GridAlloc, GridWrite};
pub use kv_write::{f16_bits, is_cache_dtype, KvWrite};
pub use linear::{quantize_blocks, Linear, LinearActivations, LINEAR_ACT_BLOCK};
pub use rms_norm::RmsNorm;
pub use rope::{Rope, RopeStyle};
pub use rows::{CacheRows, PagedRows, RowPositions};
pub use softmax::Softmax;
pub use top_k::TopK;
