//! ATTENTION (`attention.wgsl`): an online-softmax kernel over tiles of [`WG`] cache
//! positions, with the positions of each query row split into [`splits`] chunks when there
//! are too few (row, head) pairs to fill the GPU (decode), and a second dispatch that merges
//! the chunks' partial results from the program's scratch buffer. With one chunk (prefill)
//! the first dispatch writes the output itself.
//!
//! Bytes per call, for `n` query rows at positions `p_r = pos + r`, `n_head` heads of
//! `head_dim` (`hd`), `S` splits: reads `4·n·n_head·hd` of queries and, per (row, head),
//! `4·(p_r + 1)·hd` of keys and as many of values: `8·hd·n_head·Σ_r (p_r + 1)` in all, of
//! which the distinct bytes are `8·(pos + n)·n_kv_head·hd` (the query heads of one group,
//! and later rows, re-read the same cache rows, from cache memory on a GPU); writes
//! `4·n·n_head·hd`. With `S > 1`, also writes and reads back `4·n·n_head·S·(hd + 2)` of
//! partial results. Decode on the 2B model at position 4095 (20 heads, 5 kv heads,
//! `hd = 128`): 20 MiB of distinct cache bytes per call (80 MiB requested, each kv head by
//! its 4 query heads), 26 splits, 270 KB of partials written and read.

use purebee_isa::ops::Attention;

use super::{ArgSlot, KernelCall, RecordCtx, ScratchKey, Shader, Storage};
use crate::pipelines::PipelineKey;
use crate::GpuError;

/// Threads per workgroup, and cache positions per tile.
pub(crate) const WG: u32 = 64;

/// Split the positions until about this many workgroups run (enough to fill a large GPU).
const TARGET_WORKGROUPS: usize = 512;

/// At most this many splits (the merge reads every split's slot).
const MAX_SPLITS: usize = 64;

/// Mirrors `Params` in `attention.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct Params {
    /// Query rows.
    pub n: u32,
    /// Query heads.
    pub n_head: u32,
    /// Elements per head.
    pub head_dim: u32,
    /// Query heads per kv head.
    pub group: u32,
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
    /// The position of query row 0.
    pub pos: ArgSlot,
    /// Floats per split slot: `head_dim + 2`.
    pub slot: u32,
}

/// How many chunks each row's positions are split into: 1 when the (row, head) pairs
/// alone give [`TARGET_WORKGROUPS`], otherwise enough to reach it, but no more than
/// [`MAX_SPLITS`] and no more than one per [`WG`] rows of the cache (a split gets at least a
/// full tile at full context).
pub(crate) fn splits(n: usize, n_head: usize, n_ctx: usize) -> usize {
    let pairs = n.saturating_mul(n_head).max(1);
    if pairs >= TARGET_WORKGROUPS {
        return 1;
    }
    TARGET_WORKGROUPS.div_ceil(pairs).min(MAX_SPLITS).min(n_ctx.div_ceil(WG as usize)).max(1)
}

/// The dispatches: `partial`, then `combine` when the positions are split.
pub(crate) fn record(ctx: &RecordCtx, a: &Attention) -> Result<Vec<KernelCall>, GpuError> {
    let q = &ctx.desc(a.q)?.shape;
    let cache = &ctx.desc(a.k_cache)?.shape;
    let (n, q_width, n_ctx, kv_width) = (q.rows(), q.cols(), cache.rows(), cache.cols());
    // The ISA checked that head_dim divides both widths and n_kv_head divides n_head.
    let hd = (a.head_dim as usize).max(1);
    let (n_head, n_kv) = (q_width / hd, (kv_width / hd).max(1));
    let s = splits(n, n_head, n_ctx);
    let too_big = |what: String| GpuError::Unsupported { op: "ATTENTION", what };
    let u = |v: usize| u32::try_from(v).map_err(|_| too_big(format!("a size of {v} (over 2^32)")));
    let groups = n.checked_mul(n_head).and_then(|g| g.checked_mul(s));
    let groups = groups.ok_or_else(|| too_big(format!("{n} rows of {n_head} heads")))?;
    // The kernels index workgroups with u32.
    u(groups)?;
    let params = Params {
        n: u(n)?,
        n_head: u(n_head)?,
        head_dim: a.head_dim,
        group: u((n_head / n_kv).max(1))?,
        q_width: u(q_width)?,
        kv_width: u(kv_width)?,
        n_ctx: u(n_ctx)?,
        splits: u(s)?,
        scale: (1.0 / (hd as f64).sqrt()) as f32,
        pos: ctx.u32_arg(a.pos),
        slot: a.head_dim.checked_add(2).ok_or_else(|| too_big("a head of 2^32 elements".to_string()))?,
    };
    let key = |entry, direct| PipelineKey {
        shader: Shader::Attention,
        entry,
        constants: vec![("WG", WG), ("DIRECT", direct)],
    };
    let inputs = [(1, Storage::Tensor(a.q, 0)), (2, Storage::Tensor(a.k_cache, 0)), (3, Storage::Tensor(a.v_cache, 0))];
    let bytes = bytemuck::bytes_of(&params).to_vec();
    if s == 1 {
        let mut storage = inputs.to_vec();
        storage.extend([(4, Storage::Tensor(a.out, 0)), (5, Storage::RunParams)]);
        return Ok(vec![KernelCall {
            key: key("partial", 1),
            params: bytes,
            storage,
            workgroups: ctx.grid_1d(groups, 1),
        }]);
    }
    let scratch = (groups as u64).saturating_mul(hd as u64 + 2).saturating_mul(4);
    let mut storage = inputs.to_vec();
    storage.extend([(4, Storage::Scratch(ScratchKey::AttentionPartials, scratch)), (5, Storage::RunParams)]);
    Ok(vec![
        KernelCall { key: key("partial", 0), params: bytes.clone(), storage, workgroups: ctx.grid_1d(groups, 1) },
        KernelCall {
            key: key("combine", 0),
            params: bytes,
            storage: vec![
                (6, Storage::Scratch(ScratchKey::AttentionPartials, scratch)),
                (7, Storage::Tensor(a.out, 0)),
            ],
            workgroups: ctx.grid_1d(n * n_head, 1),
        },
    ])
}

#[cfg(test)]
mod tests {
    use super::splits;

    #[test]
    fn params_match_the_wgsl_struct_size() {
        // `struct Params`: twelve 4-byte fields, 48 bytes.
        assert_eq!(std::mem::size_of::<super::Params>(), 48);
    }

    #[test]
    fn decode_is_split_and_prefill_is_not() {
        // The 2B model: 20 heads, 4096 positions.
        assert_eq!(splits(1, 20, 4096), 26);
        assert_eq!(splits(512, 20, 4096), 1);
        assert_eq!(splits(26, 20, 4096), 1);
        // The shapes of the differential tests' pinned cases: SmolLM2 decode is split, the
        // 512-row prefill is not.
        assert_eq!(splits(1, 9, 2048), 32);
        assert_eq!(splits(512, 4, 712), 1);
        // A short cache is never split into chunks shorter than a tile.
        assert_eq!(splits(1, 2, 64), 1);
        assert_eq!(splits(1, 2, 65), 2);
        assert_eq!(splits(1, 1, 1 << 20), 64);
        assert_eq!(splits(0, 0, 0), 1);
    }
}
