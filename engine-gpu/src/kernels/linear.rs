//! LINEAR (`linear.wgsl`): `out[n, m] = x[n, k] · W[m, k]ᵀ` for F32, F16, BF16, Q4_0, Q4_1,
//! Q8_0 and the ternary types (decoded as `t · d`), f32 accumulation.
//!
//! Two kernels, chosen by the token count:
//! - `n = 1` (decode, memory-bound), rows longer than [`GEMV_ROWS_MAX_K`]: `gemv`, one
//!   workgroup of [`GEMV_WG`] invocations per output row, with subgroup reductions when the
//!   device has them (`Shader::LinearSubgroup`) and workgroup-memory reductions otherwise
//!   (`Shader::Linear`). Shorter rows (576 or 1536 elements): `gemv_rows`, 8 rows of 8
//!   invocations per workgroup and one barrier, on a CPU adapter only, since a workgroup per
//!   576-element row spends more on its reduction than on its 72 chunks there (on lavapipe,
//!   a Q8_0 [49152, 576] product took 308 ms with `gemv` and 133 ms with `gemv_rows`); a GPU
//!   hides the reduction and not the lanes' serial chunks. Both read every weight byte
//!   exactly once: `m · row_bytes(k)` bytes (an F16 [128256, 2560] weight: 128256 · 2560 · 2 =
//!   657 MB; a Q4_1 [1536, 576] projection: 1536 · 18 · 20 = 553 KB), plus the `4k` bytes of x
//!   (from cache after the first workgroups), and writes `4m`.
//! - `n ≥ 2` (prefill): `tiled`, 64 rows × 32 tokens per workgroup of 256. Reads the weights
//!   `⌈n / 32⌉` times (`⌈n/32⌉ · m · row_bytes(k)`), x `⌈m / 64⌉` times, writes `4nm`.
//!   Int8-block activations against Q4_0, Q4_1 or Q8_0 weights take `tiled_int8` instead
//!   (below), the same tiles over x's codes and scales (`1.125·k` bytes a token, not `4k`).
//!
//! Activations: with [`LinearActivations::Int8Blocks`], one more dispatch comes first,
//! `quantize_blocks`: one invocation per word of codes (4 element slots) of x's 32-element
//! blocks (`8 · n · ⌈k/32⌉` invocations, [`GEMV_WG`] per workgroup; one per block ran its 32
//! correctly rounded divisions in a row, about 38 µs per call on an H200), which rounds each
//! block to int8 exactly as the ISA does (the scale and rounding of `act_quant.wgsl`, shared
//! with BITLINEAR) into the scratch buffer [`ScratchKey::LinearActivations`]
//! ([`int8_scratch_bytes`]: `4nk` bytes of `x̂ = q / s_b`, correctly rounded to f32, then each
//! block's codes, four per word, and its scale `s_b`). Every `q` equals the reference's.
//! - Against Q4_0, Q4_1 or Q8_0 weights (`INT8`): for one token `gemv` and `gemv_rows` take
//!   blocks of 32 instead of chunks of 8 (`dot_blocks`), for several `tiled_int8` computes
//!   dot_blocks' terms for 16 outputs per invocation; both multiply the codes as integers with
//!   `dot4I8Packed` (8 per block) and scale each block's exact sum once, as the CPU engine
//!   does: per 32 elements 8 words of activations and a scale instead of 32
//!   floats, and Q8_0's codes as 8 or 9 whole words. With f32 activations a Q8_0 chunk cost
//!   as many loads as an F16 one for half its bytes: the H200 read a Q8_0 weight at 394 GB/s
//!   against the same weight in F16 at 818.
//!   On lavapipe (a 2-core VM) `tiled_int8` took a prefill of 576- and
//!   1536-element rows from 2.55 to 5.60 t/s against `tiled` over x̂ (one dot4I8Packed where
//!   `tiled` runs four f32 multiply-adds, and no f32 decode of the weight tile);
//!   `quantize_blocks` then writes no x̂.
//! - Otherwise (other weights) the product kernels run unchanged with `x̂` as their x: one
//!   rounding from the exact `q / s_b` (relative error ≤ 2⁻²⁴ per element), inside the
//!   summation's own error.
//! - On a GPU, one-token INT8 products of short rows skip `quantize_blocks` (and the fused
//!   norm before them): each workgroup rounds the blocks it multiplies from the f32 x (or
//!   the norm's input, with the norm's scale computed first as RMS_NORM computes it), bit
//!   for bit what the rounding dispatch would have written ([`Rounding::InProduct`],
//!   [`rounds_in_product`]). With rows of 576 and 1536 that removes 89 of a decode token's
//!   275 dispatches (on an H100 each cost 6.5–10.7 µs) for a re-read of a 576- or
//!   1536-wide row per workgroup from cache.
//!
//! Fused groups (`fuse/`) add `linear_multi.wgsl`: q, k and v of one token in one dispatch
//! (`gemv_multi`, a grid over the three weights' rows), and two products of one x with an
//! activation and a multiply as their epilogue (`gemv_gated`, both rows in one workgroup),
//! each row computed by `gemv`'s (or `gemv_rows`') own code, so every output is
//! bit-identical to the separate LINEARs'.
//! Each reads every byte of its weights once, as the separate dispatches did.
//!
//! Weight layouts are those of `layout.rs`: the file's bytes for every dtype but the ternary
//! ones, whose codes and scales are two parts (bindings 2 and 3).
//!
//! F16 values (weights and block scales) are widened with `unpack2x16float`. A device that
//! flushed f16 subnormals there would read weights below 2⁻¹⁴ as 0; lavapipe keeps them (the
//! tests draw about one F16 weight in eight subnormal).

