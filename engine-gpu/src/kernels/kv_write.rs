//! KV_WRITE (`kv_write.wgsl`), one invocation per element: `cache[pos + r] = src[r]` for
//! consecutive rows (`kv_write`), or each row into the cache row its sequence's page table
//! gives for its position (`kv_write_paged`).
//!
//! Bytes per call: reads `4·n·w` (src) and 4 (the position, when it is a run-time
//! parameter), or with paged rows each element's row's position, sequence and page-table
//! entry (`12` bytes, from cache memory after the row's first); writes `4·n·w` into the
//! cache. Nothing else of the cache is touched.
//!
//! Into an F16 cache (`kv_write_f16`, `kv_write_paged_f16`): each element rounded to the
//! nearest f16 (ties to even, on its bits) and stored into its half of a word with two
//! atomics; writes `2·n·w` bytes.

use purebee_isa::ops::{CacheRows, KvWrite};
use purebee_memory::DType;

use super::{ArgSlot, KernelCall, RecordCtx, Shader, Storage, ARG_CONST};
use crate::pipelines::PipelineKey;
use crate::GpuError;

/// Threads per workgroup.
pub(crate) const WG: u32 = 256;

/// Mirrors `Params` in `kv_write.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct Params {
    /// `n·w`: the words to copy.
    pub n_words: u32,
    /// `w`: words per row.
    pub width: u32,
    /// `n`: rows of `src`.
    pub n_rows: u32,
    /// Rows of the cache.
    pub n_ctx: u32,
    /// The position of `src`'s row 0 (consecutive rows).
    pub pos: ArgSlot,
    /// Paged rows: positions per page.
    pub page_size: u32,
    /// Paged rows: the page table's columns.
    pub max_pages: u32,
    /// Paged rows: the page table's rows (sequences).
    pub n_seq: u32,
    /// Paged rows: the pages wholly inside the cache, `n_ctx / page_size`.
    pub pages_in_cache: u32,
    /// Padding to the WGSL struct's size (a multiple of 16 bytes).
    pub _pad: [u32; 2],
}

/// A size as the `u32` the kernels index with. Every tensor a dispatch binds fits one
/// binding (at most 4 GiB), so this fails only for tensors that cannot be bound anyway.
fn u32_of(v: usize, what: &str) -> Result<u32, GpuError> {
    u32::try_from(v).map_err(|_| GpuError::Unsupported { op: "KV_WRITE", what: format!("{what} of {v} (over 2^32)") })
}

/// One dispatch: `n·w` invocations.
pub(crate) fn record(ctx: &RecordCtx, k: &KvWrite) -> Result<Vec<KernelCall>, GpuError> {
    let src = &ctx.desc(k.src)?.shape;
    let cache = &ctx.desc(k.cache)?.shape;
    let mut params = Params {
        n_words: u32_of(src.numel(), "a source")?,
        width: u32_of(src.cols(), "a row")?,
        n_rows: u32_of(src.rows(), "a source")?,
        n_ctx: u32_of(cache.rows(), "a cache")?,
        pos: ArgSlot { value: 0, param: ARG_CONST },
        page_size: 1,
        max_pages: 0,
        n_seq: 0,
        pages_in_cache: 0,
        _pad: [0; 2],
    };
    let f16 = ctx.desc(k.cache)?.dtype == DType::F16;
    let cache_binding = if f16 { 7 } else { 2 };
    let mut storage = vec![(1, Storage::Tensor(k.src, 0)), (cache_binding, Storage::Tensor(k.cache, 0))];
    let entry = match k.rows {
        CacheRows::Consecutive(start) => {
            params.pos = ctx.u32_arg(start);
            storage.push((3, Storage::RunParams));
            if f16 {
                "kv_write_f16"
            } else {
                "kv_write"
            }
        }
        CacheRows::Paged(rows) => {
            let table = &ctx.desc(rows.pages)?.shape;
            // The ISA checked that the page table is a matrix of U32.
            params.page_size = rows.page_size;
            params.max_pages = u32_of(table.cols(), "a page table")?;
            params.n_seq = u32_of(table.rows(), "a page table")?;
            u32_of(table.numel(), "a page table")?;
            params.pages_in_cache = params.n_ctx / rows.page_size.max(1);
            storage.extend([
                (4, Storage::Tensor(rows.pos, 0)),
                (5, Storage::Tensor(rows.seq, 0)),
                (6, Storage::Tensor(rows.pages, 0)),
            ]);
            if f16 {
                "kv_write_paged_f16"
            } else {
                "kv_write_paged"
            }
        }
    };
    Ok(vec![KernelCall {
        key: PipelineKey { shader: Shader::KvWrite, entry, constants: vec![("WG", WG)] },
        params: bytemuck::bytes_of(&params).to_vec(),
        storage,
        workgroups: ctx.grid_1d(src.numel(), WG),
    }])
}
