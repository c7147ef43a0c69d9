//! What a fused product kernel (BITLINEAR's or LINEAR's) does with its outputs besides, or
//! instead of, writing them: the instructions after it that the fusion pass (`fuse/`)
//! folded into it. Each variant is a WGSL file concatenated after the product kernel's.

use purebee_memory::TensorId;

use super::elementwise::UnaryOp;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Epilogue {
    /// The residual TENSOR_ADD `sum = residual + out` (`residual_add.wgsl`).
    Add {
        /// The residual operand `r` of the add.
        residual: TensorId,
        /// The add's output `o` (may be `residual`).
        sum: TensorId,
        /// Whether the product's own output must still be written.
        write_out: bool,
    },
    /// The gating `gated = act(gated) · out` (`act_mul.wgsl`).
    ActMul {
        /// The gate tensor, activated and multiplied in place.
        gated: TensorId,
        /// The activation.
        op: UnaryOp,
        /// Whether the product's own output must still be written.
        write_out: bool,
    },
    /// The first pass of ARGMAX over the (one-row) output: per workgroup, the key and index
    /// of its rows' largest value (`linear_argmax.wgsl`; LINEAR only). The second pass,
    /// `argmax.wgsl`'s `argmax_partials`, writes `ids`.
    Argmax {
        /// The ARGMAX's output.
        ids: TensorId,
        /// Whether the product's own output must still be written.
        write_out: bool,
    },
}
