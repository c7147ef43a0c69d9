//! Recording: a fused unit of the plan into its kernel calls.

use purebee_isa::ops::{BitLinear, Linear};
use purebee_isa::Instruction;

use crate::kernels::bitlinear::{self, Epilogue};
use crate::kernels::rope_qkv::RopeEpilogue;
use crate::kernels::{attention, linear, norm_quant, rope_kv, KernelCall, RecordCtx};
use crate::GpuError;

use super::group::{Group, ProductKind, RopePart, Rounder};
use super::plan::{linears_at, norm_in_products};

/// The kernel calls of a [`Group`](super::Unit::Group).
pub(crate) fn record(ctx: &RecordCtx, instructions: &[Instruction], g: &Group) -> Result<Vec<KernelCall>, GpuError> {
    match g.kind {
        ProductKind::BitLinear => record_bitlinear(ctx, instructions, g),
        ProductKind::Linear { .. } => record_linear(ctx, instructions, g),
    }
}

/// A BITLINEAR group: the fused norm and quantization, or the first product's
/// quantization of `x` for all; the products in order (or merged into one dispatch), the
/// last with the epilogue.
fn record_bitlinear(ctx: &RecordCtx, instructions: &[Instruction], g: &Group) -> Result<Vec<KernelCall>, GpuError> {
    let bitlinear_at = |i: usize| -> Result<&BitLinear, GpuError> {
        match instructions.get(i) {
            Some(Instruction::BitLinear(b)) => Ok(b),
            _ => Err(GpuError::Wgpu(format!("fusion plan: instruction {i} is not a BITLINEAR"))),
        }
    };
    let mut calls = Vec::new();
    match g.rounder {
        Some(Rounder::Norm(n)) => {
            let Some(Instruction::RmsNorm(norm)) = instructions.get(n.index) else {
                return Err(GpuError::Wgpu(format!("fusion plan: instruction {} is not an RMS_NORM", n.index)));
            };
            calls.extend(norm_quant::record(ctx, norm, norm_quant::Rounding::Rows, n.write_out)?);
        }
        Some(Rounder::Attention(i)) => {
            return Err(GpuError::Wgpu(format!("fusion plan: ATTENTION {i} rounds for BITLINEARs")));
        }
        None => calls.extend(bitlinear::quantize(ctx, bitlinear_at(g.products[0])?)?),
    }
    if g.merged {
        match (g.products.as_slice(), g.tail.map(|t| t.epilogue)) {
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
    for (j, &bi) in g.products.iter().enumerate() {
        let epilogue = if j + 1 == g.products.len() { g.tail.map(|a| a.epilogue) } else { None };
        calls.extend(bitlinear::product(ctx, bitlinear_at(bi)?, epilogue)?);
    }
    Ok(calls)
}

/// A LINEAR group: the fused norm and rounding, or the first product's rounding of `x` to
/// int8 blocks for all (when they ask for it); the products in order (or merged into one
/// dispatch), the last with the epilogue.
fn record_linear(ctx: &RecordCtx, instructions: &[Instruction], g: &Group) -> Result<Vec<KernelCall>, GpuError> {
    let ls: Vec<&Linear> = linears_at(instructions, &g.products)
        .ok_or_else(|| GpuError::Wgpu(format!("fusion plan: instructions {:?} are not LINEARs", g.products)))?;
    let mut calls = Vec::new();
    let xhat = ls.iter().any(|l| linear::reads_xhat(ctx, l));
    let int8 = g.kind.shares_rounding();
    // The group's rounding: the rounder's, the products' own, or the first product's.
    let rounding = match g.rounder {
        Some(Rounder::Norm(n)) => {
            let Some(Instruction::RmsNorm(norm)) = instructions.get(n.index) else {
                return Err(GpuError::Wgpu(format!("fusion plan: instruction {} is not an RMS_NORM", n.index)));
            };
            if norm_in_products(ctx, instructions, g) {
                linear::Rounding::InProduct { norm: Some(linear::ProductNorm::of(norm)) }
            } else if int8 {
                calls.extend(norm_quant::record(ctx, norm, norm_quant::Rounding::Blocks { xhat }, n.write_out)?);
                linear::Rounding::Done
            } else {
                // The plan groups a norm before f32 activations only when the products apply it.
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
        None if !g.is_head() && linear::rounds_in_product(ctx, &ls, None, g.is_gated_pair()) => {
            linear::Rounding::InProduct { norm: None }
        }
        None => linear::Rounding::Here { xhat },
    };
    if g.merged {
        match (ls.as_slice(), g.tail.map(|t| t.epilogue)) {
            (&[q, k, v], None) => {
                let rope = g.rope.map(|r| rope_epilogue(instructions, &r)).transpose()?;
                calls.extend(linear::multi_product(ctx, [q, k, v], rounding, rope.as_ref())?);
            }
            (&[gate, up], Some(Epilogue::ActMul { op, write_out, .. })) => {
                calls.extend(linear::gated_product(ctx, (gate, up), op, rounding, write_out)?);
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

/// The dispatch of a [`Pattern::RopeKvWrite`](super::Pattern::RopeKvWrite) unit.
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

/// The dispatches of a [`Pattern::ArgmaxPartials`](super::Pattern::ArgmaxPartials) unit.
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
