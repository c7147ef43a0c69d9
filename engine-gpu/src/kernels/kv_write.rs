//! KV_WRITE: `cache[pos + r] = src[r]` (`kv_write.wgsl`), one invocation per element.
//!
//! Bytes per call: reads `4·n·w` (src) and 4 (the position, when it is a run-time
//! parameter); writes `4·n·w` into the cache. Nothing else of the cache is touched.

use purebee_isa::ops::KvWrite;

use super::{ArgSlot, KernelCall, RecordCtx, Shader, Storage};
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
    /// The position of `src`'s row 0.
    pub pos: ArgSlot,
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
    let params = Params {
        n_words: u32_of(src.numel(), "a source")?,
        width: u32_of(src.cols(), "a row")?,
        n_rows: u32_of(src.rows(), "a source")?,
        n_ctx: u32_of(cache.rows(), "a cache")?,
        pos: ctx.consecutive("KV_WRITE", k.rows.consecutive())?,
        _pad: [0; 2],
    };
    Ok(vec![KernelCall {
        key: PipelineKey { shader: Shader::KvWrite, entry: "kv_write", constants: vec![("WG", WG)] },
        params: bytemuck::bytes_of(&params).to_vec(),
        storage: vec![(1, Storage::Tensor(k.src, 0)), (2, Storage::Tensor(k.cache, 0)), (3, Storage::RunParams)],
        workgroups: ctx.grid_1d(src.numel(), WG),
    }])
}

#[cfg(test)]
mod tests {
    #[test]
    fn params_match_the_wgsl_struct_size() {
        // `struct Params`: eight u32 fields, 32 bytes.
        assert_eq!(std::mem::size_of::<super::Params>(), 32);
    }
}
