//! One file per instruction (family): the reference implementation of its semantics.

pub(crate) mod argmax;
pub(crate) mod attention;
pub(crate) mod bitlinear;
pub(crate) mod elementwise;
pub(crate) mod embed;
pub(crate) mod kv_write;
pub(crate) mod linear;
pub(crate) mod rms_norm;
pub(crate) mod rope;
mod rows;
pub(crate) mod softmax;
pub(crate) mod top_k;