use purebee_isa::ops::{Linear, LinearActivations, RmsNorm, LINEAR_ACT_BLOCK};
use purebee_memory::{DType, TensorId};

use super::elementwise::{BinaryOp, UnaryOp};
use super::epilogue::Epilogue;
use super::layout::{self, ternary_scales};
use super::rope_qkv::{self, RopeArgs, RopeEpilogue};
use super::{argmax, row_reduce, KernelCall, RecordCtx, ScratchKey, Shader, Storage};
use crate::pipelines::PipelineKey;
use crate::GpuError;

/// Invocations per workgroup of `gemv` and `gemv_rows`.
pub(crate) const GEMV_WG: u32 = 64;

/// Element slots per invocation of `quantize_blocks` (`SLOTS` in `linear.wgsl`: one word of
/// codes).
const ACT_SLOTS: usize = 4;
/// Rows up to this length take `gemv_rows` (at most 32 eight-element chunks per invocation)
/// on a CPU adapter. On a GPU every row takes `gemv`'s 64 invocations: `gemv_rows`' eight
/// lanes per row chained up to 32 chunks each, 20 µs per product of 576- or 1536-element
/// rows on an H200.
pub(crate) const GEMV_ROWS_MAX_K: usize = 2048;

/// Whether one-token rows of length `k` take `gemv_rows` (else `gemv`).
fn short_rows(ctx: &RecordCtx, k: usize) -> bool {
    ctx.caps.cpu && k <= GEMV_ROWS_MAX_K
}

/// Invocations per row of `gemv_rows`: 8 rows per workgroup.
const GEMV_ROWS_LANES: u32 = 8;
/// Output rows per workgroup, and per (key, index) slot, of the kernels that fuse ARGMAX
/// into a LINEAR (`linear_argmax.wgsl`): `gemv_rows`' rows per workgroup, and a multiple of
/// 8 dividing the window row step, so that every window's first slot is whole.
pub(crate) const PART_ROWS: u32 = GEMV_WG / GEMV_ROWS_LANES;
const _: () = assert!(PART_ROWS == 8);
/// Weight rows per workgroup of `tiled`.
const TILE_M: u32 = 64;
/// Tokens per workgroup of `tiled`.
const TILE_N: usize = 32;

/// Mirrors `Params` in `linear.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct Params {
    pub m: u32,
    pub k: u32,
    pub n: u32,
    pub row_bytes: u32,
    pub scale_stride: u32,
    pub scale_block: u32,
    pub row0: u32,
    pub out_stride: u32,
    pub m1: u32,
    pub m2: u32,
    pub wg1: u32,
    pub wg2: u32,
    /// `*_multi_rope` (rope_qkv.wgsl): the rotation and the caches; else zeros.
    pub rope: RopeArgs,
    /// `ROUND = 2` ([`Rounding::InProduct`] with a norm): the RMS_NORM's eps; else 0.
    pub norm_eps: f32,
    pub _pad: [u32; 3],
}

/// `DTYPE` in `linear.wgsl`, or `None` for a dtype LINEAR does not take.
fn dtype_code(d: DType) -> Option<u32> {
    Some(match d {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::BF16 => 2,
        DType::Q4_0 => 3,
        DType::Q4_1 => 4,
        DType::Q8_0 => 5,
        DType::TQ1_0 | DType::TQ2_0 | DType::I2_S => 6,
        _ => return None,
    })
}

fn too_large(what: &str) -> GpuError {
    GpuError::Unsupported { op: "LINEAR", what: format!("{what} beyond 32-bit indexing") }
}

/// Whether a LINEAR's dispatches begin with the int8-block rounding of its x.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Rounding {
    /// An earlier dispatch (a fused norm, the first LINEAR of the group) filled the scratch
    /// buffer, with no dispatch between; also for f32 activations, which need none.
    Done,
    /// `quantize_blocks` first (when the activations ask for int8 blocks); it writes x̂ only
    /// when `xhat` (some product of the scratch reads it: [`reads_xhat`]).
    Here { xhat: bool },
    /// No rounding dispatch: the one-token INT8 product rounds the blocks of x it multiplies
    /// itself (`ROUND` in linear.wgsl), after `norm` when there is one (the RMS_NORM that
    /// writes x, whose own dispatch is then skipped). With f32 activations there is nothing
    /// to round: the one-token product only applies `norm` (always given then) to each
    /// element it multiplies. Only where [`rounds_in_product`] says.
    InProduct { norm: Option<ProductNorm> },
}

