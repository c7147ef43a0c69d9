//! The fusion pass of the compiler: which ranges of a program's instructions become one
//! group of kernel calls instead of each instruction's own.
//!
//! Why: the compiler otherwise maps every instruction to its own kernels, one to one, so a
//! program re-quantizes the same normed activations for q, k and v (and again for gate
//! and up), writes every intermediate to memory although only the next kernel reads it,
//! and pays a dispatch for each. On a real GPU the dispatch count, not the bandwidth, is
//! the wall for decode (issue 10).
//!
//! The pass reads the instruction list once and returns a [`Plan`]: a list of [`Unit`]s
//! covering every instruction in order, each either one instruction on the unfused path or
//! a fused group. Every pattern it matches is a variant of [`Pattern`], with the conditions
//! under which it applies; anything else (and every instruction of a candidate group whose
//! preconditions fail) stays on the one-instruction path, so a program the pass cannot fuse
//! runs unfused, never wrong. `GpuOptions::fuse = false` (or `PUREBEE_GPU_NO_FUSE=1`) turns
//! the pass off.
//!
//! **Dead intermediates.** A fused kernel holds some values in registers that the unfused
//! program writes to a tensor: the normed rows of a fused RMS_NORM, a BITLINEAR's output
//! that the fused residual add consumes. Such a write is skipped (a `WRITE_OUT = 0`
//! specialization) when it is *dead* by a rule that needs no knowledge of what the host
//! reads: the write of tensor T by instruction i is dead when a later instruction j of the
//! same program fully overwrites T (any instruction whose output is T, GRID_ALLOC,
//! GRID_WRITE; not KV_WRITE, which writes part of its cache) or FREEs it, and no instruction
//! between i and j, nor j itself, reads T, except the instructions of the fused group whose
//! reads of T the group serves from registers. (An in-place instruction reading T counts as
//! a read.) The last write of a tensor in a program is therefore always kept: the host may
//! read any tensor after a run.

use std::ops::Range;

use purebee_isa::ops::{Attention, Binary, BitLinear, Linear, LinearActivations, RmsNorm};
use purebee_isa::Instruction;
use purebee_memory::{DType, TensorId};

use crate::kernels::bitlinear::{self, Epilogue};
use crate::kernels::elementwise::UnaryOp;
use crate::kernels::rope_qkv::{self, RopeEpilogue};
use crate::kernels::{attention, linear, norm_quant, rope_kv, KernelCall, RecordCtx};
use crate::GpuError;

/// The patterns the pass matches. A fused group may combine several (an RMS_NORM
/// followed by q, k and v is [`Pattern::NormQuantization`] and
/// [`Pattern::SharedQuantization`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Pattern {
    /// Consecutive BITLINEARs that read the same `x`: its int8 quantization (`quantize`,
    /// or the fused norm below) is computed once, into the activation scratch buffers, and
    /// every BITLINEAR's product reads it. Sound because no BITLINEAR writes its own `x`
    /// (the ISA requires `out` distinct from the inputs), so `x` is unchanged between them,
    /// and the quantization depends on `x` alone. (q/k/v; gate/up.) Likewise consecutive
    /// LINEARs with int8-block activations that read the same `x`: the first one's
    /// `quantize_blocks` fills the rounded-activation scratch buffer once for every product
    /// ([`Unit::Linear`]; LINEARs with f32 activations share nothing and stay separate
    /// unless an epilogue follows).
    SharedQuantization,
    /// RMS_NORM(h, x) immediately followed by BITLINEARs reading `h` (also in place,
    /// `h == x`: a norm just before a projection): one `norm_quant.wgsl` dispatch normalizes each row
    /// and quantizes it, bit-identical to RMS_NORM then `quantize`; `h` is written only when
    /// that write is not dead. Needs `h`'s row length to be a non-zero multiple of 4 (a
    /// BITLINEAR's `k` is a multiple of 128). Likewise before LINEARs with int8-block
    /// activations (`norm_quant_blocks`, bit-identical to RMS_NORM then `quantize_blocks`;
    /// rows of the LINEAR's `k`, at most `norm_quant::MAX_BLOCK_ROW` long), the final norm
    /// before an LM head and its ARGMAX included. On a GPU, when `h`'s write is dead and
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
    /// BITLINEAR(u, ·) (the last of its group: gate and up share the quantization)
    /// immediately followed by ACT(g, g) (SILU, RELU2 or GELU, in place) and
    /// ELEMENT_MUL(g, g, u) or ELEMENT_MUL(g, u, g), `g ≠ u`: the activation and the
    /// multiply as the epilogue of u's product kernel (`act_mul.wgsl`), each element of g
    /// read and written by the one invocation that computes u's element, with the
    /// elementwise kernels' own operations (bit-identical); u is written only when that
    /// write is not dead. Needs g to differ from the weight and the output scale (bound
    /// read-only by the product). (gate/up + RELU2 or SILU +
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
    /// (the LM head and greedy decoding): the product kernel also writes, per workgroup of
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
    /// rows whose RMS_NORM runs with `gemv`'s workgroup size, and no LM head after it (a
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

/// A fused [`Pattern::RopeEpilogue`] at the end of a merged q/k/v group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RopePart {
    /// The first ROPE; the last instruction absorbed is `first + 3`.
    pub first: usize,
    /// Whether the rotated k and v are written to their tensors.
    pub write_k: bool,
    pub write_v: bool,
    /// Whether the k and v caches are F16 (the epilogue rounds into them).
    pub k_f16: bool,
    pub v_f16: bool,
}

/// A fused RMS_NORM at the head of a [`QuantGroup`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NormPart {
    pub index: usize,
    /// Whether the normed tensor is written (its write is not dead).
    pub write_out: bool,
}

/// The instructions fused into the last product of a [`QuantGroup`] (a TENSOR_ADD, or an
/// activation and an ELEMENT_MUL), as its epilogue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TailPart {
    /// The last instruction absorbed.
    pub last: usize,
    pub epilogue: Epilogue,
}

impl TailPart {
    /// The pattern this epilogue applies.
    fn pattern(&self) -> Pattern {
        match self.epilogue {
            Epilogue::Add { .. } => Pattern::ResidualEpilogue,
            Epilogue::ActMul { .. } => Pattern::ActMulEpilogue,
            Epilogue::Argmax { .. } => Pattern::ArgmaxPartials,
        }
    }
}

/// Consecutive instructions that share one activation quantization: an optional RMS_NORM,
/// one or more BITLINEARs reading the same tensor, and an optional epilogue (a residual
/// add, or an activation and a multiply) after the last of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct QuantGroup {
    pub norm: Option<NormPart>,
    pub linears: Vec<usize>,
    pub tail: Option<TailPart>,
    /// The products run as one dispatch ([`Pattern::MultiProduct`] or
    /// [`Pattern::GatedPair`]).
    pub merged: bool,
    /// The merged q/k/v products' ROPE epilogue.
    pub rope: Option<RopePart>,
}

/// The last instruction of a group: its ROPE epilogue's, its tail's or its last product.
fn group_last(linears: &[usize], tail: Option<TailPart>, rope: Option<RopePart>) -> usize {
    match (rope, tail) {
        (Some(r), _) => r.first + 3,
        (None, Some(t)) => t.last,
        (None, None) => linears[linears.len() - 1],
    }
}

impl QuantGroup {
    /// The instructions the group covers.
    pub fn range(&self) -> Range<usize> {
        let first = self.norm.map_or(self.linears[0], |n| n.index);
        first..group_last(&self.linears, self.tail, self.rope) + 1
    }

    /// The patterns the group applies.
    pub fn patterns(&self) -> Vec<Pattern> {
        let mut p = Vec::new();
        if self.linears.len() > 1 {
            p.push(Pattern::SharedQuantization);
        }
        if self.norm.is_some() {
            p.push(Pattern::NormQuantization);
        }
        p.extend(self.tail.map(|t| t.pattern()));
        if self.merged {
            p.push(if self.tail.is_some() { Pattern::GatedPair } else { Pattern::MultiProduct });
        }
        p.extend(self.rope.map(|_| Pattern::RopeEpilogue));
        p
    }
}

/// The instruction before a [`LinearGroup`]'s products that produces their `x` and rounds
/// it to int8 blocks for them, so that no product rounds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rounder {
    /// An RMS_NORM ([`Pattern::NormQuantization`]; [`Pattern::NormInProduct`] before f32
    /// activations).
    Norm(NormPart),
    /// The ATTENTION at this index, whose merge rounds ([`Pattern::AttentionRounding`]).
    Attention(usize),
}

impl Rounder {
    fn index(&self) -> usize {
        match *self {
            Rounder::Norm(n) => n.index,
            Rounder::Attention(i) => i,
        }
    }
}

