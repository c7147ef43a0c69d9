//! Matching: the instruction list into [`Unit`]s, each pattern with its preconditions.

use purebee_isa::ops::{Attention, Binary, BitLinear, Linear, LinearActivations, RmsNorm};
use purebee_isa::Instruction;
use purebee_memory::{DType, TensorId};

use crate::kernels::bitlinear::{self, Epilogue};
use crate::kernels::elementwise::UnaryOp;
use crate::kernels::{attention, linear, norm_quant, rope_qkv, RecordCtx};

use super::group::{Group, NormPart, Plan, ProductKind, RopePart, Rounder, TailPart, Unit};
use super::liveness::{write_is_dead, writes};

/// What the pass needs to know about the device.
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
            units.push(Unit::Group(g));
        } else {
            units.push(Unit::Single(i));
            i += 1;
        }
    }
    Plan { units }
}

/// A product instruction (BITLINEAR or LINEAR) as the matcher sees it.
#[derive(Clone, Copy)]
pub(super) enum ProductOp<'a> {
    Bit(&'a BitLinear),
    Lin(&'a Linear),
}

impl<'a> ProductOp<'a> {
    fn at(instructions: &'a [Instruction], i: usize) -> Option<ProductOp<'a>> {
        match instructions.get(i)? {
            Instruction::BitLinear(b) => Some(ProductOp::Bit(b)),
            Instruction::Linear(l) => Some(ProductOp::Lin(l)),
            _ => None,
        }
    }

    fn x(&self) -> TensorId {
        match self {
            ProductOp::Bit(b) => b.x,
            ProductOp::Lin(l) => l.x,
        }
    }

    fn out(&self) -> TensorId {
        match self {
            ProductOp::Bit(b) => b.out,
            ProductOp::Lin(l) => l.out,
        }
    }

    fn kind(&self) -> ProductKind {
        match self {
            ProductOp::Bit(_) => ProductKind::BitLinear,
            ProductOp::Lin(l) => ProductKind::Linear { int8: l.activations == LinearActivations::Int8Blocks },
        }
    }

    /// Whether `other` joins a group that starts with this product: the same kind, the
    /// same `x` (LINEARs: and the same activations option).
    fn shares_x(&self, other: &ProductOp) -> bool {
        match (self, other) {
            (ProductOp::Bit(a), ProductOp::Bit(b)) => a.x == b.x,
            (ProductOp::Lin(a), ProductOp::Lin(b)) => a.x == b.x && a.activations == b.activations,
            _ => false,
        }
    }

    /// Tensors the product kernel binds read-only (an epilogue's or merged group's output
    /// must be none): BITLINEAR's weight and scale (it reads x from the scratch buffers),
    /// LINEAR's weight and x (with int8 blocks the kernel reads the scratch buffer, but x is
    /// read by the rounding).
    fn read_only(&self) -> Vec<TensorId> {
        match self {
            ProductOp::Bit(b) => [b.weight].into_iter().chain(b.scale).collect(),
            ProductOp::Lin(l) => vec![l.weight, l.x],
        }
    }

    /// What the epilogue preconditions look at.
    fn product(&self) -> Product {
        let add_storage_buffers = match self {
            ProductOp::Bit(_) => ADD_STORAGE_BUFFERS,
            ProductOp::Lin(_) => LINEAR_ADD_STORAGE_BUFFERS,
        };
        Product { out: self.out(), read_only: self.read_only(), add_storage_buffers }
    }
}

/// The products at `indices`, or `None` when one is not a product.
fn products_at<'a>(instructions: &'a [Instruction], indices: &[usize]) -> Option<Vec<ProductOp<'a>>> {
    indices.iter().map(|&i| ProductOp::at(instructions, i)).collect()
}

/// The instruction at `i` that rounds x for the products after it.
enum Before<'a> {
    Norm(&'a RmsNorm),
    Attention,
}

/// Where a group starting at instruction `i` has its first product, and the instruction
/// before that product that rounds its x, if any.
fn products_start<'a>(
    ctx: &RecordCtx,
    instructions: &'a [Instruction],
    i: usize,
) -> Option<(Option<Before<'a>>, usize)> {
    match (instructions.get(i)?, instructions.get(i + 1)) {
        (Instruction::RmsNorm(n), Some(Instruction::BitLinear(b))) if b.x == n.out && norm_fusable(ctx, n) => {
            Some((Some(Before::Norm(n)), i + 1))
        }
        (Instruction::RmsNorm(n), Some(Instruction::Linear(l)))
            if l.x == n.out && (block_norm_fusable(ctx, n, l) || l.activations == LinearActivations::F32) =>
        {
            Some((Some(Before::Norm(n)), i + 1))
        }
        (Instruction::Attention(a), Some(Instruction::Linear(l)))
            if l.x == a.out && attention_rounding_fusable(ctx, a, l) =>
        {
            Some((Some(Before::Attention), i + 1))
        }
        (Instruction::BitLinear(_) | Instruction::Linear(_), _) => Some((None, i)),
        _ => None,
    }
}