/// The RMS_NORM a product applies to its x before rounding it ([`Rounding::InProduct`]):
/// the norm's input, weight and eps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ProductNorm {
    pub x: TensorId,
    pub weight: TensorId,
    pub eps: f32,
}

impl ProductNorm {
    pub(crate) fn of(n: &RmsNorm) -> ProductNorm {
        ProductNorm { x: n.x, weight: n.weight, eps: n.eps }
    }
}

impl Rounding {
    /// `ROUND` in linear.wgsl.
    fn code(self) -> u32 {
        match self {
            Rounding::Done | Rounding::Here { .. } => 0,
            Rounding::InProduct { norm: None } => 1,
            Rounding::InProduct { norm: Some(_) } => 2,
        }
    }
}

/// The most elements that the products rounding their own x ([`Rounding::InProduct`]) may
/// round in all, `m · k` (a pair of products once): every product workgroup rounds the
/// whole row of x (and normalizes it first after an RMS_NORM), where a rounding dispatch did
/// it once, so this work grows with the rows times the row length. Measured on an H100
/// (docs/benchmarks.md), families in ms per decode token with 576-element rows, against the
/// products plus the rounding dispatches they replace: q/k/v after the norm (960 × 576 =
/// 553 k elements) 0.55 against 0.67, so rounding there pays; a pair after the norm
/// (1536 × 576 = 885 k) 0.75 against 0.69, and the product after it (576 × 1536 = 885 k)
/// about 0.02 ms more, so there it does not.
const IN_PRODUCT_MAX_ELEMENTS: u64 = 640 * 1024;

/// Whether the one-token LINEARs `ls` (one x) can each round their own x's int8 blocks
/// ([`Rounding::InProduct`]), after RMS_NORM `norm` (which writes that x, its output
/// otherwise unread) when given: a GPU (a CPU adapter pays the repeated rounding on its
/// cores, and takes `gemv_rows`), one-token INT8 products, little repeated rounding
/// ([`IN_PRODUCT_MAX_ELEMENTS`]; `paired`: two products, a row of each per
/// workgroup); with a norm, rows whose RMS_NORM runs with `gemv`'s workgroup size (so the
/// product computes its scale as RMS_NORM does) and one weight row length. Likewise
/// one-token products with f32 activations after a norm, which only apply it: no
/// [`IN_PRODUCT_MAX_ELEMENTS`] bound there, as each workgroup repeats only the norm's sum of
/// squares and two multiplies per element, against the absolute maxima, a 26-step division
/// per block and a rounding per element that bound the INT8 products.
pub(crate) fn rounds_in_product(ctx: &RecordCtx, ls: &[&Linear], norm: Option<&RmsNorm>, paired: bool) -> bool {
    if ctx.caps.cpu || ls.is_empty() {
        return false;
    }
    let mut rounded = 0u64;
    for (i, l) in ls.iter().enumerate() {
        let (Ok(w), Ok(out)) = (ctx.desc(l.weight), ctx.desc(l.out)) else { return false };
        let (m, k) = (w.shape.rows(), w.shape.cols());
        let n = out.shape.numel().checked_div(m).unwrap_or(0);
        let int8 = int8_products(l, w.dtype) == 1;
        // (Ternary weights' scales take binding 3, where the others' products read the norm's weight.)
        let normed_f32 = l.activations == LinearActivations::F32
            && norm.is_some()
            && dtype_code(w.dtype).is_some()
            && ternary_scales(w.dtype, k).is_none();
        if n != 1 || !(int8 || normed_f32) {
            return false;
        }
        if let Some(nm) = norm {
            let Ok(d) = ctx.desc(nm.x) else { return false };
            if d.shape.numel() != k || row_reduce::workgroup_size(k) != GEMV_WG {
                return false;
            }
        }
        if int8 && !(paired && i > 0) {
            rounded = rounded.saturating_add((m as u64) * (k as u64));
        }
    }
    rounded <= IN_PRODUCT_MAX_ELEMENTS
}

/// The dispatches of one LINEAR.
pub(crate) fn record(ctx: &RecordCtx, l: &Linear) -> Result<Vec<KernelCall>, GpuError> {
    let rounding = if rounds_in_product(ctx, &[l], None, false) {
        Rounding::InProduct { norm: None }
    } else {
        Rounding::Here { xhat: reads_xhat(ctx, l) }
    };
    record_with(ctx, l, rounding, None)
}

