//! The fusion pass of the compiler: which ranges of a program's instructions become one
//! group of kernel calls instead of each instruction's own.
//!
//! Why: the compiler otherwise maps every instruction to its own kernels, one to one, so a
//! program re-quantizes the same normed activations for q, k and v (and again for gate
//! and up), writes every intermediate to memory although only the next kernel reads it,
//! and pays a dispatch for each. On a GPU the dispatch count, not the bandwidth, bounds
//! decode.
//!
//! The pass reads the instruction list once (`plan.rs`) and returns a [`Plan`]: a list of
//! [`Unit`]s covering every instruction in order, each either one instruction on the
//! unfused path or a fused group (`group.rs`). Every pattern it matches is a variant of
//! [`Pattern`], with the conditions under which it applies; anything else (and every
//! instruction of a candidate group whose preconditions fail) stays on the one-instruction
//! path, so a program the pass cannot fuse runs unfused, never wrong. `record.rs` turns a
//! unit into kernel calls. `GpuOptions::fuse = false` (or `PUREBEE_GPU_NO_FUSE=1`) turns
//! the pass off.
//!
//! **Dead intermediates** (`liveness.rs`). A fused kernel holds some values in registers
//! that the unfused program writes to a tensor: the normed rows of a fused RMS_NORM, a
//! BITLINEAR's output that the fused residual add consumes. Such a write is skipped (a
//! `WRITE_OUT = 0` specialization) when it is *dead* by a rule that needs no knowledge of
//! what the host reads: the write of tensor T by instruction i is dead when a later
//! instruction j of the same program fully overwrites T (any instruction whose output is T,
//! GRID_ALLOC, GRID_WRITE; not KV_WRITE, which writes part of its cache) or FREEs it, and
//! no instruction between i and j, nor j itself, reads T, except the instructions of the
//! fused group whose reads of T the group serves from registers. (An in-place instruction
//! reading T counts as a read.) The last write of a tensor in a program is therefore always
//! kept: the host may read any tensor after a run.

mod group;
mod liveness;
mod plan;
mod record;
#[cfg(test)]
mod tests;

pub(crate) use group::{Plan, Unit};
pub(crate) use plan::{plan, Limits};
pub(crate) use record::{record, record_head_argmax, record_rope_kv};