/// The group starting at instruction `i`, if one does and fuses anything.
fn group_at(ctx: &RecordCtx, limits: &Limits, instructions: &[Instruction], i: usize) -> Option<Group> {
    let (before, first) = products_start(ctx, instructions, i)?;
    let p0 = ProductOp::at(instructions, first)?;
    let mut products = vec![first];
    let mut j = first + 1;
    while let Some(p) = ProductOp::at(instructions, j) {
        if !p0.shares_x(&p) {
            break;
        }
        products.push(j);
        j += 1;
    }
    let last = j - 1;
    let mut tail = tail_of(ctx, limits, instructions, last, &ProductOp::at(instructions, last)?.product());
    if matches!(before, Some(Before::Norm(_))) && products.len() == 1 && tail.is_none() {
        // A norm before a LINEAR and its ARGMAX: that LINEAR keeps its
        // ARGMAX pass.
        if let (Some(write_out), Some(Instruction::Argmax(a))) =
            (head_argmax_at(ctx, instructions, first), instructions.get(first + 1))
        {
            tail = Some(TailPart { last: first + 1, epilogue: Epilogue::Argmax { ids: a.out, write_out } });
        }
    }
    let rounder = before.map(|b| match b {
        Before::Norm(n) => {
            Rounder::Norm(NormPart { index: i, write_out: !write_is_dead(instructions, i, n.out, &products) })
        }
        Before::Attention => Rounder::Attention(i),
    });
    let merged = mergeable(ctx, limits, instructions, &products, tail);
    let rope = if merged && tail.is_none() {
        let ps = products_at(instructions, &products)?;
        let outs: Vec<TensorId> = ps.iter().map(|p| p.out()).collect();
        let inputs: Vec<TensorId> = ps.iter().flat_map(|p| p.read_only().into_iter().chain([p.x()])).collect();
        let buffers = match p0 {
            ProductOp::Bit(b) => bitlinear::multi_rope_storage_buffers(b.scale.is_some()),
            ProductOp::Lin(_) => linear::MULTI_STORAGE_BUFFERS,
        };
        rope_epilogue_at(ctx, limits, instructions, last, (&outs, &inputs), buffers)
    } else {
        None
    };
    let g = Group { kind: p0.kind(), rounder, products, tail, merged, rope };
    // A norm before products that do not share a rounding (f32 activations) joins only
    // products that apply it (Pattern::NormInProduct); otherwise it keeps its own dispatch,
    // and the products may form a group from i + 1.
    if !g.kind.shares_rounding() && g.norm().is_some() && !norm_in_products(ctx, instructions, &g) {
        return None;
    }
    (!g.patterns().is_empty()).then_some(g)
}

/// Whether the products of group `g` (LINEARs) apply its RMS_NORM themselves, the norm
/// without a dispatch of its own ([`linear::Rounding::InProduct`]): its output unread but by
/// them, its input unwritten by the group (the products read it while the group's kernels
/// write their outputs), not before a LINEAR's ARGMAX (a workgroup per vocabulary row
/// would repeat it that often), and [`linear::rounds_in_product`].
pub(super) fn norm_in_products(ctx: &RecordCtx, instructions: &[Instruction], g: &Group) -> bool {
    let Some(n) = g.norm() else { return false };
    let (Some(Instruction::RmsNorm(norm)), Some(ls)) =
        (instructions.get(n.index), linears_at(instructions, &g.products))
    else {
        return false;
    };
    let input_kept =
        instructions.get(n.index + 1..g.range().end).is_some_and(|is| !is.iter().any(|i| writes(i, norm.x)));
    !n.write_out && !g.is_head() && input_kept && linear::rounds_in_product(ctx, &ls, Some(norm), g.is_gated_pair())
}

/// Whether RMS_NORM `n` can be fused with the quantization of its output (BITLINEAR's).
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
/// ([`Pattern::AttentionRounding`](super::Pattern::AttentionRounding)): `l` asks for int8
/// blocks, the attention's positions are split and its heads hold whole blocks, `l`'s
/// weight rows are as long as the output's (the scratch buffer's shape), and the output's
/// elements are indexed in u32.
fn attention_rounding_fusable(ctx: &RecordCtx, a: &Attention, l: &Linear) -> bool {
    let (Ok(o), Ok(w)) = (ctx.desc(a.out), ctx.desc(l.weight)) else { return false };
    l.activations == LinearActivations::Int8Blocks
        && o.shape.cols() == w.shape.cols()
        && o.shape.rows().checked_mul(o.shape.cols()).is_some_and(|e| u32::try_from(e).is_ok())
        && attention::rounds_blocks(ctx, a)
        && fits(ctx, a.out)
}