/// The dispatches of one LINEAR in a fused group: `rounding` says whether x is rounded to
/// int8 blocks here; with `epilogue`, the instructions fused after it (an
/// [`Epilogue::Argmax`] needs one token, and adds the second pass of the ARGMAX).
pub(crate) fn record_with(
    ctx: &RecordCtx,
    l: &Linear,
    rounding: Rounding,
    epilogue: Option<Epilogue>,
) -> Result<Vec<KernelCall>, GpuError> {
    let w = ctx.desc(l.weight)?;
    let (m, k) = (w.shape.rows(), w.shape.cols());
    // Tokens from the output [n, m] (x is [n, k], and k may be 0).
    let n = ctx.desc(l.out)?.shape.numel().checked_div(m).unwrap_or(0);
    if m == 0 || n == 0 {
        return Ok(vec![]);
    }
    let code = dtype_code(w.dtype)
        .ok_or_else(|| GpuError::Unsupported { op: "LINEAR", what: format!("{} weights", w.dtype) })?;
    let scales = ternary_scales(w.dtype, k);
    let row_bytes = w.dtype.row_bytes(k).ok_or_else(|| too_large("the weight row"))?;
    let u = |v: usize, what: &str| u32::try_from(v).map_err(|_| too_large(what));
    // Bytes per weight row of each part in the GPU layout: the codes (ternary: k/4) or the
    // file's blocks, and the ternary scales (I2_S's one scale is bound whole).
    let part_rows = layout::part_row_bytes(w);
    let (part0_row, part1_row) = (part_rows[0], part_rows.get(1).copied().unwrap_or(0));
    let windows = ctx.row_windows(w)?;
    let store = store(l, epilogue);
    let split = windows.len() > 1;
    // The kernels index elements and bytes of every operand in u32 (within a window).
    u(n.checked_mul(k.max(m)).ok_or_else(|| too_large("the activations"))?, "the activations")?;
    let mut calls = Vec::with_capacity(windows.len() + 1);
    if let Rounding::Here { xhat } = rounding {
        calls.extend(quantize_blocks(ctx, l, n, k, xhat)?);
    }
    let x = x_binding(l, n, k, rounding);
    for rows in windows {
        let wm = rows.len();
        u(wm.checked_mul(k.max(row_bytes)).ok_or_else(|| too_large("the weight"))?, "the weight")?;
        let params = Params {
            m: u(wm, "the row count")?,
            k: u(k, "the row length")?,
            n: u(n, "the token count")?,
            row_bytes: u(row_bytes, "the row size")?,
            scale_stride: u(scales.map_or(0, |s| s.row_stride), "the scale count")?,
            scale_block: u(scales.map_or(1, |s| s.block), "the scale block")?,
            row0: u(rows.start, "the row count")?,
            out_stride: u(m, "the row count")?,
            norm_eps: norm_eps(rounding),
            ..Params::default()
        };
        let window = |part: usize, bytes_per_row: u64| {
            if split {
                // A binding's size must be a multiple of 4: the last window of rows of an
                // odd byte count (Q8_0's 34 per block) is rounded up into the buffer's
                // padding (buffers are padded to whole words).
                let size = (wm as u64 * bytes_per_row).next_multiple_of(4);
                Storage::TensorRange(l.weight, part, rows.start as u64 * bytes_per_row, size)
            } else {
                Storage::Tensor(l.weight, part)
            }
        };
        let scales_binding = match scales {
            Some(sc) if sc.row_stride > 0 => window(1, part1_row),
            Some(_) => Storage::Tensor(l.weight, 1),
            None => norm_weight_or(rounding, window(0, part0_row)),
        };
        let mut storage = vec![(1, x), (2, window(0, part0_row)), (3, scales_binding), (4, Storage::Tensor(l.out, 0))];
        let subgroup = ctx.caps.subgroups;
        calls.push(match epilogue {
            Some(Epilogue::Argmax { write_out, .. }) => {
                if n != 1 {
                    return Err(GpuError::Wgpu("fusion plan: an ARGMAX epilogue on several tokens".to_string()));
                }
                storage.push((6, Storage::Scratch(ScratchKey::ArgmaxPartials, 8 * slots(m))));
                let shader = if subgroup { Shader::LinearArgmaxSubgroup } else { Shader::LinearArgmax };
                let write = ("WRITE_OUT", u32::from(write_out));
                let int8 = ("INT8", int8_products(l, w.dtype));
                let (entry, constants, workgroups) = if short_rows(ctx, k) {
                    let c = vec![("WG", GEMV_WG), ("LANES", GEMV_ROWS_LANES), ("DTYPE", code), write, int8];
                    ("gemv_rows_argmax", c, ctx.grid_1d(wm, PART_ROWS))
                } else {
                    let c = vec![("WG", GEMV_WG), ("DTYPE", code), ("PART_ROWS", PART_ROWS), write, int8];
                    ("gemv_argmax", c, ctx.grid_1d(wm.div_ceil(PART_ROWS as usize), 1))
                };
                KernelCall {
                    key: PipelineKey { shader, entry, constants },
                    params: bytemuck::bytes_of(&params).to_vec(),
                    storage,
                    workgroups,
                }
            }
            _ => {
                // The plain store, or a fused epilogue in its place (the same kernels).
                let int8 = int8_products(l, w.dtype);
                let (mut constants, (portable, subgroups)) =
                    (vec![("WG", GEMV_WG), ("DTYPE", code), ("INT8", int8)], store.0);
                constants.extend(round_constant(rounding));
                constants.extend(store.1.iter().copied());
                storage.extend(store.2.iter().copied());
                if n == 1 && short_rows(ctx, k) {
                    constants.push(("LANES", GEMV_ROWS_LANES));
                    KernelCall {
                        key: PipelineKey { shader: portable, entry: "gemv_rows", constants },
                        params: bytemuck::bytes_of(&params).to_vec(),
                        storage,
                        workgroups: ctx.grid_1d(wm, GEMV_WG / GEMV_ROWS_LANES),
                    }
                } else if n == 1 {
                    let shader = if subgroup { subgroups } else { portable };
                    KernelCall {
                        key: PipelineKey { shader, entry: "gemv", constants },
                        params: bytemuck::bytes_of(&params).to_vec(),
                        storage,
                        workgroups: ctx.grid_1d(wm, 1),
                    }
                } else {
                    let mut workgroups = ctx.grid_1d(wm, TILE_M);
                    workgroups[2] = u(n.div_ceil(TILE_N), "the token count")?;
                    if workgroups[2] > ctx.max_workgroups {
                        return Err(too_large("the token count"));
                    }
                    let entry = if int8 == 1 {
                        // Binding 3 (ternary scales, or the norm's weight) is not in its layout.
                        storage.retain(|(binding, _)| *binding != 3);
                        "tiled_int8"
                    } else {
                        "tiled"
                    };
                    KernelCall {
                        key: PipelineKey { shader: portable, entry, constants },
                        params: bytemuck::bytes_of(&params).to_vec(),
                        storage,
                        workgroups,
                    }
                }
            }
        });
    }
    if let Some(Epilogue::Argmax { ids, .. }) = epilogue {
        calls.push(argmax::partials(ctx, ids, slots(m))?);
    }
    Ok(calls)
}

