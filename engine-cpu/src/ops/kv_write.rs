//! KV_WRITE: `cache[pos + r] = src[r]`, a copy.

use purebee_isa::ops::KvWrite;
use purebee_isa::ExecError;

use super::{f32s_mut, Exec};
use crate::store::dims;

pub(crate) fn run(e: &mut Exec, k: &KvWrite, pos: u32) -> Result<(), ExecError> {
    const OP: &str = "KV_WRITE";
    let (n, w) = dims(e.reg, OP, k.src)?;
    check_fits(e, OP, k.cache, pos, n)?;
    e.store.f32s(e.reg, OP, k.src)?;
    let reg = e.reg;
    let (n_ctx, _) = dims(reg, OP, k.cache)?;
    e.store.with_output(reg, OP, k.cache, |store, words| {
        let src = store.f32s(reg, OP, k.src)?;
        let start = pos as usize * w;
        f32s_mut(words, n_ctx * w)[start..start + n * w].copy_from_slice(src);
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