/// The patterns the pass matches. A fused group may combine several (an RMS_NORM
/// followed by q, k and v is [`Pattern::NormQuantization`] and
/// [`Pattern::SharedQuantization`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Pattern {
    /// Consecutive BITLINEARs that read the same `x`: its int8 quantization (`quantize`,
    /// or the fused norm below) is computed once, into the activation scratch buffers, and
    /// every BITLINEAR's product reads it. Sound because no BITLINEAR writes its own `x`
    /// (the ISA requires `out` distinct from the inputs), so `x` is unchanged between them,
    /// and the quantization depends on `x` alone. (Three products of one x, or two.) Likewise consecutive
    /// LINEARs with int8-block activations that read the same `x`: the first one's
    /// `quantize_blocks` fills the rounded-activation scratch buffer once for every product
    /// (LINEARs with f32 activations share nothing and stay separate unless an epilogue
    /// follows).
    SharedQuantization,
    /// RMS_NORM(h, x) immediately followed by BITLINEARs reading `h` (also in place,
    /// `h == x`: a norm just before a projection): one `norm_quant.wgsl` dispatch normalizes each row
    /// and quantizes it, bit-identical to RMS_NORM then `quantize`; `h` is written only when
    /// that write is not dead. Needs `h`'s row length to be a non-zero multiple of 4 (a
    /// BITLINEAR's `k` is a multiple of 128). Likewise before LINEARs with int8-block
    /// activations (`norm_quant_blocks`, bit-identical to RMS_NORM then `quantize_blocks`;
    /// rows of the LINEAR's `k`, at most `norm_quant::MAX_BLOCK_ROW` long), the final norm
    /// before a LINEAR and its ARGMAX included. On a GPU, when `h`'s write is dead and
    /// the products are one-token INT8 ones of short rows (`linear::rounds_in_product`),
    /// the norm has no dispatch at all: each product workgroup computes the norm's scale
    /// with RMS_NORM's own code and rounds the normed blocks it multiplies (`ROUND = 2`),
    /// bit-identical again.
    NormQuantization,
    /// BITLINEAR(p, ·) immediately followed by TENSOR_ADD(o, r, p) or TENSOR_ADD(o, p, r),
    /// `r ≠ p`, `o ≠ p`: the add as the epilogue of the product kernel
    /// (`residual_add.wgsl`), each output element read and written by the one invocation
    /// that computes it (so `o == r`, the in-place residual, is safe); `p` is written only
    /// when that write is not dead. Needs `o` to differ from the weight and the output
    /// scale (bound read-only by the product), and the device to allow 8 storage buffers
    /// per stage. (The product reads only the scratch activations, so `o` or `r` may be the
    /// quantized tensor; when `r` is a fused norm's output, the dead-store rule sees the
    /// add read it and keeps the norm's write.) Likewise after LINEAR(p, x, W): the same
    /// epilogue file replaces `product_store.wgsl` after `linear.wgsl`'s products (`gemv`,
    /// `gemv_rows`, `tiled`, every row window), which compute the same sums; needs `o` to
    /// differ from `x` and `W` (bound read-only) and 6 storage buffers per stage.
    ResidualEpilogue,
    /// BITLINEAR(u, ·) (the last of its group: both products share the quantization)
    /// immediately followed by ACT(g, g) (SILU, RELU2 or GELU, in place) and
    /// ELEMENT_MUL(g, g, u) or ELEMENT_MUL(g, u, g), `g ≠ u`: the activation and the
    /// multiply as the epilogue of u's product kernel (`act_mul.wgsl`), each element of g
    /// read and written by the one invocation that computes u's element, with the
    /// elementwise kernels' own operations (bit-identical); u is written only when that
    /// write is not dead. Needs g to differ from the weight and the output scale (bound
    /// read-only by the product). (two products + RELU2 or SILU +
    /// ELEMENT_MUL.) Likewise after the up LINEAR (of any weight type and activations), g
    /// differing from its `x` and `W`.
    ActMulEpilogue,
    /// ROPE(q, q) ; ROPE(k, k) ; KV_WRITE(kc, k) ; KV_WRITE(vc, v), in that order: one
    /// `rope_kv.wgsl` dispatch rotating q and k and appending the rotated k and v to the
    /// caches (rope.wgsl's arithmetic, bit for bit); k is written back only when that write
    /// is not dead. Needs both ROPEs in place with the same position, base, style and
    /// head_dim and `rot_dim == head_dim` (no unrotated tail for the cache copy), both
    /// KV_WRITEs at that position, q, k, v and the two caches pairwise distinct, one row
    /// count for q, k and v, and F32 or F16 caches (F16: each element rounded as KV_WRITE
    /// rounds, stored into its half of a word with two atomics). (Every attention block.)
    #[cfg_attr(not(test), allow(dead_code))] // named by Plan::patterns (tests); Unit::RopeKv
    RopeKvWrite,
    /// Three BITLINEARs sharing a quantization (q, k, v) at one token: their products in
    /// one dispatch (`bitlinear_multi.wgsl`'s `gemv_multi`: the rows of the three weights
    /// in one grid, each row computed as `gemv` computes it). Needs one ternary type and
    /// either all or none of the output scales, distinct outputs that are none of the
    /// weights and scales, no epilogue, and 14 storage buffers per stage; otherwise the
    /// three products stay separate dispatches (still sharing the quantization). Likewise
    /// three one-token LINEARs reading one `x` (`linear_multi.wgsl`'s `gemv_multi`, or
    /// `gemv_rows_multi` on short rows of a CPU adapter): one weight dtype and row length,
    /// one activations option (int8 blocks: rounded once, by the norm or the first
    /// dispatch), each weight in one binding, distinct outputs that are none of the inputs,
    /// and 10 storage buffers per stage.
    MultiProduct,
    /// [`Pattern::ActMulEpilogue`] over two BITLINEARs (gate, up) at one token whose first
    /// output is the gated tensor: the two products, the activation and the multiply in
    /// one dispatch (`gemv_gated`: two accumulators per row, each reduced as `gemv`
    /// reduces it). Needs one ternary type, all or none of the output scales, and 11
    /// storage buffers per stage; otherwise the up product carries the epilogue alone.
    /// Likewise two one-token LINEARs (`linear_multi.wgsl`'s `gemv_gated`: both rows in one
    /// workgroup, each as `gemv` computes it): one weight dtype and shape, each weight in
    /// one binding, and 9 storage buffers per stage.
    GatedPair,
    /// LINEAR(y, x, W) of one token immediately followed by ARGMAX(id, y), `y` not `x`
    /// (a product over a vocabulary-sized output and greedy decoding): the product kernel also writes, per workgroup of
    /// 8 rows, the order key and index of their largest value (`linear_argmax.wgsl`, with
    /// gemv's or gemv_rows' arithmetic per row and argmax.wgsl's comparison), and one small
    /// dispatch (`argmax_partials`) reduces those slots to `id`, instead of ARGMAX's one
    /// workgroup reading the whole row. Every row window of a weight larger than one
    /// binding writes its own slots. `y` is written only when that write is not dead (the
    /// host may read the logits: usually it is kept). Needs `y` to fit one binding.
    #[cfg_attr(not(test), allow(dead_code))] // named by Plan::patterns (tests); Unit::HeadArgmax
    ArgmaxPartials,
    /// [`Pattern::MultiProduct`] (BITLINEAR or LINEAR) writing q, k and v, immediately
    /// followed by [`Pattern::RopeKvWrite`]'s four instructions on them: the rotation and
    /// the cache writes as the epilogue of the products' dispatch (`rope_qkv.wgsl`:
    /// `gemv_multi_rope`, or `gemv_rows_multi_rope` on a CPU adapter's short LINEAR rows),
    /// one workgroup (or row group) computing both rows of a rotation pair, so no dispatch
    /// reads q and k back. Needs RopeKvWrite's preconditions with q, k and v the first,
    /// second and third product's outputs, caches that are none of the products' inputs
    /// (bound read-write beside them), and 3 more storage buffers per stage than the
    /// products: 14 for BITLINEARs without output scales (whose entry point binds none),
    /// 17 with them, 13 for LINEARs. k and v are written only when those writes are not
    /// dead; q always (its ROPE's write is the one ATTENTION reads). The caches may be F32
    /// or F16 (rounded as KV_WRITE rounds, bit for bit).
    RopeEpilogue,
    /// RMS_NORM(h, x) immediately followed by one-token LINEARs with f32 activations reading
    /// `h` (Q4_0, Q4_1, Q8_0 or float weights), on a GPU: the norm has no dispatch at all.
    /// Each product workgroup computes the norm's scale with RMS_NORM's own code (its
    /// workgroup size and reductions) and multiplies `h_i = x_i · inv · w_i`, RMS_NORM's own
    /// expression: bit-identical. Needs `h`'s write to be dead, x unwritten by the group,
    /// rows whose RMS_NORM runs with `gemv`'s workgroup size, and no LINEAR with an ARGMAX after it (a
    /// workgroup per vocabulary row would repeat the norm that often); otherwise the norm
    /// stays on its own (`linear::rounds_in_product`).
    NormInProduct,
    /// ATTENTION(o, ·) immediately followed by LINEARs reading `o` with int8-block
    /// activations (the o projection after attention): the merge of the attention's splits
    /// (`attention.wgsl`'s `combine_rounded`) also rounds each head's blocks into the
    /// LINEARs' scratch buffer, bit-identical to their `quantize_blocks`, one dispatch fewer.
    /// Needs the positions split (so the merge runs: decode) and a head dimension that is
    /// a multiple of 32 (a head holds whole blocks). `o` is always written.
    AttentionRounding,
}