/// Whether the one-token products at `products` (with `tail`) can run as one dispatch
/// ([`Pattern::MultiProduct`](super::Pattern::MultiProduct): three with distinct outputs
/// that none of them binds read-only; [`Pattern::GatedPair`](super::Pattern::GatedPair):
/// two whose first output is the gated tensor), given the storage buffers that dispatch
/// binds and what the kind asks of the products themselves.
fn mergeable(
    ctx: &RecordCtx,
    limits: &Limits,
    instructions: &[Instruction],
    products: &[usize],
    tail: Option<TailPart>,
) -> bool {
    let Some(ps) = products_at(instructions, products) else { return false };
    let Some(first) = ps.first() else { return false };
    let (multi_buffers, gated_buffers) = match first {
        ProductOp::Bit(_) => (bitlinear::MULTI_STORAGE_BUFFERS, bitlinear::GATED_STORAGE_BUFFERS),
        ProductOp::Lin(_) => (linear::MULTI_STORAGE_BUFFERS, linear::GATED_STORAGE_BUFFERS),
    };
    let shape = match (ps.as_slice(), tail.map(|t| t.epilogue)) {
        ([a, b, c], None) => {
            let outs = [a.out(), b.out(), c.out()];
            let inputs: Vec<TensorId> = ps.iter().flat_map(|p| p.read_only()).collect();
            let distinct = outs[0] != outs[1] && outs[0] != outs[2] && outs[1] != outs[2];
            distinct && !outs.iter().any(|o| inputs.contains(o)) && limits.max_storage_buffers >= multi_buffers
        }
        ([g, _], Some(Epilogue::ActMul { gated, .. })) => {
            gated == g.out() && limits.max_storage_buffers >= gated_buffers
        }
        _ => false,
    };
    shape && products_alike(ctx, &ps, tail.is_some())
}

/// Whether products of one kind can share one dispatch (`gated`: as the two products of a gated pair):
/// BITLINEARs of one token, one ternary type and all or none of the output scales; LINEARs
/// as [`linear::mergeable`] says.
fn products_alike(ctx: &RecordCtx, ps: &[ProductOp], gated: bool) -> bool {
    let bits: Option<Vec<&BitLinear>> = ps
        .iter()
        .map(|p| match p {
            ProductOp::Bit(b) => Some(*b),
            ProductOp::Lin(_) => None,
        })
        .collect();
    if let Some(bs) = bits {
        let Some(first) = bs.first() else { return false };
        let dtype = |b: &BitLinear| ctx.desc(b.weight).ok().map(|d| d.dtype);
        let tokens = |b: &BitLinear| {
            let m = ctx.desc(b.weight).ok()?.shape.rows();
            ctx.desc(b.out).ok()?.shape.numel().checked_div(m)
        };
        return bs.iter().all(|b| dtype(b).is_some() && dtype(b) == dtype(first) && tokens(b) == Some(1))
            && (bs.iter().all(|b| b.scale.is_some()) || bs.iter().all(|b| b.scale.is_none()));
    }
    let ls: Option<Vec<&Linear>> = ps
        .iter()
        .map(|p| match p {
            ProductOp::Lin(l) => Some(*l),
            ProductOp::Bit(_) => None,
        })
        .collect();
    ls.is_some_and(|ls| linear::mergeable(ctx, &ls, gated))
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
/// `p` ([`Pattern::ActMulEpilogue`](super::Pattern::ActMulEpilogue)).
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

/// `Some(write_out)` when a [`Pattern::ArgmaxPartials`](super::Pattern::ArgmaxPartials)
/// starts at instruction `i`.
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

/// `Some(write_k)` when a [`Pattern::RopeKvWrite`](super::Pattern::RopeKvWrite) starts at
/// instruction `i`.
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

/// The [`Pattern::RopeEpilogue`](super::Pattern::RopeEpilogue) after merged products, the
/// last at `last_product`, that wrote `outs` (q, k, v) from `inputs` (bound read-only): when
/// RopeKvWrite's four instructions on them follow, the caches are none of `inputs`, and the
/// device binds `product_buffers` + 3 storage buffers per stage.
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

/// The bytes of an F32 tensor, or `None` when it is not one.
fn f32_bytes(ctx: &RecordCtx, id: TensorId) -> Option<u64> {
    let d = ctx.desc(id).ok()?;
    (d.dtype == DType::F32).then(|| d.shape.numel() as u64 * 4)
}

/// Whether the F32 tensor fits one binding (windowed tensors are not fused).
fn fits(ctx: &RecordCtx, id: TensorId) -> bool {
    f32_bytes(ctx, id).is_some_and(|b| b <= ctx.max_binding)
}

/// The LINEARs at `indices`, or `None` when one is not a LINEAR.
pub(super) fn linears_at<'a>(instructions: &'a [Instruction], indices: &[usize]) -> Option<Vec<&'a Linear>> {
    indices
        .iter()
        .map(|&i| match instructions.get(i) {
            Some(Instruction::Linear(l)) => Some(l),
            _ => None,
        })
        .collect()
}
