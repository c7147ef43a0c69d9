//! BITLINEAR (`bitlinear.wgsl`): per-row int8 activation quantization, then the exact
//! int8 × ternary product, per the ISA (`isa/src/ops/bitlinear.rs`).
//!
//! Every BITLINEAR is two dispatches:
//! 1. `quantize`, one workgroup of [`WG`] per row of x: writes the int8 activations (four per
//!    word) and the per-row scale `s` into the program's scratch buffers
//!    ([`ScratchKey::BitlinearActivations`], [`ScratchKey::BitlinearScales`]). `s` is the
//!    correctly rounded `127 / max(a, 1e-5)`, computed by integer long division (WGSL's
//!    float division is only accurate to 2.5 ulp), so it equals the reference's bit for
//!    bit, and so does every `q` (one correctly rounded multiply, then `round`, which WGSL
//!    defines as half-to-even). Reads `4nk` bytes, writes `nk + 4n`.
//! 2. For `n = 1` (decode), `gemv`: one workgroup of [`WG`] per weight row, subgroup
//!    reductions when the device has them. Reads the repacked ternary weight once:
//!    `m·k/4` bytes of codes plus `4·m·k/256` bytes of scales (TQ1_0 / TQ2_0; I2_S: 4
//!    bytes), the `k` bytes of int8 activations (cached), writes `4m`. For scale: 2.1 G
//!    ternary weights are ~0.52 GB at 2 bits, plus ~32 MB of scales for TQ files.
//!    For `n ≥ 2` (prefill), `tiled`: 64 rows × 32 tokens per workgroup, reading the codes
//!    `⌈n/32⌉` times and the int8 activations `⌈m/64⌉` times, writing `4nm`.
//!
//! The fusion pass (`fuse/`) reuses these pieces: one `quantize` (or `norm_quant.wgsl`)
//! for several BITLINEARs of one `x`, the products with an epilogue file in place of
//! `product_store.wgsl` (`residual_add.wgsl`, `act_mul.wgsl`), and `bitlinear_multi.wgsl`
//! for several one-token products in one dispatch.
//!
//! The weight is in the ternary layout of `layout.rs` (codes, then scales): one kernel for
//! TQ1_0, TQ2_0 and I2_S; I2_S (one scale per tensor, so the whole row is one block) is the
//! `ROW_SCALE` specialization, which sums each row as one exact i32.

use purebee_isa::ops::BitLinear;
use purebee_memory::DType;

use super::elementwise::{BinaryOp, UnaryOp};
pub(crate) use super::epilogue::Epilogue;
use super::layout::ternary_scales;
use super::rope_qkv::{self, RopeArgs, RopeEpilogue};
use super::{KernelCall, RecordCtx, ScratchKey, Shader, Storage};
use crate::pipelines::PipelineKey;
use crate::GpuError;

/// Invocations per workgroup of `quantize` and `gemv`.
pub(crate) const WG: u32 = 64;
/// Weight rows per workgroup of `tiled`.
const TILE_M: u32 = 64;
/// Tokens per workgroup of `tiled`.
const TILE_N: usize = 32;

/// Mirrors `Params` in `bitlinear.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct Params {
    pub m: u32,
    pub k: u32,
    pub n: u32,
    pub scale_stride: u32,
    pub words: u32,
    /// `gemv_multi` (bitlinear_multi.wgsl): the first row of weights 1 and 2; else 0.
    pub split: [u32; 2],
    pub _pad: u32,
    /// `gemv_multi_rope` (rope_qkv.wgsl): the rotation and the caches; else zeros.
    pub rope: RopeArgs,
}

fn too_large(what: &str) -> GpuError {
    GpuError::Unsupported { op: "BITLINEAR", what: format!("{what} beyond 32-bit indexing") }
}

/// The shapes and uniform parameters of one BITLINEAR; `None` when it has no output
/// element (nothing to dispatch).
struct Dims {
    n: usize,
    k: usize,
    params: Params,
    row_scale: u32,
}