/// What LINEAR `l`'s product kernels bind as x ([n, k]) when rounded as `rounding` says: the
/// tensor they round themselves (x, or the norm's input), else [`product_x`].
fn x_binding(l: &Linear, n: usize, k: usize, rounding: Rounding) -> Storage {
    match rounding {
        Rounding::InProduct { norm: Some(nm) } => Storage::Tensor(nm.x, 0),
        Rounding::InProduct { norm: None } => Storage::Tensor(l.x, 0),
        Rounding::Done | Rounding::Here { .. } => product_x(l, n, k),
    }
}

/// The `ROUND` constant of a product rounding as `rounding` says (none for 0, the default).
fn round_constant(rounding: Rounding) -> Option<(&'static str, u32)> {
    let code = rounding.code();
    (code != 0).then_some(("ROUND", code))
}

/// `Params::norm_eps` of a product rounding as `rounding` says.
fn norm_eps(rounding: Rounding) -> f32 {
    match rounding {
        Rounding::InProduct { norm: Some(nm) } => nm.eps,
        _ => 0.0,
    }
}

/// What LINEAR `l`'s product kernels read as x ([n, k]): x itself, or x rounded to int8
/// blocks in the scratch buffer.
fn product_x(l: &Linear, n: usize, k: usize) -> Storage {
    match l.activations {
        LinearActivations::F32 => Storage::Tensor(l.x, 0),
        LinearActivations::Int8Blocks => Storage::Scratch(ScratchKey::LinearActivations, int8_scratch_bytes(n, k)),
    }
}

/// Bytes of the int8-block scratch buffer of an [n, k] x (`act_quant.wgsl`'s layout): x̂
/// (`4nk`), each 32-element block's codes (8 words) and its scale (1 word).
pub(crate) fn int8_scratch_bytes(n: usize, k: usize) -> u64 {
    let blocks = k.div_ceil(LINEAR_ACT_BLOCK) as u64;
    4 * (n as u64) * (k as u64 + 9 * blocks)
}

/// `INT8` in `linear.wgsl`: 1 when the products of `l` against weights of `dtype` multiply
/// the int8-block codes of x as integers: Q4_0, Q4_1 or Q8_0 weights and int8-block
/// activations; one token in `gemv` (or `gemv_rows`, and their ARGMAX-fused forms), several in
/// `tiled_int8`.
fn int8_products(l: &Linear, dtype: DType) -> u32 {
    let quantized = matches!(dtype, DType::Q4_0 | DType::Q4_1 | DType::Q8_0);
    u32::from(quantized && l.activations == LinearActivations::Int8Blocks)
}