/// Consecutive LINEARs that read one `x` with one activations option, after an optional
/// instruction producing that `x` and rounding it (int8-block activations only), and an
/// optional epilogue after the last of them (a residual add, or an activation and a
/// multiply).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LinearGroup {
    pub rounder: Option<Rounder>,
    pub linears: Vec<usize>,
    pub tail: Option<TailPart>,
    /// Int8-block activations: the first LINEAR's rounding of `x` (or the rounder's) serves
    /// them all.
    pub int8: bool,
    /// The products run as one dispatch ([`Pattern::MultiProduct`] or
    /// [`Pattern::GatedPair`]).
    pub merged: bool,
    /// The merged q/k/v products' ROPE epilogue.
    pub rope: Option<RopePart>,
}

impl LinearGroup {
    /// The instructions the group covers.
    pub fn range(&self) -> Range<usize> {
        let first = self.rounder.map_or(self.linears[0], |r| r.index());
        first..group_last(&self.linears, self.tail, self.rope) + 1
    }

    /// The patterns the group applies.
    pub fn patterns(&self) -> Vec<Pattern> {
        let mut p = Vec::new();
        if self.int8 && self.linears.len() > 1 {
            p.push(Pattern::SharedQuantization);
        }
        p.extend(self.rounder.map(|r| match r {
            Rounder::Norm(_) if !self.int8 => Pattern::NormInProduct,
            Rounder::Norm(_) => Pattern::NormQuantization,
            Rounder::Attention(_) => Pattern::AttentionRounding,
        }));
        p.extend(self.tail.map(|t| t.pattern()));
        if self.merged {
            p.push(if self.tail.is_some() { Pattern::GatedPair } else { Pattern::MultiProduct });
        }
        p.extend(self.rope.map(|_| Pattern::RopeEpilogue));
        p
    }
}

/// One step of a [`Plan`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Unit {
    /// One instruction on the unfused path (`kernels::record`, or the compiler's own
    /// handling of memory instructions).
    Single(usize),
    /// A group sharing one activation quantization.
    Quant(QuantGroup),
    /// [`Pattern::RopeKvWrite`]: the four instructions from `first`.
    RopeKv { first: usize, write_k: bool },
    /// [`Pattern::ArgmaxPartials`]: the LINEAR at `first`, then its ARGMAX.
    HeadArgmax { first: usize, write_out: bool },
    /// LINEARs of one `x` and an epilogue.
    Linear(LinearGroup),
}

/// The fusion plan of a program: units covering every instruction once, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    pub units: Vec<Unit>,
}

impl Plan {
    /// Every instruction on its own (fusion off).
    pub fn unfused(len: usize) -> Plan {
        Plan { units: (0..len).map(Unit::Single).collect() }
    }

    /// The patterns applied, one entry per group and pattern, in program order.
    #[cfg(test)]
    pub fn patterns(&self) -> Vec<Pattern> {
        self.units
            .iter()
            .flat_map(|u| match u {
                Unit::Quant(g) => g.patterns(),
                Unit::RopeKv { .. } => vec![Pattern::RopeKvWrite],
                Unit::HeadArgmax { .. } => vec![Pattern::ArgmaxPartials],
                Unit::Linear(g) => g.patterns(),
                Unit::Single(_) => vec![],
            })
            .collect()
    }
}

/// What the pass needs to know about the device and the tensors.
pub(crate) struct Limits {
    /// `max_storage_buffers_per_shader_stage`.
    pub max_storage_buffers: u32,
}

/// Storage buffers the residual-add BITLINEAR product binds (bindings 2..=9).
const ADD_STORAGE_BUFFERS: u32 = 8;
/// Storage buffers the residual-add LINEAR product binds (bindings 1..=4, 8, 9).
const LINEAR_ADD_STORAGE_BUFFERS: u32 = 6;

/// Plans the fusion of `instructions` (see the module docs).
pub(crate) fn plan(ctx: &RecordCtx, limits: &Limits, instructions: &[Instruction]) -> Plan {
    let mut units = Vec::new();
    let mut i = 0;
    while i < instructions.len() {
        if let Some(write_k) = rope_kv_at(ctx, instructions, i) {
            units.push(Unit::RopeKv { first: i, write_k });
            i += 4;
            continue;
        }
        if let Some(write_out) = head_argmax_at(ctx, instructions, i) {
            units.push(Unit::HeadArgmax { first: i, write_out });
            i += 2;
            continue;
        }
        if let Some(g) = group_at(ctx, limits, instructions, i) {
            i = g.range().end;
            units.push(Unit::Quant(g));
        } else if let Some(g) = linear_group_at(ctx, limits, instructions, i) {
            i = g.range().end;
            units.push(Unit::Linear(g));
        } else {
            units.push(Unit::Single(i));
            i += 1;
        }
    }
    Plan { units }
}

/// The dispatch of a [`Pattern::RopeKvWrite`] unit.
pub(crate) fn record_rope_kv(
    ctx: &RecordCtx,
    instructions: &[Instruction],
    first: usize,
    write_k: bool,
) -> Result<Vec<KernelCall>, GpuError> {
    match instructions.get(first..first + 4) {
        Some([Instruction::Rope(rq), Instruction::Rope(rk), Instruction::KvWrite(kk), Instruction::KvWrite(kv)]) => {
            Ok(vec![rope_kv::record(ctx, (rq, rk), (kk, kv), write_k)?])
        }
        _ => Err(GpuError::Wgpu(format!("fusion plan: instructions {first}.. are not ROPE, ROPE, KV_WRITE, KV_WRITE"))),
    }
}

/// The kernel calls of a [`Unit::Linear`] group: the fused norm and rounding, or the first
/// product's rounding of `x` to int8 blocks for all (when they ask for it); the products in
/// order (or merged into one dispatch), the last with the epilogue.
pub(crate) fn record_linear(
    ctx: &RecordCtx,
    instructions: &[Instruction],
    g: &LinearGroup,
) -> Result<Vec<KernelCall>, GpuError> {
    let linear_at = |i: usize| match instructions.get(i) {
        Some(Instruction::Linear(l)) => Ok(l),
        _ => Err(GpuError::Wgpu(format!("fusion plan: instruction {i} is not a LINEAR"))),
    };
    let mut calls = Vec::new();
    let mut xhat = false;
    let ls: Vec<&Linear> = g.linears.iter().map(|&i| linear_at(i)).collect::<Result<_, _>>()?;
    for l in &ls {
        xhat |= linear::reads_xhat(ctx, l);
    }
    let head = is_head(g);
    let paired = g.merged && g.tail.is_some();
    // The group's rounding: the rounder's, the products' own, or the first product's.
    let rounding = match g.rounder {
        Some(Rounder::Norm(n)) => {
            let Some(Instruction::RmsNorm(norm)) = instructions.get(n.index) else {
                return Err(GpuError::Wgpu(format!("fusion plan: instruction {} is not an RMS_NORM", n.index)));
            };
            if norm_in_products(ctx, instructions, g) {
                linear::Rounding::InProduct { norm: Some(linear::ProductNorm::of(norm)) }
            } else if g.int8 {
                calls.extend(norm_quant::record(ctx, norm, norm_quant::Rounding::Blocks { xhat }, n.write_out)?);
                linear::Rounding::Done
            } else {
                // linear_group_at groups a norm before f32 activations only when the products apply it.
                return Err(GpuError::Wgpu(format!("fusion plan: RMS_NORM {} has no products to apply it", n.index)));
            }
        }
        Some(Rounder::Attention(i)) => {
            let Some(Instruction::Attention(a)) = instructions.get(i) else {
                return Err(GpuError::Wgpu(format!("fusion plan: instruction {i} is not an ATTENTION")));
            };
            calls.extend(attention::record_with(ctx, a, Some(xhat))?);
            linear::Rounding::Done
        }
        None if !head && linear::rounds_in_product(ctx, &ls, None, paired) => {
            linear::Rounding::InProduct { norm: None }
        }
        None => linear::Rounding::Here { xhat },
    };
    if g.merged {
        match (g.linears.as_slice(), g.tail.map(|t| t.epilogue)) {
            (&[_, _, _], None) => {
                let rope = g.rope.map(|r| rope_epilogue(instructions, &r)).transpose()?;
                calls.extend(linear::multi_product(ctx, [ls[0], ls[1], ls[2]], rounding, rope.as_ref())?);
            }
            (&[_, _], Some(Epilogue::ActMul { op, write_out, .. })) => {
                calls.extend(linear::gated_product(ctx, (ls[0], ls[1]), op, rounding, write_out)?);
            }
            _ => return Err(GpuError::Wgpu("fusion plan: a merged group of an unknown shape".to_string())),
        }
        return Ok(calls);
    }
    for (j, l) in ls.iter().enumerate() {
        let epilogue = if j + 1 == ls.len() { g.tail.map(|a| a.epilogue) } else { None };
        // The first product's rounding serves the others; products rounding in place each
        // round their own.
        let rounding = match rounding {
            linear::Rounding::InProduct { .. } => rounding,
            _ if j == 0 => rounding,
            _ => linear::Rounding::Done,
        };
        calls.extend(linear::record_with(ctx, l, rounding, epilogue)?);
    }
    Ok(calls)
}

