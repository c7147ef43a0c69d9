//! ATTENTION (`attention.wgsl`): an online-softmax kernel over tiles of [`TILE`] cache
//! positions. A workgroup takes one query row and up to [`MAX_HEADS`] query heads of one kv
//! head, so that the heads of a group share each key and value row it loads. When there
//! are too few such workgroups to fill the GPU (decode), each row's positions are split
//! into up to [`splits`] chunks (sized for the whole cache; the kernel gives each chunk at
//! least a [`TILE`] of the row's positions, so early in a long context fewer chunks have
//! work) and a second dispatch merges the chunks' partial results from the program's scratch
//! buffer; with one chunk (prefill) the first dispatch writes the output itself.
//!
//! Bytes per call, for `n` query rows at positions `p_r = pos + r`, `n_kv` kv heads of
//! `head_dim` (`hd`), `c` workgroups per (row, kv head) (`ceil(group / MAX_HEADS)`), `S`
//! splits: reads `4·n·n_head·hd` of queries and, per (row, kv head, c), `4·(p_r + 1)·hd` of
//! keys and as many of values: `8·hd·n_kv·c·Σ_r (p_r + 1)` in all, of which the distinct
//! bytes are `8·(pos + n)·n_kv·hd` (later rows re-read the same cache rows, from cache
//! memory on a GPU); writes `4·n·n_head·hd`. With `S > 1`, also writes and reads back
//! `4·n_head·(hd + 2)·Σ_r S_r` of partial results, `S_r` the splits holding positions
//! (`S` from [`TILE`]`·S` positions on, fewer before). Decode at position 4095 with 20
//! heads, 5 kv heads and `hd = 128`: 20 MiB of cache read once per call, 64 splits,
//! 666 KB of partials written and read; at position 100 of the same 4096-row cache, 4 splits
//! and 42 KB.
//!
//! Paged rows (`CacheRows::Paged`: each row its own sequence and position, its positions'
//! cache rows through its sequence's page table, `attention_paged.wgsl`) run the same two
//! kernels, with splits fixed by the row's position alone: always [`MAX_SPLITS`] shares of
//! at least [`PAGED_MIN_CHUNK`] positions, always merged by `combine`, so a row's bits do not
//! depend on the other rows of the instruction (how many, which sequences, which positions).
//! The scratch buffer holds, per (row, head), as many slots as the longest row the page table
//! can hold uses. The bytes are those above, with each row's own positions in place of
//! `pos + r`, plus 12 bytes per position a tile looks up (its position, sequence and page).

use purebee_isa::ops::{Attention, CacheRows, LINEAR_ACT_BLOCK};
use purebee_memory::DType;

use super::{linear, ArgSlot, KernelCall, RecordCtx, ScratchKey, Shader, Storage, ARG_CONST};
use crate::pipelines::PipelineKey;
use crate::GpuError;

/// Threads per workgroup (`WG` in `attention.wgsl`).
const WG: usize = 128;

/// Cache positions per tile (`TILE` in `attention.wgsl`).
pub(crate) const TILE: usize = 32;

/// At most this many query heads per workgroup (`MAX_HEADS`: the kernel keeps one running
/// sum per head in each thread's registers).
const MAX_HEADS: usize = 8;

/// The workgroup memory the kernel may use: WebGPU's guaranteed minimum.
const WORKGROUP_BYTES: usize = 16384;

/// Split the positions until about this many workgroups run (enough to fill a large GPU).
const TARGET_WORKGROUPS: usize = 512;

/// At most this many splits (the merge reads every working split's slot). attention.wgsl's
/// `MAX_SPLITS` sizes `combine`'s per-split arrays, one invocation per split (its WG is 128).
const MAX_SPLITS: usize = 64;

/// The fewest positions of a paged row's split (its last may have fewer): a row attending
/// to `L` positions is split into `ceil(L / max(ceil(L / MAX_SPLITS), PAGED_MIN_CHUNK))`.
pub(crate) const PAGED_MIN_CHUNK: usize = 128;