fn dims(ctx: &RecordCtx, b: &BitLinear) -> Result<Option<Dims>, GpuError> {
    let w = ctx.desc(b.weight)?;
    let (m, k) = (w.shape.rows(), w.shape.cols());
    // Tokens from the output [n, m] (x is [n, k], and k may be 0).
    let n = ctx.desc(b.out)?.shape.numel().checked_div(m).unwrap_or(0);
    if m == 0 || n == 0 {
        return Ok(None);
    }
    let scales = ternary_scales(w.dtype, k)
        .ok_or_else(|| GpuError::Unsupported { op: "BITLINEAR", what: format!("{} weights", w.dtype) })?;
    let u = |v: usize, what: &str| u32::try_from(v).map_err(|_| too_large(what));
    // The kernels index elements of x, out and the weight in u32.
    u(n.checked_mul(k.max(m)).ok_or_else(|| too_large("the activations"))?, "the activations")?;
    u(m.checked_mul(k).ok_or_else(|| too_large("the weight"))?, "the weight")?;
    let params = Params {
        m: u(m, "the row count")?,
        k: u(k, "the row length")?,
        n: u(n, "the token count")?,
        scale_stride: u(scales.row_stride, "the scale count")?,
        words: u(k / super::layout::CODES_PER_WORD, "the row length")?,
        split: [0; 2],
        _pad: 0,
        rope: RopeArgs::default(),
    };
    Ok(Some(Dims { n, k, params, row_scale: u32::from(w.dtype == DType::I2_S) }))
}

/// The scratch buffers of the int8 activations and their scales, for `n` rows of `k`.
pub(crate) fn scratch(n: usize, k: usize) -> (Storage, Storage) {
    (
        Storage::Scratch(ScratchKey::BitlinearActivations, (n * k) as u64),
        Storage::Scratch(ScratchKey::BitlinearScales, 4 * n as u64),
    )
}

/// The two dispatches of one BITLINEAR: `quantize`, then the product.
pub(crate) fn record(ctx: &RecordCtx, b: &BitLinear) -> Result<Vec<KernelCall>, GpuError> {
    let mut calls: Vec<KernelCall> = quantize(ctx, b)?.into_iter().collect();
    calls.extend(product(ctx, b, None)?);
    Ok(calls)
}

/// The `quantize` dispatch of a BITLINEAR: its `x` into the activation scratch buffers.
pub(crate) fn quantize(ctx: &RecordCtx, b: &BitLinear) -> Result<Option<KernelCall>, GpuError> {
    let Some(d) = dims(ctx, b)? else { return Ok(None) };
    let shader = if ctx.caps.subgroups { Shader::BitlinearSubgroup } else { Shader::Bitlinear };
    let (acts, act_scales) = scratch(d.n, d.k);
    Ok(Some(KernelCall {
        key: PipelineKey { shader, entry: "quantize", constants: vec![("WG", WG)] },
        params: bytemuck::bytes_of(&d.params).to_vec(),
        storage: vec![(1, Storage::Tensor(b.x, 0)), (5, acts), (6, act_scales)],
        workgroups: ctx.grid_1d(d.n, 1),
    }))
}