/// Whether group `g` ends with the LM head's ARGMAX.
fn is_head(g: &LinearGroup) -> bool {
    matches!(g.tail, Some(TailPart { epilogue: Epilogue::Argmax { .. }, .. }))
}

/// Whether the products of group `g` apply its RMS_NORM themselves, the norm without a
/// dispatch of its own ([`linear::Rounding::InProduct`]): its output unread but by them,
/// its input unwritten by the group (the products read it while the group's kernels write
/// their outputs), not before the LM head's ARGMAX (a workgroup per vocabulary row would
/// repeat it that often), and [`linear::rounds_in_product`].
fn norm_in_products(ctx: &RecordCtx, instructions: &[Instruction], g: &LinearGroup) -> bool {
    let Some(Rounder::Norm(n)) = g.rounder else { return false };
    let (Some(Instruction::RmsNorm(norm)), Some(ls)) =
        (instructions.get(n.index), linears_at(instructions, &g.linears))
    else {
        return false;
    };
    let input_kept =
        instructions.get(n.index + 1..g.range().end).is_some_and(|is| !is.iter().any(|i| writes(i, norm.x)));
    !n.write_out
        && !is_head(g)
        && input_kept
        && linear::rounds_in_product(ctx, &ls, Some(norm), g.merged && g.tail.is_some())
}

/// The LINEAR group starting at instruction `i`, if one does and fuses anything.
fn linear_group_at(ctx: &RecordCtx, limits: &Limits, instructions: &[Instruction], i: usize) -> Option<LinearGroup> {
    // The instruction at i that rounds x for the products, if it is not the first product.
    enum Before<'a> {
        Norm(&'a RmsNorm),
        Attention,
    }
    let before = match instructions.get(i)? {
        Instruction::RmsNorm(n) => match instructions.get(i + 1) {
            Some(Instruction::Linear(l))
                if l.x == n.out && (block_norm_fusable(ctx, n, l) || l.activations == LinearActivations::F32) =>
            {
                Some(Before::Norm(n))
            }
            _ => return None,
        },
        Instruction::Attention(a) => match instructions.get(i + 1) {
            Some(Instruction::Linear(l)) if l.x == a.out && attention_rounding_fusable(ctx, a, l) => {
                Some(Before::Attention)
            }
            _ => return None,
        },
        Instruction::Linear(_) => None,
        _ => return None,
    };
    let first = if before.is_some() { i + 1 } else { i };
    let Some(Instruction::Linear(l0)) = instructions.get(first) else { return None };
    let mut linears = vec![first];
    let mut j = first + 1;
    while let Some(Instruction::Linear(l)) = instructions.get(j) {
        if l.x != l0.x || l.activations != l0.activations {
            break;
        }
        linears.push(j);
        j += 1;
    }
    let last = j - 1;
    let Some(Instruction::Linear(ll)) = instructions.get(last) else { return None };
    let product = Product::of_linear(ll);
    let mut tail = tail_of(ctx, limits, instructions, last, &product);
    if matches!(before, Some(Before::Norm(_))) && linears.len() == 1 && tail.is_none() {
        // The final norm before the LM head and ARGMAX: the head keeps its ARGMAX pass.
        if let (Some(write_out), Some(Instruction::Argmax(a))) =
            (head_argmax_at(ctx, instructions, first), instructions.get(first + 1))
        {
            tail = Some(TailPart { last: first + 1, epilogue: Epilogue::Argmax { ids: a.out, write_out } });
        }
    }
    let int8 = l0.activations == LinearActivations::Int8Blocks;
    let rounder = before.map(|b| match b {
        Before::Norm(n) => {
            Rounder::Norm(NormPart { index: i, write_out: !write_is_dead(instructions, i, n.out, &linears) })
        }
        Before::Attention => Rounder::Attention(i),
    });
    let merged = linears_mergeable(ctx, limits, instructions, &linears, tail);
    let rope = if merged && tail.is_none() {
        let ls = linears_at(instructions, &linears)?;
        let outs: Vec<TensorId> = ls.iter().map(|l| l.out).collect();
        let inputs: Vec<TensorId> = ls.iter().flat_map(|l| [l.x, l.weight]).collect();
        rope_epilogue_at(ctx, limits, instructions, last, (&outs, &inputs), linear::MULTI_STORAGE_BUFFERS)
    } else {
        None
    };
    let g = LinearGroup { rounder, linears, tail, int8, merged, rope };
    // Before f32 activations a norm joins only products that apply it
    // (Pattern::NormInProduct); otherwise it keeps its own dispatch, and the products may
    // form a group from i + 1.
    if !int8 && matches!(g.rounder, Some(Rounder::Norm(_))) && !norm_in_products(ctx, instructions, &g) {
        return None;
    }
    (!g.patterns().is_empty()).then_some(g)
}

/// Whether RMS_NORM `n` can be fused with the int8-block rounding of LINEAR `l`, which reads
/// its output: `l` asks for int8 blocks, rows of `l`'s length that `norm_quant_blocks`
/// holds, and every operand in one binding.
fn block_norm_fusable(ctx: &RecordCtx, n: &RmsNorm, l: &Linear) -> bool {
    let (Ok(d), Ok(w)) = (ctx.desc(n.x), ctx.desc(l.weight)) else { return false };
    let (rows, cols) = (d.shape.rows(), d.shape.cols());
    l.activations == LinearActivations::Int8Blocks
        && rows > 0
        && cols > 0
        && cols == w.shape.cols()
        && cols <= norm_quant::MAX_BLOCK_ROW
        && rows.checked_mul(cols).is_some_and(|e| u32::try_from(e).is_ok())
        && fits(ctx, n.x)
        && fits(ctx, n.out)
        && fits(ctx, n.weight)
}

/// Whether ATTENTION `a`'s merge can round its output for LINEAR `l`, which reads it
/// ([`Pattern::AttentionRounding`]): `l` asks for int8 blocks, the attention's positions
/// are split and its heads hold whole blocks, `l`'s weight rows are as long as the
/// output's (the scratch buffer's shape), and the output's elements are indexed in u32.
fn attention_rounding_fusable(ctx: &RecordCtx, a: &Attention, l: &Linear) -> bool {
    let (Ok(o), Ok(w)) = (ctx.desc(a.out), ctx.desc(l.weight)) else { return false };
    l.activations == LinearActivations::Int8Blocks
        && o.shape.cols() == w.shape.cols()
        && o.shape.rows().checked_mul(o.shape.cols()).is_some_and(|e| u32::try_from(e).is_ok())
        && attention::rounds_blocks(ctx, a)
        && fits(ctx, a.out)
}

/// Whether the one-token products of LINEARs `linears` (with `tail`) can run as one
/// `linear_multi.wgsl` dispatch ([`Pattern::MultiProduct`], [`Pattern::GatedPair`]).
fn linears_mergeable(
    ctx: &RecordCtx,
    limits: &Limits,
    instructions: &[Instruction],
    linears: &[usize],
    tail: Option<TailPart>,
) -> bool {
    let Some(ls) = linears_at(instructions, linears) else {
        return false;
    };
    match (ls.as_slice(), tail.map(|t| t.epilogue)) {
        ([a, b, c], None) => {
            let outs = [a.out, b.out, c.out];
            let inputs = [a.x, a.weight, b.weight, c.weight];
            let distinct = outs[0] != outs[1] && outs[0] != outs[2] && outs[1] != outs[2];
            distinct
                && !outs.iter().any(|o| inputs.contains(o))
                && limits.max_storage_buffers >= linear::MULTI_STORAGE_BUFFERS
                && linear::mergeable(ctx, &ls, false)
        }
        ([g, _], Some(Epilogue::ActMul { gated, .. })) => {
            gated == g.out
                && limits.max_storage_buffers >= linear::GATED_STORAGE_BUFFERS
                && linear::mergeable(ctx, &ls, true)
        }
        _ => false,
    }
}

/// The epilogue absorbed after the product at `last` (BITLINEAR or LINEAR), when the
/// instructions right after it are a residual add or an activation and a multiply that
/// the product kernel can apply.
fn tail_of(
    ctx: &RecordCtx,
    limits: &Limits,
    instructions: &[Instruction],
    last: usize,
    product: &Product,
) -> Option<TailPart> {
    let j = last + 1;
    match (instructions.get(j), instructions.get(j + 1)) {
        (Some(Instruction::TensorAdd(a)), _) => epilogue_of(ctx, limits, product, a).map(|residual| TailPart {
            last: j,
            epilogue: Epilogue::Add {
                residual,
                sum: a.out,
                write_out: !write_is_dead(instructions, last, product.out, &[j]),
            },
        }),
        (Some(act), Some(Instruction::ElementMul(mul))) => {
            act_mul_of(ctx, product, act, mul).map(|(gated, op)| TailPart {
                last: j + 1,
                epilogue: Epilogue::ActMul {
                    gated,
                    op,
                    write_out: !write_is_dead(instructions, last, product.out, &[j + 1]),
                },
            })
        }
        _ => None,
    }
}