/// Whether LINEAR `l`'s product reads x̂ from the int8-block scratch buffer: every product
/// with int8-block activations but the INT8 ones ([`int8_products`]), which read only the
/// codes and scales. (True for what the dispatch would reject, and for f32 activations,
/// which have no scratch: the safe answer.)
pub(crate) fn reads_xhat(ctx: &RecordCtx, l: &Linear) -> bool {
    let Ok(w) = ctx.desc(l.weight) else { return true };
    int8_products(l, w.dtype) == 0
}

/// The `quantize_blocks` dispatch rounding LINEAR `l`'s x ([n, k]) to int8 blocks, when its
/// activations ask for it; x̂ written only when `xhat`.
fn quantize_blocks(
    ctx: &RecordCtx,
    l: &Linear,
    n: usize,
    k: usize,
    xhat: bool,
) -> Result<Option<KernelCall>, GpuError> {
    if l.activations != LinearActivations::Int8Blocks || k == 0 {
        return Ok(None);
    }
    let u = |v: usize, what: &str| u32::try_from(v).map_err(|_| too_large(what));
    let params = Params { k: u(k, "the row length")?, n: u(n, "the token count")?, ..Params::default() };
    let constants = vec![("WG", GEMV_WG), ("WRITE_XHAT", u32::from(xhat))];
    Ok(Some(KernelCall {
        key: PipelineKey { shader: Shader::Linear, entry: "quantize_blocks", constants },
        params: bytemuck::bytes_of(&params).to_vec(),
        storage: vec![(1, Storage::Tensor(l.x, 0)), (5, product_x(l, n, k))],
        workgroups: ctx.grid_1d(n * k.div_ceil(LINEAR_ACT_BLOCK) * LINEAR_ACT_BLOCK / ACT_SLOTS, GEMV_WG),
    }))
}

/// A one-token LINEAR whose weight fits one binding: what `linear_multi.wgsl` needs to
/// compute it beside others in one dispatch.
pub(crate) struct OneToken {
    params: Params,
    dtype: DType,
    /// The weight's words and its ternary scales (part 0 again, unread, for other dtypes).
    weight: [Storage; 2],
}

/// `Some` when LINEAR `l` has one token (n = 1) and rows whose weight fits one binding; `None`
/// otherwise, and for anything its own dispatch would reject.
pub(crate) fn one_token(ctx: &RecordCtx, l: &Linear) -> Option<OneToken> {
    let w = ctx.desc(l.weight).ok()?;
    let (m, k) = (w.shape.rows(), w.shape.cols());
    if m == 0 || k == 0 || ctx.desc(l.out).ok()?.shape.numel() != m {
        return None;
    }
    dtype_code(w.dtype)?;
    let scales = ternary_scales(w.dtype, k);
    let row_bytes = w.dtype.row_bytes(k)?;
    if ctx.row_windows(w).ok()?.len() != 1 {
        return None;
    }
    m.checked_mul(k.max(row_bytes)).and_then(|v| u32::try_from(v).ok())?;
    let params = Params {
        m: u32::try_from(m).ok()?,
        k: u32::try_from(k).ok()?,
        n: 1,
        row_bytes: u32::try_from(row_bytes).ok()?,
        scale_stride: u32::try_from(scales.map_or(0, |s| s.row_stride)).ok()?,
        scale_block: u32::try_from(scales.map_or(1, |s| s.block)).ok()?,
        out_stride: u32::try_from(m).ok()?,
        ..Params::default()
    };
    let part1 = if scales.is_some() { 1 } else { 0 };
    Some(OneToken { params, dtype: w.dtype, weight: [Storage::Tensor(l.weight, 0), Storage::Tensor(l.weight, part1)] })
}

/// Whether one-token LINEARs `ls` can share one `linear_multi.wgsl` dispatch: each
/// [`one_token`], one weight dtype, one row length and one activations option, and (for
/// the gated pair) one row count.
pub(crate) fn mergeable(ctx: &RecordCtx, ls: &[&Linear], same_rows: bool) -> bool {
    let Some(first) = ls.first() else { return false };
    let Some(a) = one_token(ctx, first) else { return false };
    ls[1..].iter().all(|l| {
        one_token(ctx, l).is_some_and(|b| {
            b.dtype == a.dtype
                && b.params.k == a.params.k
                && l.activations == first.activations
                && (!same_rows || b.params.m == a.params.m)
        })
    })
}

/// Storage buffers `gemv_multi` binds: x, three weights' words and scales, three outputs
/// (`gemv_multi_rope` adds [`rope_qkv::STORAGE_BUFFERS`]).
pub(crate) const MULTI_STORAGE_BUFFERS: u32 = 10;
/// Storage buffers `gemv_gated` binds: x, two weights' words and scales (the second
/// again in the third's place: `wword` names all three), two outputs.
pub(crate) const GATED_STORAGE_BUFFERS: u32 = 9;