/// Mirrors `Params` in `attention.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct Params {
    /// Query rows.
    pub n: u32,
    /// Query heads.
    pub n_head: u32,
    /// Query heads per kv head.
    pub group: u32,
    /// Workgroups per (row, kv head).
    pub chunks: u32,
    /// `n_head · head_dim`.
    pub q_width: u32,
    /// `n_kv_head · head_dim`.
    pub kv_width: u32,
    /// Rows of the caches.
    pub n_ctx: u32,
    /// Chunks per row's positions.
    pub splits: u32,
    /// `1 / sqrt(head_dim)`.
    pub scale: f32,
    /// The position of query row 0 (consecutive rows).
    pub pos: ArgSlot,
    /// Floats per split slot: `head_dim + 2`.
    pub slot: u32,
    /// Slots per (row, head) in the scratch buffer (and `partial`'s workgroups per (row,
    /// kv head, chunk)).
    pub stride: u32,
    /// The fewest positions of a split (but a row's last).
    pub min_chunk: u32,
    /// Paged rows: positions per page.
    pub page_size: u32,
    /// Paged rows: the page table's columns.
    pub max_pages: u32,
    /// Paged rows: the page table's rows (at least 1).
    pub n_seq: u32,
    /// Paged rows: the largest position the page table holds, `max_pages · page_size − 1`
    /// (at most `u32::MAX`).
    pub max_pos: u32,
    /// Paged rows: the pages wholly inside the cache, `n_ctx / page_size` (at least 1).
    pub pages_in_cache: u32,
    /// Padding to the WGSL struct's size (a multiple of 16 bytes).
    pub _pad: u32,
}

/// How a workgroup covers a head: `cols` threads take a dimension each (`min(hd, WG)`),
/// `row_groups` of them side by side take every `row_groups`-th position of a tile.
fn value_threads(hd: usize) -> (usize, usize) {
    let cols = hd.clamp(1, WG);
    (cols, (WG / cols).min(TILE))
}

/// The kernel's workgroup memory, in 4-byte words, for `heads` heads of `hd` (its
/// `var<workgroup>` arrays; paged rows add a tile's cache rows).
fn workgroup_floats(heads: usize, hd: usize, paged: bool) -> usize {
    let (_, row_groups) = value_threads(hd);
    heads * (hd + WG + 2 * TILE + row_groups * hd + 3) + if paged { TILE } else { 0 }
}

/// Query heads per workgroup: the whole group when it fits [`MAX_HEADS`] and the workgroup
/// memory, otherwise the most that do; `None` when not even one head's arrays fit.
fn heads_per_workgroup(group: usize, hd: usize, paged: bool) -> Option<usize> {
    (1..=group.clamp(1, MAX_HEADS)).rev().find(|&h| workgroup_floats(h, hd, paged) * 4 <= WORKGROUP_BYTES)
}

/// How many chunks each row's positions are split into: 1 when the workgroups of the rows
/// alone (`per_split`) reach [`TARGET_WORKGROUPS`], otherwise enough to reach it, but no
/// more than [`MAX_SPLITS`] and no more than one per [`TILE`] rows of the cache (a split
/// gets at least a full tile at full context).
pub(crate) fn splits(per_split: usize, n_ctx: usize) -> usize {
    let per_split = per_split.max(1);
    if per_split >= TARGET_WORKGROUPS {
        return 1;
    }
    TARGET_WORKGROUPS.div_ceil(per_split).min(MAX_SPLITS).min(n_ctx.div_ceil(TILE)).max(1)
}

/// How one ATTENTION runs: its kernels' parameters and constants, and its grid.
struct Layout {
    params: Params,
    hd: usize,
    heads: usize,
    /// Workgroups of `partial`, and the (row, head) pairs `combine` merges.
    groups: usize,
    rows_heads: usize,
    /// Splits of a row's positions (1: `partial` writes the output, no `combine`).
    splits: usize,
    /// Paged rows (`attention_paged.wgsl`).
    paged: bool,
}