/// What the epilogue preconditions look at in a product (BITLINEAR or LINEAR).
struct Product {
    out: TensorId,
    /// Tensors the product kernel binds read-only (an epilogue's output must be none).
    read_only: Vec<TensorId>,
    /// Storage buffers the product binds with the residual add.
    add_storage_buffers: u32,
}

impl Product {
    fn of_bitlinear(b: &BitLinear) -> Product {
        Product {
            out: b.out,
            read_only: [b.weight].into_iter().chain(b.scale).collect(),
            add_storage_buffers: ADD_STORAGE_BUFFERS,
        }
    }

    fn of_linear(l: &Linear) -> Product {
        // x (binding 1: with int8 blocks the scratch buffer, but x is read by the rounding).
        Product { out: l.out, read_only: vec![l.weight, l.x], add_storage_buffers: LINEAR_ADD_STORAGE_BUFFERS }
    }
}

/// The dispatches of a [`Pattern::ArgmaxPartials`] unit.
pub(crate) fn record_head_argmax(
    ctx: &RecordCtx,
    instructions: &[Instruction],
    first: usize,
    write_out: bool,
) -> Result<Vec<KernelCall>, GpuError> {
    match instructions.get(first..first + 2) {
        Some([Instruction::Linear(l), Instruction::Argmax(a)]) => {
            let rounding = linear::Rounding::Here { xhat: linear::reads_xhat(ctx, l) };
            linear::record_with(ctx, l, rounding, Some(Epilogue::Argmax { ids: a.out, write_out }))
        }
        _ => Err(GpuError::Wgpu(format!("fusion plan: instructions {first}.. are not LINEAR, ARGMAX"))),
    }
}

/// `Some(write_out)` when a [`Pattern::ArgmaxPartials`] starts at instruction `i`.
fn head_argmax_at(ctx: &RecordCtx, instructions: &[Instruction], i: usize) -> Option<bool> {
    let [Instruction::Linear(l), Instruction::Argmax(a)] = instructions.get(i..i + 2)? else { return None };
    let ok = a.x == l.out && l.x != l.out && tokens(ctx, l) == Some(1) && fits(ctx, l.out);
    ok.then(|| !write_is_dead(instructions, i, l.out, &[i + 1]))
}

/// The tokens (rows of the output) of a LINEAR, `None` when it has no output.
fn tokens(ctx: &RecordCtx, l: &Linear) -> Option<usize> {
    let m = ctx.desc(l.weight).ok()?.shape.rows();
    ctx.desc(l.out).ok()?.shape.numel().checked_div(m)
}

/// `Some(write_k)` when a [`Pattern::RopeKvWrite`] starts at instruction `i`.
fn rope_kv_at(ctx: &RecordCtx, instructions: &[Instruction], i: usize) -> Option<bool> {
    let [Instruction::Rope(rq), Instruction::Rope(rk), Instruction::KvWrite(kk), Instruction::KvWrite(kv)] =
        instructions.get(i..i + 4)?
    else {
        return None;
    };
    let (q, k, v, kc, vc) = (rq.out, rk.out, kv.src, kk.cache, kv.cache);
    let same_rope = rq.head_dim == rk.head_dim
        && rq.rot_dim == rk.rot_dim
        && rq.rot_dim == rq.head_dim
        && rq.style == rk.style
        && rq.base == rk.base
        && rq.pos == rk.pos
        && rq.pos.consecutive().is_some();
    let in_place = rq.x == q && rk.x == k;
    let writes = kk.src == k && kk.rows.consecutive() == rq.pos.consecutive() && kv.rows == kk.rows;
    let ids = [q, k, v, kc, vc];
    let distinct = ids.iter().enumerate().all(|(a, x)| ids[a + 1..].iter().all(|y| y != x));
    let rows = |id| ctx.desc(id).ok().map(|d| d.shape.rows());
    let same_rows = rows(q).is_some() && rows(q) == rows(k) && rows(q) == rows(v);
    // F32 or F16 caches (rounded into as KV_WRITE rounds), each in one binding.
    let cache_fits = |c: TensorId| {
        ctx.desc(c).is_ok_and(|d| {
            let size = match d.dtype {
                DType::F32 => 4,
                DType::F16 => 2,
                _ => return false,
            };
            d.shape.numel() as u64 * size <= ctx.max_binding
        })
    };
    let ok = same_rope
        && in_place
        && writes
        && distinct
        && same_rows
        && rq.head_dim > 0
        && [q, k, v].iter().all(|&t| fits(ctx, t))
        && [kc, vc].into_iter().all(cache_fits);
    ok.then(|| !write_is_dead(instructions, i + 1, k, &[i + 2]))
}

/// The [`Pattern::RopeEpilogue`] after merged products, the last at `last_product`, that
/// wrote `outs` (q, k, v) from `inputs` (bound read-only): when RopeKvWrite's four
/// instructions on them follow, the caches are none of `inputs`, and the device binds
/// `product_buffers` + 3 storage buffers per stage.
fn rope_epilogue_at(
    ctx: &RecordCtx,
    limits: &Limits,
    instructions: &[Instruction],
    last_product: usize,
    (outs, inputs): (&[TensorId], &[TensorId]),
    product_buffers: u32,
) -> Option<RopePart> {
    let first = last_product + 1;
    let write_k = rope_kv_at(ctx, instructions, first)?;
    let [Instruction::Rope(rq), Instruction::Rope(rk), Instruction::KvWrite(kk), Instruction::KvWrite(kv)] =
        instructions.get(first..first + 4)?
    else {
        return None;
    };
    let ok = outs == [rq.out, rk.out, kv.src]
        && !inputs.contains(&kk.cache)
        && !inputs.contains(&kv.cache)
        && limits.max_storage_buffers >= product_buffers + rope_qkv::STORAGE_BUFFERS;
    let write_v = !write_is_dead(instructions, last_product, kv.src, &[first + 3]);
    let f16 = |c| ctx.desc(c).is_ok_and(|d| d.dtype == DType::F16);
    ok.then_some(RopePart { first, write_k, write_v, k_f16: f16(kk.cache), v_f16: f16(kv.cache) })
}

/// The ROPE epilogue of a group's products, as the dispatchers take it.
fn rope_epilogue<'a>(instructions: &'a [Instruction], r: &RopePart) -> Result<RopeEpilogue<'a>, GpuError> {
    match instructions.get(r.first..r.first + 4) {
        Some(
            [Instruction::Rope(rope_q), Instruction::Rope(_), Instruction::KvWrite(cache_k), Instruction::KvWrite(cache_v)],
        ) => Ok(RopeEpilogue {
            rope_q,
            cache_k,
            cache_v,
            write_k: r.write_k,
            write_v: r.write_v,
            k_f16: r.k_f16,
            v_f16: r.v_f16,
        }),
        _ => Err(GpuError::Wgpu(format!(
            "fusion plan: instructions {}.. are not ROPE, ROPE, KV_WRITE, KV_WRITE",
            r.first
        ))),
    }
}

/// The kernel calls of a fused group.
pub(crate) fn record(
    ctx: &RecordCtx,
    instructions: &[Instruction],
    g: &QuantGroup,
) -> Result<Vec<KernelCall>, GpuError> {
    let bitlinear_at = |i: usize| match instructions.get(i) {
        Some(Instruction::BitLinear(b)) => Ok(b),
        _ => Err(GpuError::Wgpu(format!("fusion plan: instruction {i} is not a BITLINEAR"))),
    };
    let mut calls = Vec::new();
    match g.norm {
        Some(n) => {
            let Some(Instruction::RmsNorm(norm)) = instructions.get(n.index) else {
                return Err(GpuError::Wgpu(format!("fusion plan: instruction {} is not an RMS_NORM", n.index)));
            };
            calls.extend(norm_quant::record(ctx, norm, norm_quant::Rounding::Rows, n.write_out)?);
        }
        None => calls.extend(bitlinear::quantize(ctx, bitlinear_at(g.linears[0])?)?),
    }
    if g.merged {
        match (g.linears.as_slice(), g.tail.map(|t| t.epilogue)) {
            (&[a, b, c], None) => {
                let rope = g.rope.map(|r| rope_epilogue(instructions, &r)).transpose()?;
                let bs = [bitlinear_at(a)?, bitlinear_at(b)?, bitlinear_at(c)?];
                calls.extend(bitlinear::multi_product(ctx, bs, rope.as_ref())?);
            }
            (&[a, b], Some(Epilogue::ActMul { op, write_out, .. })) => {
                calls.extend(bitlinear::gated_product(ctx, (bitlinear_at(a)?, bitlinear_at(b)?), op, write_out)?);
            }
            _ => return Err(GpuError::Wgpu("fusion plan: a merged group of an unknown shape".to_string())),
        }
        return Ok(calls);
    }
    for (j, &li) in g.linears.iter().enumerate() {
        let epilogue = if j + 1 == g.linears.len() { g.tail.map(|a| a.epilogue) } else { None };
        calls.extend(bitlinear::product(ctx, bitlinear_at(li)?, epilogue)?);
    }
    Ok(calls)
}

