//! TOP_K (`top_k.wgsl`): each row's first `k` elements in the ISA's rank order. Exact: values
//! are compared as order-preserving integer keys and copied as bits.
//!
//! A selection in levels, one dispatch each. A level cuts each row's keys (the row of `x`,
//! then the previous level's candidates) into slices of `WG · 16` keys (4096 with 256
//! invocations, 1024 with 64 for short inputs), one workgroup per slice, which writes its
//! slice's top `min(k, slice)` in rank order; a level with one slice per row is the last and
//! writes `values` and `ids`. Each level divides a row's keys by at least 16 (`k ≤ 256`), so
//! a 128256-entry row takes two dispatches (32 slices, then one of at most 32·k
//! candidates ≤ 8192 → three for k > 128). Candidates ping-pong between two scratch buffers
//! of 8 bytes per key. Each workgroup does `min(k, slice)` rounds of a tree reduction in
//! workgroup memory (8 barriers at 256 invocations): the cost grows with `k`, not with the
//! row, beyond one read of it.
//!
//! `k` is at most [`MAX_K`]: a larger `k` is [`GpuError::Unsupported`] when the program is
//! compiled. A tensor `x` larger than one binding is split in row windows, each window's
//! levels dispatched in turn (`values` and `ids` are bound whole and written at the window's
//! rows).
//!
//! With `lse`, one more dispatch per window (`lse` in `top_k.wgsl`): one workgroup per row
//! folds its elements into per-invocation (max, Σ e^(x − max)) pairs, merged in a fixed tree,
//! so a row's bits depend on its length alone; it reads the row once more.
//!
//! Bytes per call, for `rows × m`: reads `4·rows·m` plus about `16·rows·k·⌈m/4096⌉` of
//! candidates, writes `8·rows·k` (plus the candidates).

use purebee_isa::ops::TopK;

use super::{row_reduce, KernelCall, RecordCtx, ScratchKey, Shader, Storage};
use crate::pipelines::PipelineKey;
use crate::GpuError;

/// The largest `k` the kernel takes.
pub(crate) const MAX_K: u32 = 256;

/// Keys per invocation (`E` in `top_k.wgsl`).
const KEYS_PER_INVOCATION: usize = 16;

/// Mirrors `Params` in `top_k.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct Params {
    pub rows: u32,
    pub row0: u32,
    pub m: u32,
    pub count: u32,
    pub k: u32,
    pub out_count: u32,
    pub slices: u32,
    pub _pad: u32,
}

/// The dispatches of one TOP_K: per row window of `x`, one per level.
pub(crate) fn record(ctx: &RecordCtx, t: &TopK) -> Result<Vec<KernelCall>, GpuError> {
    let desc = ctx.desc(t.x)?;
    let (rows, m) = (desc.shape.rows(), desc.shape.cols());
    if t.k > MAX_K {
        return Err(GpuError::Unsupported { op: "TOP_K", what: format!("k = {} (at most {MAX_K})", t.k) });
    }
    let (_, m32) = row_reduce::dims_u32("TOP_K", rows, m)?;
    let k = t.k as usize;
    let row_bytes = 4 * m as u64;
    // F32: `layout::part_row_bytes` is `row_bytes`, the windows' stride below.
    let windows = ctx.row_windows(desc)?;
    let whole = windows.len() == 1;
    let mut calls = Vec::new();
    for w in windows {
        let n = w.len();
        let x = if whole {
            Storage::Tensor(t.x, 0)
        } else {
            Storage::TensorRange(t.x, 0, w.start as u64 * row_bytes, n as u64 * row_bytes)
        };
        let (mut from, mut to) = (ScratchKey::TopKCandidatesA, ScratchKey::TopKCandidatesB);
        let (mut count, mut first) = (m, true);
        loop {
            let wg = if count <= 1024 { 64 } else { 256 };
            let slice = wg as usize * KEYS_PER_INVOCATION;
            let slices = count.div_ceil(slice);
            let last = slices == 1;
            let out_count = (slices - 1) * k + k.min(count - (slices - 1) * slice);
            let params = Params {
                rows: n as u32,
                row0: w.start as u32,
                m: m32,
                count: count as u32,
                k: t.k,
                out_count: out_count as u32,
                slices: slices as u32,
                _pad: 0,
            };
            let candidates_in = if first { 8 } else { (n * count * 8) as u64 };
            let candidates_out = if last { 8 } else { (n * out_count * 8) as u64 };
            calls.push(KernelCall {
                key: PipelineKey {
                    shader: Shader::TopK,
                    entry: "top_k",
                    constants: vec![("WG", wg), ("FROM_X", u32::from(first)), ("FINAL", u32::from(last))],
                },
                params: bytemuck::bytes_of(&params).to_vec(),
                storage: vec![
                    (1, x),
                    (2, Storage::Scratch(from, candidates_in)),
                    (3, Storage::Scratch(to, candidates_out)),
                    (4, Storage::Tensor(t.values, 0)),
                    (5, Storage::Tensor(t.ids, 0)),
                ],
                workgroups: ctx.grid_1d(n * slices, 1),
            });
            if last {
                break;
            }
            (count, first) = (out_count, false);
            std::mem::swap(&mut from, &mut to);
        }
        if let Some(lse) = t.lse {
            let params = Params {
                rows: n as u32,
                row0: w.start as u32,
                m: m32,
                count: m32,
                k: t.k,
                out_count: 0,
                slices: 1,
                _pad: 0,
            };
            // The workgroup's size depends on the row's length alone (a row's bits too).
            let wg = if m <= 1024 { 64 } else { 256 };
            calls.push(KernelCall {
                key: PipelineKey { shader: Shader::TopK, entry: "lse", constants: vec![("WG", wg)] },
                params: bytemuck::bytes_of(&params).to_vec(),
                storage: vec![(1, x), (6, Storage::Tensor(lse, 0))],
                workgroups: ctx.grid_1d(n, 1),
            });
        }
    }
    Ok(calls)
}
