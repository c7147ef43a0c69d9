//! How each dtype is laid out on the GPU.
//!
//! Every dtype is stored as its file stores it (the GGUF bytes, padded to a multiple of 4
//! bytes because buffers are read as `array<u32>`): F16 as packed halves, Q4_0/Q4_1/Q8_0 as
//! their blocks, ternary types as their packed codes. Nothing is expanded to f32.

use purebee_memory::{HostTensor, TensorDesc};

use crate::GpuError;

/// The initial contents of one buffer of a tensor.
pub(crate) enum Part {
    /// Upload these bytes (length a multiple of 4).
    Data(Vec<u8>),
    /// A zero-filled buffer of this many bytes (a multiple of 4).
    Zeroed(u64),
}

impl Part {
    pub fn size(&self) -> u64 {
        match self {
            Part::Data(b) => b.len() as u64,
            Part::Zeroed(n) => *n,
        }
    }
}

/// The buffers of a tensor: its host bytes when it has them (a weight), zeros otherwise.
pub(crate) fn gpu_parts(desc: &TensorDesc, host: Option<&HostTensor>) -> Result<Vec<Part>, GpuError> {
    let bytes = desc.dtype.tensor_bytes(desc.shape.rows(), desc.shape.cols()).unwrap_or(0);
    // A binding needs at least 4 bytes; buffers are read as u32 words.
    let padded = bytes.div_ceil(4).max(1) * 4;
    Ok(vec![match host {
        Some(h) => {
            let mut data = Vec::with_capacity(padded);
            data.extend_from_slice(h.bytes());
            data.resize(padded, 0);
            Part::Data(data)
        }
        None => Part::Zeroed(padded as u64),
    }])
}