/// The tensor an instruction fully overwrites or frees, if any.
fn killed(i: &Instruction) -> Option<TensorId> {
    match i {
        Instruction::GridAlloc(a) => Some(a.tensor),
        Instruction::GridWrite(w) => Some(w.tensor),
        Instruction::Free(f) => Some(f.tensor),
        Instruction::Sync | Instruction::KvWrite(_) => None,
        Instruction::Embed(o) => Some(o.out),
        Instruction::RmsNorm(o) => Some(o.out),
        Instruction::Linear(o) => Some(o.out),
        Instruction::BitLinear(o) => Some(o.out),
        Instruction::TensorAdd(o) | Instruction::ElementMul(o) => Some(o.out),
        Instruction::Silu(o) | Instruction::Relu2(o) | Instruction::Gelu(o) => Some(o.out),
        Instruction::Softmax(o) => Some(o.out),
        Instruction::Rope(o) => Some(o.out),
        Instruction::Attention(o) => Some(o.out),
        Instruction::Argmax(o) => Some(o.out),
        Instruction::TopK(_) => None, // two outputs: claiming neither keeps every store
    }
}

/// Whether an instruction reads `t` (in-place instructions read their output; KV_WRITE is
/// taken to read its cache, which it writes only in part).
/// Whether instruction `i` writes tensor `t` (or FREEs it): operands() lists the output
/// first (a KV_WRITE's cache); TOP_K has two or three.
fn writes(i: &Instruction, t: TensorId) -> bool {
    match i {
        Instruction::TopK(k) => k.values == t || k.ids == t || k.lse == Some(t),
        other => other.operands().first() == Some(&t),
    }
}

fn reads(i: &Instruction, t: TensorId) -> bool {
    match i {
        Instruction::GridAlloc(_) | Instruction::GridWrite(_) | Instruction::Free(_) | Instruction::Sync => false,
        Instruction::KvWrite(k) => k.cache == t || k.src == t || k.rows.tensors().contains(&t),
        other => {
            let ops = other.operands();
            // operands() lists the output first, then the inputs.
            ops.iter().skip(1).any(|&id| id == t)
        }
    }
}

/// The dead-store rule (module docs): whether the write of `t` by instruction `at` is dead,
/// the reads of `t` by the instructions in `served` being served from registers.
pub(crate) fn write_is_dead(instructions: &[Instruction], at: usize, t: TensorId, served: &[usize]) -> bool {
    for (j, i) in instructions.iter().enumerate().skip(at + 1) {
        if !served.contains(&j) && reads(i, t) {
            return false;
        }
        if killed(i) == Some(t) {
            return true;
        }
    }
    false
}

/// The bytes of an F32 tensor, or `None` when it is not one.
fn f32_bytes(ctx: &RecordCtx, id: TensorId) -> Option<u64> {
    let d = ctx.desc(id).ok()?;
    (d.dtype == DType::F32).then(|| d.shape.numel() as u64 * 4)
}

/// Whether the F32 tensor fits one binding (windowed tensors are not fused).
fn fits(ctx: &RecordCtx, id: TensorId) -> bool {
    f32_bytes(ctx, id).is_some_and(|b| b <= ctx.max_binding)
}

/// Whether RMS_NORM `n` can be fused with the quantization of its output.
fn norm_fusable(ctx: &RecordCtx, n: &RmsNorm) -> bool {
    let Ok(d) = ctx.desc(n.x) else { return false };
    let (rows, cols) = (d.shape.rows(), d.shape.cols());
    rows > 0
        && cols > 0
        && cols.is_multiple_of(4)
        && rows.checked_mul(cols).is_some_and(|e| u32::try_from(e).is_ok())
        && fits(ctx, n.x)
        && fits(ctx, n.out)
        && fits(ctx, n.weight)
}

/// The residual operand of `add` when it can be the epilogue of product `p`.
fn epilogue_of(ctx: &RecordCtx, limits: &Limits, p: &Product, add: &Binary) -> Option<TensorId> {
    if limits.max_storage_buffers < p.add_storage_buffers {
        return None;
    }
    let r = match (add.a == p.out, add.b == p.out) {
        (true, false) => add.b,
        (false, true) => add.a,
        _ => return None,
    };
    let ok =
        add.out != p.out && !p.read_only.contains(&add.out) && fits(ctx, r) && fits(ctx, add.out) && fits(ctx, p.out);
    ok.then_some(r)
}

/// The gate tensor and the activation when `act` then `mul` can be the epilogue of product
/// `p` (pattern [`Pattern::ActMulEpilogue`]).
fn act_mul_of(ctx: &RecordCtx, p: &Product, act: &Instruction, mul: &Binary) -> Option<(TensorId, UnaryOp)> {
    let (op, a) = match act {
        Instruction::Silu(a) => (UnaryOp::Silu, a),
        Instruction::Relu2(a) => (UnaryOp::Relu2, a),
        Instruction::Gelu(a) => (UnaryOp::Gelu, a),
        _ => return None,
    };
    let g = a.out;
    let operands_ok = a.x == g && mul.out == g && ((mul.a == g && mul.b == p.out) || (mul.a == p.out && mul.b == g));
    let ok = operands_ok && g != p.out && !p.read_only.contains(&g) && fits(ctx, g) && fits(ctx, p.out);
    ok.then_some((g, op))
}

/// The LINEARs at `indices`, or `None` when one is not a LINEAR.
fn linears_at<'a>(instructions: &'a [Instruction], indices: &[usize]) -> Option<Vec<&'a Linear>> {
    all_of(instructions, indices, |i| match i {
        Instruction::Linear(l) => Some(l),
        _ => None,
    })
}

/// The instructions at `indices` as `pick` sees them; `None` when one is not of that kind.
fn all_of<'a, T>(
    instructions: &'a [Instruction],
    indices: &[usize],
    pick: impl Fn(&'a Instruction) -> Option<&'a T>,
) -> Option<Vec<&'a T>> {
    indices.iter().map(|&i| instructions.get(i).and_then(&pick)).collect()
}

/// Whether the BITLINEAR products of `linears` (with `tail`) can run as one dispatch
/// ([`Pattern::MultiProduct`], [`Pattern::GatedPair`]).
fn bitlinears_mergeable(
    ctx: &RecordCtx,
    limits: &Limits,
    instructions: &[Instruction],
    linears: &[usize],
    tail: Option<TailPart>,
) -> bool {
    let Some(bs) = all_of(instructions, linears, |i| match i {
        Instruction::BitLinear(b) => Some(b),
        _ => None,
    }) else {
        return false;
    };
    let Some(first) = bs.first() else { return false };
    let dtype = |b: &BitLinear| ctx.desc(b.weight).ok().map(|d| d.dtype);
    let tokens = |b: &BitLinear| {
        let m = ctx.desc(b.weight).ok()?.shape.rows();
        ctx.desc(b.out).ok()?.shape.numel().checked_div(m)
    };
    let alike = bs.iter().all(|b| dtype(b).is_some() && dtype(b) == dtype(first) && tokens(b) == Some(1))
        && (bs.iter().all(|b| b.scale.is_some()) || bs.iter().all(|b| b.scale.is_none()));
    if !alike {
        return false;
    }
    match (bs.len(), tail.map(|t| t.epilogue)) {
        (3, None) => {
            let outs: Vec<TensorId> = bs.iter().map(|b| b.out).collect();
            let inputs: Vec<TensorId> = bs.iter().flat_map(|b| [b.weight].into_iter().chain(b.scale)).collect();
            let distinct = outs[0] != outs[1] && outs[0] != outs[2] && outs[1] != outs[2];
            distinct
                && !outs.iter().any(|o| inputs.contains(o))
                && limits.max_storage_buffers >= bitlinear::MULTI_STORAGE_BUFFERS
        }
        (2, Some(Epilogue::ActMul { gated, .. })) => {
            gated == bs[0].out && limits.max_storage_buffers >= bitlinear::GATED_STORAGE_BUFFERS
        }
        _ => false,
    }
}