/// The product dispatch of a BITLINEAR (`gemv` for one token, `tiled` for several), reading
/// the activation scratch buffers an earlier `quantize` (or fused norm + quantization) of
/// the same `x` filled; with `epilogue`, the fused residual add.
pub(crate) fn product(
    ctx: &RecordCtx,
    b: &BitLinear,
    epilogue: Option<Epilogue>,
) -> Result<Option<KernelCall>, GpuError> {
    let Some(d) = dims(ctx, b)? else { return Ok(None) };
    let (n, m) = (d.n, d.params.m as usize);
    let bytes = bytemuck::bytes_of(&d.params).to_vec();
    let subgroups = ctx.caps.subgroups;
    let (acts, act_scales) = scratch(n, d.k);
    // Without an output scale, the weight's scales stand in at binding 4 (read-only, unread).
    let out_scale = b.scale.map_or(Storage::Tensor(b.weight, 1), |s| Storage::Tensor(s, 0));
    let mut constants = vec![("WG", WG), ("ROW_SCALE", d.row_scale), ("HAS_SCALE", u32::from(b.scale.is_some()))];
    let mut storage = vec![
        (2, Storage::Tensor(b.weight, 0)),
        (3, Storage::Tensor(b.weight, 1)),
        (4, out_scale),
        (5, acts),
        (6, act_scales),
        (7, Storage::Tensor(b.out, 0)),
    ];
    let (portable, subgroup) = match epilogue {
        None => (Shader::Bitlinear, Shader::BitlinearSubgroup),
        Some(Epilogue::Add { residual, sum, write_out }) => {
            let inplace = sum == residual;
            // In place, the weight's codes stand in at binding 8 (read-only, unread).
            let residual = if inplace { Storage::Tensor(b.weight, 0) } else { Storage::Tensor(residual, 0) };
            storage.push((8, residual));
            storage.push((9, Storage::Tensor(sum, 0)));
            constants.push(("WRITE_OUT", u32::from(write_out)));
            constants.push(("RES_INPLACE", u32::from(inplace)));
            (Shader::BitlinearAdd, Shader::BitlinearAddSubgroup)
        }
        Some(Epilogue::ActMul { gated, op, write_out }) => {
            storage.push((9, Storage::Tensor(gated, 0)));
            constants.push(("WRITE_OUT", u32::from(write_out)));
            constants.push(("UNARY_OP", op as u32));
            constants.push(("BINARY_OP", BinaryOp::Mul as u32));
            (Shader::BitlinearActMul, Shader::BitlinearActMulSubgroup)
        }
        Some(Epilogue::Argmax { .. }) => {
            return Err(GpuError::Wgpu("fusion plan: an ARGMAX epilogue on a BITLINEAR".to_string()))
        }
    };
    let u = |v: usize, what: &str| u32::try_from(v).map_err(|_| too_large(what));
    let product = if n == 1 {
        KernelCall {
            key: PipelineKey { shader: if subgroups { subgroup } else { portable }, entry: "gemv", constants },
            params: bytes,
            storage,
            workgroups: ctx.grid_1d(m, 1),
        }
    } else {
        let mut workgroups = ctx.grid_1d(m, TILE_M);
        workgroups[2] = u(n.div_ceil(TILE_N), "the token count")?;
        if workgroups[2] > ctx.max_workgroups {
            return Err(too_large("the token count"));
        }
        KernelCall {
            key: PipelineKey { shader: portable, entry: "tiled", constants },
            params: bytes,
            storage,
            workgroups,
        }
    };
    Ok(Some(product))
}

/// Storage buffers `gemv_multi` binds (bindings 5, 6 and 10..=21).
pub(crate) const MULTI_STORAGE_BUFFERS: u32 = 14;

/// Storage buffers the products of `gemv_multi_rope` bind, before the epilogue's
/// [`rope_qkv::STORAGE_BUFFERS`]: `gemv_multi`'s, less the three output scales (16..=18)
/// when the BITLINEARs have none (only `gemv_multi_rope_scaled` binds them).
pub(crate) fn multi_rope_storage_buffers(has_scale: bool) -> u32 {
    if has_scale {
        MULTI_STORAGE_BUFFERS
    } else {
        MULTI_STORAGE_BUFFERS - 3
    }
}
/// Storage buffers `gemv_gated` binds (bindings 5, 6, 10, 11, 13, 14, 16..=18, 19, 20).
pub(crate) const GATED_STORAGE_BUFFERS: u32 = 11;