/// What a `linear_multi.wgsl` dispatch computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MultiKind {
    /// Three products (`gemv_multi`).
    Products,
    /// Three products with ROPE and KV_WRITE as their epilogue (`gemv_multi_rope`).
    ProductsRope,
    /// Two products with an activation and a multiply as their epilogue (`gemv_gated`).
    Gated,
}

/// The shader, entry point and constants of a `linear_multi.wgsl` dispatch, and its rows (or
/// rope items) per workgroup: the `gemv_rows` forms on short rows of a CPU adapter, as for
/// one LINEAR.
fn multi_kernel(ctx: &RecordCtx, kind: MultiKind, k: usize) -> (Shader, &'static str, Vec<(&'static str, u32)>, u32) {
    let mut constants = vec![("WG", GEMV_WG)];
    let (rows_entry, gemv_entry) = match kind {
        MultiKind::Products => ("gemv_rows_multi", "gemv_multi"),
        MultiKind::ProductsRope => ("gemv_rows_multi_rope", "gemv_multi_rope"),
        MultiKind::Gated => ("gemv_rows_gated", "gemv_gated"),
    };
    if short_rows(ctx, k) {
        constants.push(("LANES", GEMV_ROWS_LANES));
        // gemv_rows reduces in workgroup memory, whatever the device.
        return (Shader::LinearMulti, rows_entry, constants, PART_ROWS);
    }
    let shader = if ctx.caps.subgroups { Shader::LinearMultiSubgroup } else { Shader::LinearMulti };
    (shader, gemv_entry, constants, 1)
}

/// LINEAR(q) ; LINEAR(k) ; LINEAR(v) of one token reading one x: their products in one
/// dispatch (`gemv_multi`), after the int8-block rounding of x as `rounding` says; with `rope`,
/// the rotation of q and k and the cache writes as its epilogue (`gemv_multi_rope`: an item
/// per rotation pair of q or k and per row of v). The caller checks [`mergeable`].
pub(crate) fn multi_product(
    ctx: &RecordCtx,
    ls: [&Linear; 3],
    rounding: Rounding,
    rope: Option<&RopeEpilogue>,
) -> Result<Vec<KernelCall>, GpuError> {
    let ts: Vec<OneToken> = ls
        .iter()
        .map(|l| one_token(ctx, l))
        .collect::<Option<_>>()
        .ok_or_else(|| GpuError::Wgpu("fusion plan: LINEARs that one dispatch cannot merge".to_string()))?;
    let k = ts[0].params.k as usize;
    let kind = if rope.is_some() { MultiKind::ProductsRope } else { MultiKind::Products };
    let (shader, entry, mut constants, rows_per_wg) = multi_kernel(ctx, kind, k);
    let wgs: Vec<u32> = ts.iter().map(|t| t.params.m.div_ceil(rows_per_wg)).collect();
    let mut params = ts[0].params;
    params.norm_eps = norm_eps(rounding);
    constants.extend(round_constant(rounding));
    (params.m1, params.m2) = (ts[1].params.m, ts[2].params.m);
    params.wg1 = wgs[0];
    params.wg2 = wgs[0].checked_add(wgs[1]).ok_or_else(|| too_large("the row count"))?;
    let products = params.wg2.checked_add(wgs[2]).ok_or_else(|| too_large("the row count"))? as usize;
    constants.push(("DTYPE", dtype_code(ts[0].dtype).unwrap_or(0)));
    constants.push(("INT8", int8_products(ls[0], ts[0].dtype)));
    let mut calls: Vec<KernelCall> = Vec::new();
    if let Rounding::Here { xhat } = rounding {
        calls.extend(quantize_blocks(ctx, ls[0], 1, k, xhat)?);
    }
    let t = |id| Storage::Tensor(id, 0);
    let [w0, s0] = ts[0].weight;
    let [w1, s1] = ts[1].weight;
    let [w2, s2] = ts[2].weight;
    let mut storage = vec![
        (1, x_binding(ls[0], 1, k, rounding)),
        (2, w0),
        (3, norm_weight_or(rounding, s0)),
        (4, t(ls[0].out)),
        (10, w1),
        (11, s1),
        (12, w2),
        (13, s2),
        (14, t(ls[1].out)),
        (15, t(ls[2].out)),
    ];
    let groups = match rope {
        None => products,
        Some(r) => {
            params.rope = r.args(ctx)?;
            constants.extend(r.constants());
            storage.extend(r.storage());
            rope_qkv::items(params.m, params.m1, params.m2).div_ceil(rows_per_wg as usize)
        }
    };
    calls.push(KernelCall {
        key: PipelineKey { shader, entry, constants },
        params: bytemuck::bytes_of(&params).to_vec(),
        storage,
        workgroups: ctx.grid_1d(groups, 1),
    });
    Ok(calls)
}

