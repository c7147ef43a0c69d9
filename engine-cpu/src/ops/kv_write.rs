//! KV_WRITE: each row of `src` copied into the cache row that holds its position.

use purebee_isa::ops::KvWrite;
use purebee_isa::{ExecError, ParamValue, Program};
use purebee_memory::DType;

use super::cache_rows::{resolve, Resolved};
use super::{f32s_mut, Exec};
use crate::kernels::attention::round_f16;
use crate::store::{dims, mem};

pub(crate) fn run(e: &mut Exec, program: &Program, params: &[ParamValue], k: &KvWrite) -> Result<(), ExecError> {
    const OP: &str = "KV_WRITE";
    let (n, w) = dims(e.reg, OP, k.src)?;
    let rows = resolve(e, OP, program, params, &k.rows, n, k.cache, false)?;
    e.store.f32s(e.reg, OP, k.src)?;
    let reg = e.reg;
    let (n_ctx, _) = dims(reg, OP, k.cache)?;
    let level = e.level;
    if reg.desc(k.cache).map_err(mem(OP))?.dtype == DType::F16 {
        // Each value rounded to the nearest f16, ties to even.
        return e.store.with_output(reg, OP, k.cache, |store, words| {
            let src = store.f32s(reg, OP, k.src)?;
            let cache: &mut [u16] = &mut bytemuck::cast_slice_mut(words)[..n_ctx * w];
            match rows {
                Resolved::Consecutive(start) => round_f16(level, src, &mut cache[start * w..(start + n) * w]),
                Resolved::Paged { .. } => {
                    for (r, row) in src.chunks_exact(w.max(1)).enumerate() {
                        let at = rows.cache_row(r, rows.position(r));
                        round_f16(level, row, &mut cache[at * w..(at + 1) * w]);
                    }
                }
            }
            Ok(())
        });
    }
    e.store.with_output(reg, OP, k.cache, |store, words| {
        let src = store.f32s(reg, OP, k.src)?;
        let cache = f32s_mut(words, n_ctx * w);
        match rows {
            Resolved::Consecutive(start) => cache[start * w..(start + n) * w].copy_from_slice(src),
            Resolved::Paged { .. } => {
                for (r, row) in src.chunks_exact(w.max(1)).enumerate() {
                    let at = rows.cache_row(r, rows.position(r));
                    cache[at * w..(at + 1) * w].copy_from_slice(row);
                }
            }
        }
        Ok(())
    })
}

/// Fails unless `n` rows starting at `pos` fit the rows of `cache`.
pub(crate) fn check_fits(
    e: &Exec,
    op: &'static str,
    cache: purebee_memory::TensorId,
    pos: u32,
    n: usize,
) -> Result<(), ExecError> {
    let (n_ctx, _) = dims(e.reg, op, cache)?;
    let end = pos as u64 + n as u64;
    if end > n_ctx as u64 {
        return Err(ExecError::ContextOverflow {
            op,
            tensor: e.reg.name(cache).to_string(),
            pos: pos as u64,
            end,
            n_ctx,
        });
    }
    Ok(())
}