/// ATTENTION `a`'s layout; the typed error of a shape the kernels cannot take.
fn layout(ctx: &RecordCtx, a: &Attention) -> Result<Layout, GpuError> {
    let q = &ctx.desc(a.q)?.shape;
    let cache = &ctx.desc(a.k_cache)?.shape;
    let (n, q_width, n_ctx, kv_width) = (q.rows(), q.cols(), cache.rows(), cache.cols());
    // The ISA checked that head_dim divides both widths and n_kv_head divides n_head.
    let hd = (a.head_dim as usize).max(1);
    let (n_head, n_kv) = (q_width / hd, (kv_width / hd).max(1));
    let group = (n_head / n_kv).max(1);
    let too_big = |what: String| GpuError::Unsupported { op: "ATTENTION", what };
    let paged = matches!(a.rows, CacheRows::Paged(_));
    let heads = heads_per_workgroup(group, hd, paged).ok_or_else(|| {
        too_big(format!("a head of {hd} elements (its tile does not fit {WORKGROUP_BYTES} bytes of workgroup memory)"))
    })?;
    let chunks = group.div_ceil(heads);
    let too_many = || too_big(format!("{n} rows of {n_head} heads"));
    let per_split = n.checked_mul(n_kv).and_then(|g| g.checked_mul(chunks)).ok_or_else(too_many)?;
    let u = |v: usize| u32::try_from(v).map_err(|_| too_big(format!("a size of {v} (over 2^32)")));
    let mut params = Params {
        n: u(n)?,
        n_head: u(n_head)?,
        group: u(group)?,
        chunks: u(chunks)?,
        q_width: u(q_width)?,
        kv_width: u(kv_width)?,
        n_ctx: u(n_ctx)?,
        splits: 1,
        scale: (1.0 / (hd as f64).sqrt()) as f32,
        pos: ArgSlot { value: 0, param: ARG_CONST },
        slot: u(hd + 2)?,
        stride: 1,
        min_chunk: TILE as u32,
        page_size: 1,
        max_pages: 1,
        n_seq: 1,
        max_pos: 0,
        pages_in_cache: 1,
        _pad: 0,
    };
    // Splits per row, and slots per (row, head).
    let (s, stride) = match a.rows {
        CacheRows::Consecutive(start) => {
            params.pos = ctx.u32_arg(start);
            let s = splits(per_split, n_ctx);
            (s, s)
        }
        CacheRows::Paged(rows) => {
            let table = &ctx.desc(rows.pages)?.shape;
            let (n_seq, max_pages) = (table.rows(), table.cols());
            u(table.numel())?;
            let page = rows.page_size.max(1) as u64;
            // Positions are u32: a row attends to at most 2^32 of them.
            let longest = (max_pages as u64).saturating_mul(page).min(1 << 32);
            params.page_size = page as u32;
            params.max_pages = u(max_pages.max(1))?;
            params.n_seq = u(n_seq.max(1))?;
            params.max_pos = longest.saturating_sub(1) as u32;
            params.pages_in_cache = (n_ctx as u64 / page).max(1) as u32;
            params.min_chunk = PAGED_MIN_CHUNK as u32;
            let stride = (longest.div_ceil(PAGED_MIN_CHUNK as u64) as usize).clamp(1, MAX_SPLITS);
            (MAX_SPLITS, stride)
        }
    };
    params.splits = u(s)?;
    params.stride = u(stride)?;
    let groups = per_split.checked_mul(stride).ok_or_else(too_many)?;
    // The kernels index workgroups with u32.
    u(groups)?;
    let rows_heads = n.saturating_mul(n_head);
    u(rows_heads)?;
    Ok(Layout { params, hd, heads, groups, rows_heads, splits: s, paged })
}

/// Whether `combine_rounded` can round ATTENTION `a`'s output to int8 blocks as it writes
/// it (fuse/, pattern AttentionRounding): consecutive rows whose positions are split (so
/// `combine` runs) and each head holds whole blocks of [`LINEAR_ACT_BLOCK`]. (Paged rows
/// run unfused.)
pub(crate) fn rounds_blocks(ctx: &RecordCtx, a: &Attention) -> bool {
    layout(ctx, a).is_ok_and(|l| !l.paged && l.splits > 1 && l.hd % LINEAR_ACT_BLOCK == 0)
}

/// The dispatches: `partial`, then `combine` when the positions are split.
pub(crate) fn record(ctx: &RecordCtx, a: &Attention) -> Result<Vec<KernelCall>, GpuError> {
    record_with(ctx, a, None)
}