/// A pipeline's override constants.
type Constants = Vec<(&'static str, u32)>;

/// The pipeline constants and the weight bindings (10.., per `bitlinear_multi.wgsl`) shared
/// by the multi-weight products; `ws` must have one ternary type and one HAS_SCALE (the
/// fusion pass checks it). The output scales (16..) only with `out_scales`: every entry
/// point but `gemv_multi_rope` (no output scales) names them.
fn multi_bindings(ws: &[&BitLinear], row_scale: u32, out_scales: bool) -> (Constants, Vec<(u32, Storage)>) {
    let has_scale = ws.iter().all(|b| b.scale.is_some());
    let constants = vec![("WG", WG), ("ROW_SCALE", row_scale), ("HAS_SCALE", u32::from(has_scale))];
    let mut storage = Vec::new();
    for (i, b) in ws.iter().enumerate() {
        let i = i as u32;
        storage.push((10 + i, Storage::Tensor(b.weight, 0)));
        storage.push((13 + i, Storage::Tensor(b.weight, 1)));
        if out_scales {
            // Without an output scale, the weight's scales stand in (read-only, unread).
            storage.push((16 + i, b.scale.map_or(Storage::Tensor(b.weight, 1), |s| Storage::Tensor(s, 0))));
        }
        storage.push((19 + i, Storage::Tensor(b.out, 0)));
    }
    (constants, storage)
}

fn multi_shader(ctx: &RecordCtx) -> Shader {
    if ctx.caps.subgroups {
        Shader::BitlinearMultiSubgroup
    } else {
        Shader::BitlinearMulti
    }
}

/// The products of three one-token BITLINEARs of one quantized `x` in one dispatch
/// (`gemv_multi`): rows of the three weights in one grid; with `rope`, the rotation of q and
/// k and the cache writes as its epilogue (`gemv_multi_rope`, a workgroup per rotation pair
/// of q or k and per row of v).
pub(crate) fn multi_product(
    ctx: &RecordCtx,
    bs: [&BitLinear; 3],
    rope: Option<&RopeEpilogue>,
) -> Result<Option<KernelCall>, GpuError> {
    let mut dims3 = Vec::new();
    for b in bs {
        let Some(d) = dims(ctx, b)? else { return Ok(None) };
        dims3.push(d);
    }
    let (m0, m1, m2) = (dims3[0].params.m, dims3[1].params.m, dims3[2].params.m);
    let total = m0.checked_add(m1).and_then(|s| s.checked_add(m2)).ok_or_else(|| too_large("the row count"))?;
    let mut params = dims3[0].params;
    params.m = total;
    params.split = [m0, m0 + m1];
    let (acts, act_scales) = scratch(1, dims3[0].k);
    let has_scale = bs[0].scale.is_some();
    let entry = match (rope, has_scale) {
        (None, _) => "gemv_multi",
        (Some(_), true) => "gemv_multi_rope_scaled",
        (Some(_), false) => "gemv_multi_rope",
    };
    let (mut constants, mut storage) = multi_bindings(&bs, dims3[0].row_scale, rope.is_none() || has_scale);
    storage.extend([(5, acts), (6, act_scales)]);
    let mut groups = total as usize;
    if let Some(r) = rope {
        params.rope = r.args(ctx)?;
        constants.extend(r.constants());
        storage.extend(r.storage());
        groups = rope_qkv::items(m0, m1, m2);
    }
    Ok(Some(KernelCall {
        key: PipelineKey { shader: multi_shader(ctx), entry, constants },
        params: bytemuck::bytes_of(&params).to_vec(),
        storage,
        workgroups: ctx.grid_1d(groups, 1),
    }))
}

/// BITLINEAR(g) ; BITLINEAR(u) ; ACT(g, g) ; ELEMENT_MUL(g, g, u) for one token in one
/// dispatch (`gemv_gated`: two accumulators per row); `u` written only when `write_out`.
pub(crate) fn gated_product(
    ctx: &RecordCtx,
    (g, u): (&BitLinear, &BitLinear),
    op: UnaryOp,
    write_out: bool,
) -> Result<Option<KernelCall>, GpuError> {
    let (Some(dg), Some(_)) = (dims(ctx, g)?, dims(ctx, u)?) else { return Ok(None) };
    let (acts, act_scales) = scratch(1, dg.k);
    let (mut constants, mut storage) = multi_bindings(&[g, u], dg.row_scale, true);
    // mfinish names the third output scale: the second one stands in (read-only, unread).
    storage.push((18, u.scale.map_or(Storage::Tensor(u.weight, 1), |s| Storage::Tensor(s, 0))));
    storage.extend([(5, acts), (6, act_scales)]);
    constants.extend([
        ("WRITE_OUT", u32::from(write_out)),
        ("UNARY_OP", op as u32),
        ("BINARY_OP", BinaryOp::Mul as u32),
    ]);
    Ok(Some(KernelCall {
        key: PipelineKey { shader: multi_shader(ctx), entry: "gemv_gated", constants },
        params: bytemuck::bytes_of(&dg.params).to_vec(),
        storage,
        workgroups: ctx.grid_1d(dg.params.m as usize, 1),
    }))
}