/// LINEAR(g) ; LINEAR(u) ; ACT(g, g) ; ELEMENT_MUL(g, g, u) of one token in one dispatch
/// (`gemv_gated`), after the int8-block rounding of x as `rounding` says; `u` written only when
/// `write_out`. The caller checks [`mergeable`] (with one row count).
pub(crate) fn gated_product(
    ctx: &RecordCtx,
    (g, u): (&Linear, &Linear),
    op: UnaryOp,
    rounding: Rounding,
    write_out: bool,
) -> Result<Vec<KernelCall>, GpuError> {
    let (Some(tg), Some(tu)) = (one_token(ctx, g), one_token(ctx, u)) else {
        return Err(GpuError::Wgpu("fusion plan: LINEARs that one dispatch cannot merge".to_string()));
    };
    let k = tg.params.k as usize;
    let (shader, entry, mut constants, rows_per_wg) = multi_kernel(ctx, MultiKind::Gated, k);
    constants.extend([
        ("DTYPE", dtype_code(tg.dtype).unwrap_or(0)),
        ("INT8", int8_products(g, tg.dtype)),
        ("WRITE_OUT", u32::from(write_out)),
        ("UNARY_OP", op as u32),
        ("BINARY_OP", BinaryOp::Mul as u32),
    ]);
    constants.extend(round_constant(rounding));
    // Weight 1 (u) has weight 0's rows.
    let params = Params { m1: tg.params.m, norm_eps: norm_eps(rounding), ..tg.params };
    let mut calls: Vec<KernelCall> = Vec::new();
    if let Rounding::Here { xhat } = rounding {
        calls.extend(quantize_blocks(ctx, g, 1, k, xhat)?);
    }
    let [w0, s0] = tg.weight;
    let [w1, s1] = tu.weight;
    calls.push(KernelCall {
        key: PipelineKey { shader, entry, constants },
        params: bytemuck::bytes_of(&params).to_vec(),
        storage: vec![
            (1, x_binding(g, 1, k, rounding)),
            (2, w0),
            (3, norm_weight_or(rounding, s0)),
            (4, Storage::Tensor(g.out, 0)),
            (10, w1),
            (11, s1),
            (12, w1),
            (13, s1),
            (14, Storage::Tensor(u.out, 0)),
        ],
        workgroups: ctx.grid_1d(tg.params.m.div_ceil(rows_per_wg) as usize, 1),
    });
    Ok(calls)
}

/// Binding 3 of a product rounding as `rounding` says: the norm's weight (`ROUND = 2`, whose
/// weights have no ternary scales and leave binding 3 unread), else `scales`.
fn norm_weight_or(rounding: Rounding, scales: Storage) -> Storage {
    match rounding {
        Rounding::InProduct { norm: Some(nm) } => Storage::Tensor(nm.weight, 0),
        _ => scales,
    }
}

/// The shaders (portable, subgroup), the extra override constants and the extra storage
/// bindings of the product kernels' store: `product_store.wgsl`, or an epilogue in its
/// place (`residual_add.wgsl`, `act_mul.wgsl`; bindings 8 and 9 as for BITLINEAR).
#[allow(clippy::type_complexity)]
fn store(l: &Linear, epilogue: Option<Epilogue>) -> ((Shader, Shader), Vec<(&'static str, u32)>, Vec<(u32, Storage)>) {
    match epilogue {
        Some(Epilogue::Add { residual, sum, write_out }) => {
            let inplace = sum == residual;
            // In place, the weight stands in at binding 8 (read-only, unread).
            let residual = if inplace { Storage::Tensor(l.weight, 0) } else { Storage::Tensor(residual, 0) };
            (
                (Shader::LinearAdd, Shader::LinearAddSubgroup),
                vec![("WRITE_OUT", u32::from(write_out)), ("RES_INPLACE", u32::from(inplace))],
                vec![(8, residual), (9, Storage::Tensor(sum, 0))],
            )
        }
        Some(Epilogue::ActMul { gated, op, write_out }) => (
            (Shader::LinearActMul, Shader::LinearActMulSubgroup),
            vec![("WRITE_OUT", u32::from(write_out)), ("UNARY_OP", op as u32), ("BINARY_OP", BinaryOp::Mul as u32)],
            vec![(9, Storage::Tensor(gated, 0))],
        ),
        None | Some(Epilogue::Argmax { .. }) => ((Shader::Linear, Shader::LinearSubgroup), vec![], vec![]),
    }
}

/// The (key, index) slots of an ARGMAX-fused LINEAR of `m` rows: one per [`PART_ROWS`] rows.
fn slots(m: usize) -> u64 {
    m.div_ceil(PART_ROWS as usize) as u64
}