/// The fused group starting at instruction `i`, if one does and fuses anything.
fn group_at(ctx: &RecordCtx, limits: &Limits, instructions: &[Instruction], i: usize) -> Option<QuantGroup> {
    let (norm, first) = match instructions.get(i)? {
        Instruction::RmsNorm(n) if norm_fusable(ctx, n) => match instructions.get(i + 1) {
            Some(Instruction::BitLinear(b)) if b.x == n.out => (Some((i, n)), i + 1),
            _ => return None,
        },
        Instruction::BitLinear(_) => (None, i),
        _ => return None,
    };
    let Some(Instruction::BitLinear(b0)) = instructions.get(first) else { return None };
    let x = b0.x;
    let mut linears = vec![first];
    let mut j = first + 1;
    while let Some(Instruction::BitLinear(b)) = instructions.get(j) {
        if b.x != x {
            break;
        }
        linears.push(j);
        j += 1;
    }
    let last = linears[linears.len() - 1];
    let Some(Instruction::BitLinear(bl)) = instructions.get(last) else { return None };
    let product = Product::of_bitlinear(bl);
    let tail = tail_of(ctx, limits, instructions, last, &product);
    let norm =
        norm.map(|(index, n)| NormPart { index, write_out: !write_is_dead(instructions, index, n.out, &linears) });
    let merged = bitlinears_mergeable(ctx, limits, instructions, &linears, tail);
    let rope = if merged && tail.is_none() {
        let bs = all_of(instructions, &linears, |i| match i {
            Instruction::BitLinear(b) => Some(b),
            _ => None,
        })?;
        let outs: Vec<TensorId> = bs.iter().map(|b| b.out).collect();
        let inputs: Vec<TensorId> = bs.iter().flat_map(|b| [b.x, b.weight].into_iter().chain(b.scale)).collect();
        let buffers = bitlinear::multi_rope_storage_buffers(bs[0].scale.is_some());
        rope_epilogue_at(ctx, limits, instructions, last, (&outs, &inputs), buffers)
    } else {
        None
    };
    let g = QuantGroup { norm, linears, tail, merged, rope };
    (!g.patterns().is_empty()).then_some(g)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::Capabilities;
    use purebee_isa::{Program, ProgramBuilder};
    use purebee_memory::Registry;

    fn ctx(reg: &Registry) -> RecordCtx<'_> {
        RecordCtx { reg, caps: Capabilities::default(), max_workgroups: 65535, max_binding: 1 << 27 }
    }

    const LIMITS: Limits = Limits { max_storage_buffers: 8 };

    /// The ternary block runtime/src/forward.rs writes (without the attention part's
    /// ROPE/KV_WRITE/ATTENTION, which the pass leaves alone: `att` stands in), repeated
    /// `blocks` times; returns the program and the registry.
    fn ternary_blocks(blocks: usize) -> (Program, Registry) {
        let mut reg = Registry::new();
        let (d, ff) = (128, 256);
        let t = DType::I2_S;
        let mut b = ProgramBuilder::new("block", &mut reg);
        let f = DType::F32;
        let x = b.declare("x", f, &[1, d]).expect("valid");
        let h = b.declare("h", f, &[1, d]).expect("valid");
        let q = b.declare("q", f, &[1, d]).expect("valid");
        let k = b.declare("k", f, &[1, d]).expect("valid");
        let v = b.declare("v", f, &[1, d]).expect("valid");
        let att = b.declare("att", f, &[1, d]).expect("valid");
        let proj = b.declare("proj", f, &[1, d]).expect("valid");
        let gate = b.declare("gate", f, &[1, ff]).expect("valid");
        let up = b.declare("up", f, &[1, ff]).expect("valid");
        let nw = b.declare("nw", f, &[d]).expect("valid");
        let fw = b.declare("fw", f, &[ff]).expect("valid");
        let wd = b.declare("wd", t, &[d, d]).expect("valid");
        let wu = b.declare("wu", t, &[ff, d]).expect("valid");
        let wdn = b.declare("wdn", t, &[d, ff]).expect("valid");
        for _ in 0..blocks {
            b.rms_norm(h, x, nw, 1e-5).expect("valid");
            b.bitlinear(q, h, wd, None).expect("valid");
            b.bitlinear(k, h, wd, None).expect("valid");
            b.bitlinear(v, h, wd, None).expect("valid");
            b.add(att, q, k).expect("valid"); // stands in for ROPE .. ATTENTION (reads q, k)
            b.rms_norm(att, att, nw, 1e-5).expect("valid");
            b.bitlinear(proj, att, wd, None).expect("valid");
            b.add(x, x, proj).expect("valid");
            b.rms_norm(h, x, nw, 1e-5).expect("valid");
            b.bitlinear(gate, h, wu, None).expect("valid");
            b.bitlinear(up, h, wu, None).expect("valid");
            b.relu2(gate, gate).expect("valid");
            b.mul(gate, gate, up).expect("valid");
            b.rms_norm(gate, gate, fw, 1e-5).expect("valid");
            b.bitlinear(proj, gate, wdn, None).expect("valid");
            b.add(x, x, proj).expect("valid");
        }
        (b.finish(), reg)
    }

    #[test]
    fn a_ternary_block_matches_every_pattern() {
        let (p, reg) = ternary_blocks(2);
        let plan = plan(&ctx(&reg), &LIMITS, p.instructions());
        use Pattern::*;
        // Per group: SharedQuantization, NormQuantization, then the epilogue.
        let mut want = Vec::new();
        for _ in 0..2 {
            want.extend([
                SharedQuantization,
                NormQuantization,
                NormQuantization,
                ResidualEpilogue,
                SharedQuantization,
                NormQuantization,
                ActMulEpilogue,
                NormQuantization,
                ResidualEpilogue,
            ]);
        }
        assert_eq!(plan.patterns(), want);
        // Units per block: 4 groups + ADD(att) = 5.
        assert_eq!(plan.units.len(), 10);
    }

    /// Two blocks of: q/k/v products of one token (BITLINEAR, or LINEAR with int8 blocks)
    /// after a norm, then ROPE q, ROPE k and the two KV_WRITEs, then an ATTENTION reading q
    /// and the caches; `cache_is_weight` writes k into the k weight's tensor instead of a
    /// cache (F32 LINEAR weights).
    fn qkv_rope(bitlinear: bool, cache_is_weight: bool) -> (Program, Registry) {
        use purebee_isa::ops::{Attention, Rope, RopeStyle};
        use purebee_isa::U32Arg;
        let mut reg = Registry::new();
        let mut b = ProgramBuilder::new("qkv", &mut reg);
        let f = DType::F32;
        // A weight of the caches' width when it stands in for the k cache.
        let (d, kvw) = if cache_is_weight { (128, 128) } else { (256, 128) };
        let x = b.declare("x", f, &[1, d]).expect("valid");
        let h = b.declare("h", f, &[1, d]).expect("valid");
        let nw = b.declare("nw", f, &[d]).expect("valid");
        let (q, k, v) = (b.declare("q", f, &[1, d]), b.declare("k", f, &[1, kvw]), b.declare("v", f, &[1, kvw]));
        let (q, k, v) = (q.expect("valid"), k.expect("valid"), v.expect("valid"));
        let wt = match (bitlinear, cache_is_weight) {
            (true, _) => DType::TQ2_0,
            (false, false) => DType::Q8_0,
            (false, true) => f,
        };
        let wq = b.declare("wq", wt, &[d, d]).expect("valid");
        let wk = b.declare("wk", wt, &[kvw, d]).expect("valid");
        let wv = b.declare("wv", wt, &[kvw, d]).expect("valid");
        let kc = if cache_is_weight { wk } else { b.declare("kc", f, &[8, kvw]).expect("valid") };
        let n_ctx = if cache_is_weight { kvw } else { 8 };
        let vc = b.declare("vc", f, &[n_ctx, kvw]).expect("valid");
        let att = b.declare("att", f, &[1, d]).expect("valid");
        for _ in 0..2 {
            b.rms_norm(h, x, nw, 1e-5).expect("valid");
            for (out, w) in [(q, wq), (k, wk), (v, wv)] {
                if bitlinear {
                    b.bitlinear(out, h, w, None).expect("valid");
                } else {
                    b.linear_with(out, h, w, LinearActivations::Int8Blocks).expect("valid");
                }
            }
            let pos = U32Arg::Const(3);
            let rope = |t| Rope {
                out: t,
                x: t,
                head_dim: 64,
                rot_dim: 64,
                style: RopeStyle::Neox,
                base: 1e4f32.into(),
                pos: pos.into(),
            };
            b.rope(rope(q)).expect("valid");
            b.rope(rope(k)).expect("valid");
            b.kv_write(kc, k, pos).expect("valid");
            b.kv_write(vc, v, pos).expect("valid");
            b.attention(Attention { out: att, q, k_cache: kc, v_cache: vc, head_dim: 64, rows: pos.into() })
                .expect("valid");
        }
        (b.finish(), reg)
    }

    #[test]
    fn q_k_v_products_carry_rope_and_the_cache_writes() {
        use Pattern::*;
        for bitlinear in [true, false] {
            let (p, reg) = qkv_rope(bitlinear, false);
            let plan = |max_storage_buffers| plan(&ctx(&reg), &Limits { max_storage_buffers }, p.instructions());
            // norm, q, k, v, ROPE, ROPE, KV_WRITE, KV_WRITE in one group; ATTENTION alone.
            let fused = plan(32);
            let want = [SharedQuantization, NormQuantization, MultiProduct, RopeEpilogue];
            assert_eq!(fused.patterns(), [want, want].concat(), "bitlinear: {bitlinear}");
            assert_eq!(fused.units.len(), 4, "{:?}", fused.units);
            let rope = |u: &Unit| match u {
                Unit::Quant(g) => g.rope,
                Unit::Linear(g) => g.rope,
                other => panic!("{other:?}"),
            };
            // The first block's k and v are overwritten by the second block's products,
            // unread: only the caches get them. The second block's are the program's last
            // writes of k and v, kept.
            let part = |first, write| RopePart { first, write_k: write, write_v: write, k_f16: false, v_f16: false };
            assert_eq!(rope(&fused.units[0]), Some(part(4, false)));
            assert_eq!(rope(&fused.units[2]), Some(part(13, true)));
            // Too few storage buffers for the epilogue's three: the products stay merged and
            // the ROPE/KV_WRITE dispatch of its own follows.
            let products =
                if bitlinear { bitlinear::multi_rope_storage_buffers(false) } else { linear::MULTI_STORAGE_BUFFERS };
            let fewer = plan(products + rope_qkv::STORAGE_BUFFERS - 1);
            assert!(fewer.patterns().contains(&RopeKvWrite), "{:?}", fewer.patterns());
            assert!(!fewer.patterns().contains(&RopeEpilogue));
        }
        // A cache that is also a product's weight (bound read-only there) is not fused.
        let (p, reg) = qkv_rope(false, true);
        let plan = plan(&ctx(&reg), &Limits { max_storage_buffers: 32 }, p.instructions());
        assert!(plan.patterns().contains(&MultiProduct), "{:?}", plan.patterns());
        assert!(!plan.patterns().contains(&RopeEpilogue), "{:?}", plan.patterns());
    }

    #[test]
    fn rope_and_kv_writes_fuse_only_when_they_agree() {
        use purebee_isa::ops::{Rope, RopeStyle};
        use purebee_isa::U32Arg;
        let build_with = |rot_dim: u32, v_pos: u32, (k_dtype, v_dtype): (DType, DType)| {
            let mut reg = Registry::new();
            let mut b = ProgramBuilder::new("p", &mut reg);
            let f = DType::F32;
            let q = b.declare("q", f, &[2, 128]).expect("valid");
            let k = b.declare("k", f, &[2, 64]).expect("valid");
            let v = b.declare("v", f, &[2, 64]).expect("valid");
            let kc = b.declare("kc", k_dtype, &[8, 64]).expect("valid");
            let vc = b.declare("vc", v_dtype, &[8, 64]).expect("valid");
            let pos = U32Arg::Const(3);
            let rope = |t| Rope {
                out: t,
                x: t,
                head_dim: 32,
                rot_dim,
                style: RopeStyle::Neox,
                base: 1e4f32.into(),
                pos: pos.into(),
            };
            b.rope(rope(q)).expect("valid");
            b.rope(rope(k)).expect("valid");
            b.kv_write(kc, k, pos).expect("valid");
            b.kv_write(vc, v, U32Arg::Const(v_pos)).expect("valid");
            let p = b.finish();
            let plan = plan(&ctx(&reg), &LIMITS, p.instructions());
            plan
        };
        let build = |rot_dim, v_pos| build_with(rot_dim, v_pos, (DType::F32, DType::F32));
        // F16 caches (either or both) fuse too: the kernel rounds into them.
        for caches in [(DType::F16, DType::F32), (DType::F32, DType::F16), (DType::F16, DType::F16)] {
            assert_eq!(build_with(32, 3, caches).units, [Unit::RopeKv { first: 0, write_k: true }]);
        }
        // k is not written again in the program: the rotated k is its last write, kept.
        assert_eq!(build(32, 3).units, [Unit::RopeKv { first: 0, write_k: true }]);
        assert_eq!(build(32, 3).patterns(), [Pattern::RopeKvWrite]);
        // A rotary width below head_dim, or another position for v: unfused.
        assert_eq!(build(16, 3), Plan::unfused(4));
        assert_eq!(build(32, 4), Plan::unfused(4));
    }

    #[test]
    fn enough_storage_buffers_merge_the_products() {
        let (p, reg) = ternary_blocks(1);
        let plan = plan(&ctx(&reg), &Limits { max_storage_buffers: 14 }, p.instructions());
        use Pattern::*;
        let want = [
            SharedQuantization,
            NormQuantization,
            MultiProduct,
            NormQuantization,
            ResidualEpilogue,
            SharedQuantization,
            NormQuantization,
            ActMulEpilogue,
            GatedPair,
            NormQuantization,
            ResidualEpilogue,
        ];
        assert_eq!(plan.patterns(), want);
        // 11 storage buffers: the gated pair, not the three products.
        let plan = super::plan(&ctx(&reg), &Limits { max_storage_buffers: 11 }, p.instructions());
        assert!(plan.patterns().contains(&GatedPair) && !plan.patterns().contains(&MultiProduct));
    }

    #[test]
    fn gating_and_merging_need_their_preconditions() {
        use Pattern::*;
        // gate/up of `tokens` tokens, weight types (gate, up), an in-place activation or not.
        let build = |tokens: usize, (tg, tu): (DType, DType), in_place: bool| {
            let mut reg = Registry::new();
            let mut b = ProgramBuilder::new("p", &mut reg);
            let f = DType::F32;
            let h = b.declare("h", f, &[tokens, 256]).expect("valid");
            let g = b.declare("g", f, &[tokens, 256]).expect("valid");
            let g2 = b.declare("g2", f, &[tokens, 256]).expect("valid");
            let u = b.declare("u", f, &[tokens, 256]).expect("valid");
            let wg = b.declare("wg", tg, &[256, 256]).expect("valid");
            let wu = b.declare("wu", tu, &[256, 256]).expect("valid");
            b.bitlinear(g, h, wg, None).expect("valid");
            b.bitlinear(u, h, wu, None).expect("valid");
            b.silu(if in_place { g } else { g2 }, g).expect("valid");
            b.mul(g, u, g).expect("valid"); // the operands in the other order
            let p = b.finish();
            plan(&ctx(&reg), &Limits { max_storage_buffers: 32 }, p.instructions()).patterns()
        };
        let (tq, i2) = (DType::TQ2_0, DType::I2_S);
        assert_eq!(build(1, (tq, tq), true), [SharedQuantization, ActMulEpilogue, GatedPair]);
        // Two tokens (tiled products) or two weight types: the epilogue, not the pair.
        assert_eq!(build(2, (tq, tq), true), [SharedQuantization, ActMulEpilogue]);
        assert_eq!(build(1, (tq, i2), true), [SharedQuantization, ActMulEpilogue]);
        // An activation out of place: only the shared quantization.
        assert_eq!(build(1, (tq, tq), false), [SharedQuantization]);
    }

    #[test]
    fn dead_stores_follow_the_rule() {
        let (p, reg) = ternary_blocks(2);
        let plan = plan(&ctx(&reg), &LIMITS, p.instructions());
        let groups: Vec<&QuantGroup> = plan
            .units
            .iter()
            .filter_map(|u| match u {
                Unit::Quant(g) => Some(g),
                Unit::Single(_) | Unit::RopeKv { .. } | Unit::HeadArgmax { .. } | Unit::Linear(_) => None,
            })
            .collect();
        assert_eq!(groups.len(), 8);
        let norm_writes: Vec<bool> = groups.iter().map(|g| g.norm.is_some_and(|n| n.write_out)).collect();
        // Block 1: h dead (the FFN norm overwrites it), att dead (block 2's ADD(att) writes
        // it), h dead, gate dead (block 2's gate BITLINEAR). Block 2: h dead (FFN norm),
        // att kept (last write), h kept (last write), gate kept (last write).
        assert_eq!(norm_writes, [false, false, false, false, false, true, true, true]);
        let proj_writes: Vec<bool> = groups
            .iter()
            .filter_map(|g| match g.tail.map(|t| t.epilogue) {
                Some(Epilogue::Add { write_out, .. }) => Some(write_out),
                _ => None,
            })
            .collect();
        let up_writes: Vec<bool> = groups
            .iter()
            .filter_map(|g| match g.tail.map(|t| t.epilogue) {
                Some(Epilogue::ActMul { write_out, .. }) => Some(write_out),
                _ => None,
            })
            .collect();
        // up: overwritten by the next block's up BITLINEAR; kept in the last block.
        assert_eq!(up_writes, [false, true]);
        // proj: overwritten by the next BITLINEAR(proj) each time except the very last.
        assert_eq!(proj_writes, [false, false, false, true]);
    }

    #[test]
    fn a_read_between_keeps_the_write() {
        let mut reg = Registry::new();
        let mut b = ProgramBuilder::new("p", &mut reg);
        let f = DType::F32;
        let x = b.declare("x", f, &[2, 128]).expect("valid");
        let h = b.declare("h", f, &[2, 128]).expect("valid");
        let y = b.declare("y", f, &[2, 128]).expect("valid");
        let nw = b.declare("nw", f, &[128]).expect("valid");
        let w = b.declare("w", DType::I2_S, &[128, 128]).expect("valid");
        b.rms_norm(h, x, nw, 1e-5).expect("valid");
        b.bitlinear(y, h, w, None).expect("valid");
        b.relu2(y, h).expect("valid"); // reads h: its write is live
        b.rms_norm(h, x, nw, 1e-5).expect("valid");
        b.bitlinear(y, h, w, None).expect("valid");
        b.free(h).expect("valid"); // then h dies
        let p = b.finish();
        let plan = plan(&ctx(&reg), &LIMITS, p.instructions());
        let writes: Vec<bool> = plan
            .units
            .iter()
            .filter_map(|u| match u {
                Unit::Quant(g) => g.norm.map(|n| n.write_out),
                Unit::Single(_) | Unit::RopeKv { .. } | Unit::HeadArgmax { .. } | Unit::Linear(_) => None,
            })
            .collect();
        assert_eq!(writes, [true, false]);
        // The last write of a tensor is kept: y's, with nothing after it.
        assert!(!write_is_dead(p.instructions(), 4, y, &[]));
    }

    #[test]
    fn a_one_token_head_and_its_argmax_fuse() {
        // LINEAR of `tokens` tokens then ARGMAX; `overwrite`: the logits written again after.
        let build = |tokens: usize, overwrite: bool| {
            let mut reg = Registry::new();
            let mut b = ProgramBuilder::new("p", &mut reg);
            let f = DType::F32;
            let h = b.declare("h", f, &[tokens, 64]).expect("valid");
            let w = b.declare("w", DType::F16, &[300, 64]).expect("valid");
            let logits = b.declare("logits", f, &[tokens, 300]).expect("valid");
            let id = b.declare("id", DType::U32, &[tokens]).expect("valid");
            b.linear(logits, h, w).expect("valid");
            b.argmax(id, logits).expect("valid");
            if overwrite {
                b.linear(logits, h, w).expect("valid");
            }
            let p = b.finish();
            plan(&ctx(&reg), &LIMITS, p.instructions())
        };
        // The logits are the program's last write: kept.
        assert_eq!(build(1, false).units, [Unit::HeadArgmax { first: 0, write_out: true }]);
        assert_eq!(build(1, false).patterns(), [Pattern::ArgmaxPartials]);
        // Overwritten with no read between but the ARGMAX the kernel serves: dead.
        assert_eq!(build(1, true).units[0], Unit::HeadArgmax { first: 0, write_out: false });
        // Several tokens (the tiled kernel): unfused.
        assert_eq!(build(2, false), Plan::unfused(2));
    }

    #[test]
    fn a_float_block_matches_its_patterns() {
        use Pattern::*;
        // The block runtime/src/forward.rs writes for float or block-quantized weights (the
        // attention part stood in for by an ADD), with f32 or int8-block activations.
        let build = |acts: LinearActivations, limits: &Limits, cpu: bool| {
            let mut reg = Registry::new();
            let mut b = ProgramBuilder::new("p", &mut reg);
            let (f, d, ff) = (DType::F32, 64, 96);
            let x = b.declare("x", f, &[1, d]).expect("valid");
            let h = b.declare("h", f, &[1, d]).expect("valid");
            let q = b.declare("q", f, &[1, d]).expect("valid");
            let k = b.declare("k", f, &[1, d]).expect("valid");
            let v = b.declare("v", f, &[1, d]).expect("valid");
            let att = b.declare("att", f, &[1, d]).expect("valid");
            let proj = b.declare("proj", f, &[1, d]).expect("valid");
            let gate = b.declare("gate", f, &[1, ff]).expect("valid");
            let up = b.declare("up", f, &[1, ff]).expect("valid");
            let nw = b.declare("nw", f, &[d]).expect("valid");
            let wd = b.declare("wd", DType::Q8_0, &[d, d]).expect("valid");
            let wu = b.declare("wu", DType::Q8_0, &[ff, d]).expect("valid");
            let wdn = b.declare("wdn", DType::Q8_0, &[d, ff]).expect("valid");
            b.rms_norm(h, x, nw, 1e-5).expect("valid");
            for (out, w) in [(q, wd), (k, wd), (v, wd)] {
                b.linear_with(out, h, w, acts).expect("valid");
            }
            b.add(att, q, k).expect("valid");
            b.linear_with(proj, att, wd, acts).expect("valid");
            b.add(x, x, proj).expect("valid");
            b.rms_norm(h, x, nw, 1e-5).expect("valid");
            b.linear_with(gate, h, wu, acts).expect("valid");
            b.linear_with(up, h, wu, acts).expect("valid");
            b.silu(gate, gate).expect("valid");
            b.mul(gate, gate, up).expect("valid");
            b.linear_with(proj, gate, wdn, acts).expect("valid");
            b.add(x, x, proj).expect("valid");
            let p = b.finish();
            let caps = Capabilities { cpu, ..Capabilities::default() };
            plan(&RecordCtx { caps, ..ctx(&reg) }, limits, p.instructions())
        };
        // 8 storage buffers: the products stay separate dispatches (gemv_multi binds 10,
        // gemv_gated 9).
        let int8 = build(LinearActivations::Int8Blocks, &LIMITS, false);
        let want = [
            SharedQuantization,
            NormQuantization,
            ResidualEpilogue,
            SharedQuantization,
            NormQuantization,
            ActMulEpilogue,
            ResidualEpilogue,
        ];
        assert_eq!(int8.patterns(), want);
        // RMS_NORM + q/k/v, ADD(att), o + add, RMS_NORM + gate/up + act + mul, down + add.
        assert_eq!(int8.units.len(), 5);
        // f32 activations: q, k and v share no rounding, but each applies the first norm
        // itself (the second norm overwrites h unread); the second norm writes h for the
        // last time in the program (the host may read it), so it keeps its dispatch.
        let f32 = build(LinearActivations::F32, &LIMITS, false);
        assert_eq!(f32.patterns(), [NormInProduct, ResidualEpilogue, ActMulEpilogue, ResidualEpilogue]);
        // RMS_NORM + q, k, v; ADD(att); o + add; RMS_NORM; gate/up + act + mul; down + add.
        assert_eq!(f32.units.len(), 6);
        // A CPU adapter's products leave every norm its own dispatch.
        let f32 = build(LinearActivations::F32, &LIMITS, true);
        assert_eq!(f32.patterns(), [ResidualEpilogue, ActMulEpilogue, ResidualEpilogue]);
        assert_eq!(f32.units.len(), 9);
        // 16 storage buffers: q, k and v in one dispatch, gate and up in another.
        let wide = Limits { max_storage_buffers: 16 };
        let int8 = build(LinearActivations::Int8Blocks, &wide, false);
        let merged: Vec<Pattern> =
            int8.patterns().into_iter().filter(|p| [MultiProduct, GatedPair].contains(p)).collect();
        assert_eq!(merged, [MultiProduct, GatedPair]);
        let f32 = build(LinearActivations::F32, &wide, false);
        assert_eq!(
            f32.patterns(),
            [NormInProduct, MultiProduct, ResidualEpilogue, ActMulEpilogue, GatedPair, ResidualEpilogue]
        );
        assert_eq!(f32.units.len(), 6);
    }

    #[test]
    fn unfusable_programs_stay_unfused() {
        let mut reg = Registry::new();
        let mut b = ProgramBuilder::new("p", &mut reg);
        let f = DType::F32;
        let x = b.declare("x", f, &[1, 128]).expect("valid");
        let h = b.declare("h", f, &[1, 128]).expect("valid");
        let y = b.declare("y", f, &[1, 128]).expect("valid");
        let nw = b.declare("nw", f, &[128]).expect("valid");
        let wf = b.declare("wf", f, &[128, 128]).expect("valid");
        // RMS_NORM then LINEAR, then an add into the LINEAR's own x (bound read-only by the
        // product): nothing to fuse.
        b.rms_norm(h, x, nw, 1e-5).expect("valid");
        b.linear(y, h, wf).expect("valid");
        b.add(h, h, y).expect("valid");
        let p = b.finish();
        let pl = plan(&ctx(&reg), &LIMITS, p.instructions());
        assert_eq!(pl, Plan::unfused(3));
        // A device with too few storage buffers: no residual epilogue.
        let mut reg = Registry::new();
        let mut b = ProgramBuilder::new("p", &mut reg);
        let x = b.declare("x", f, &[1, 128]).expect("valid");
        let y = b.declare("y", f, &[1, 128]).expect("valid");
        let w = b.declare("w", DType::I2_S, &[128, 128]).expect("valid");
        b.bitlinear(y, x, w, None).expect("valid");
        b.add(x, x, y).expect("valid");
        let p = b.finish();
        assert_eq!(plan(&ctx(&reg), &Limits { max_storage_buffers: 7 }, p.instructions()), Plan::unfused(2));
        assert_eq!(plan(&ctx(&reg), &LIMITS, p.instructions()).patterns(), [Pattern::ResidualEpilogue]);
        // A binding cap below the residual's size: unfused.
        let small = RecordCtx { max_binding: 256, ..ctx(&reg) };
        assert_eq!(plan(&small, &LIMITS, p.instructions()), Plan::unfused(2));
    }
}