/// [`record`], with `combine_rounded` in place of `combine` when `rounding` is
/// `Some(xhat)`: the output is also rounded to int8 blocks into the LINEAR activations'
/// scratch buffer, with x̂ when `xhat` (act_quant.wgsl's WRITE_XHAT). Only where
/// [`rounds_blocks`].
pub(crate) fn record_with(ctx: &RecordCtx, a: &Attention, rounding: Option<bool>) -> Result<Vec<KernelCall>, GpuError> {
    let Layout { params, hd, heads, groups, rows_heads, splits: s, paged } = layout(ctx, a)?;
    let (cols, row_groups) = value_threads(hd);
    // Where the rows are: the run-time parameters (the position), or the paged tables
    // (`partial` reads all three, `combine` the positions).
    let (shader, rows, merge_rows) = match a.rows {
        CacheRows::Consecutive(_) => (Shader::Attention, vec![(5, Storage::RunParams)], vec![(5, Storage::RunParams)]),
        CacheRows::Paged(r) => (
            Shader::AttentionPaged,
            vec![(5, Storage::Tensor(r.pos, 0)), (9, Storage::Tensor(r.seq, 0)), (10, Storage::Tensor(r.pages, 0))],
            vec![(5, Storage::Tensor(r.pos, 0))],
        ),
    };
    // F16 caches: read two elements to a word and widened in the kernel.
    let k_f16 = u32::from(ctx.desc(a.k_cache)?.dtype == DType::F16);
    let v_f16 = u32::from(ctx.desc(a.v_cache)?.dtype == DType::F16);
    let key = |entry, direct| PipelineKey {
        shader,
        entry,
        constants: vec![
            ("HD", hd as u32),
            ("HEADS", heads as u32),
            ("COLS", cols as u32),
            ("ROWG", row_groups as u32),
            ("DIRECT", direct),
            ("K_F16", k_f16),
            ("V_F16", v_f16),
        ],
    };
    let inputs = [(1, Storage::Tensor(a.q, 0)), (2, Storage::Tensor(a.k_cache, 0)), (3, Storage::Tensor(a.v_cache, 0))];
    let bytes = bytemuck::bytes_of(&params).to_vec();
    if paged && rounding.is_some() {
        return Err(GpuError::Wgpu("fusion plan: an int8-block rounding after a paged ATTENTION".to_string()));
    }
    if s == 1 {
        if rounding.is_some() {
            return Err(GpuError::Wgpu("fusion plan: an int8-block rounding after an unsplit ATTENTION".to_string()));
        }
        let mut storage = inputs.to_vec();
        storage.push((4, Storage::Tensor(a.out, 0)));
        storage.extend(rows);
        return Ok(vec![KernelCall {
            key: key("partial", 1),
            params: bytes,
            storage,
            workgroups: ctx.grid_1d(groups, 1),
        }]);
    }
    let (n, n_head) = (params.n as usize, params.n_head as usize);
    let scratch = (n * n_head * params.stride as usize) as u64 * (hd as u64 + 2) * 4;
    let mut storage = inputs.to_vec();
    storage.push((4, Storage::Scratch(ScratchKey::AttentionPartials, scratch)));
    storage.extend(rows);
    // The merge reads the positions too: only the splits holding positions wrote their slots.
    let mut merge_storage = merge_rows;
    merge_storage
        .extend([(6, Storage::Scratch(ScratchKey::AttentionPartials, scratch)), (7, Storage::Tensor(a.out, 0))]);
    let mut merge_key = key("combine", 0);
    if let Some(xhat) = rounding {
        if hd % LINEAR_ACT_BLOCK != 0 {
            return Err(GpuError::Wgpu(format!("fusion plan: an int8-block rounding of heads of {hd}")));
        }
        let k = params.q_width as usize;
        merge_storage.push((8, Storage::Scratch(ScratchKey::LinearActivations, linear::int8_scratch_bytes(n, k))));
        merge_key.entry = "combine_rounded";
        merge_key.constants.push(("WRITE_XHAT", u32::from(xhat)));
    }
    Ok(vec![
        KernelCall { key: key("partial", 0), params: bytes.clone(), storage, workgroups: ctx.grid_1d(groups, 1) },
        KernelCall { key: merge_key, params: bytes, storage: merge_storage, workgroups: ctx.grid_1d(rows_heads, 1) },
    ])
}

#[cfg(test)]
mod tests {
    use super::{heads_per_workgroup, splits, workgroup_floats, MAX_HEADS, WORKGROUP_BYTES};

    #[test]
    fn a_group_shares_a_workgroup_while_it_fits() {
        // 4 query heads per kv head of 128, and 3 of 64.
        assert_eq!(heads_per_workgroup(4, 128, false), Some(4));
        assert_eq!(heads_per_workgroup(3, 64, false), Some(3));
        // Larger groups are cut into workgroups of MAX_HEADS, wide heads into fewer.
        assert_eq!(heads_per_workgroup(32, 64, false), Some(MAX_HEADS));
        assert_eq!(heads_per_workgroup(8, 1024, false), Some(1));
        assert_eq!(heads_per_workgroup(8, 4096, false), None);
        for paged in [false, true] {
            assert_eq!(heads_per_workgroup(4, 128, paged), Some(4));
            for hd in [1, 7, 64, 100, 128, 256, 1024] {
                let h = heads_per_workgroup(MAX_HEADS, hd, paged).expect("fits");
                assert!(workgroup_floats(h, hd, paged) * 4 <= WORKGROUP_BYTES, "head dim {hd}");
            }
        }
    }

    #[test]
    fn decode_is_split_and_prefill_is_not() {
        // 5 kv heads of one workgroup each, 4096 positions.
        assert_eq!(splits(5, 4096), 64);
        assert_eq!(splits(512 * 5, 4096), 1);
        assert_eq!(splits(103 * 5, 4096), 1);
        // At a 640-position context, splits of one tile.
        assert_eq!(splits(5, 640), 20);
        // A decode with 3 kv heads is split, a 512-row prefill is not.
        assert_eq!(splits(3, 2048), 64);
        assert_eq!(splits(512, 712), 1);
        // A short cache is never split into chunks shorter than a tile.
        assert_eq!(splits(2, 32), 1);
        assert_eq!(splits(2, 33), 2);
        assert_eq!(splits(1, 1 << 20), 64);
        assert_eq!(splits(0, 0), 1);
    }
}
