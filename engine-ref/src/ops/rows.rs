//! Where each row of a KV_WRITE or ATTENTION sits in the cache: the cache rows of its
//! sequence's positions `0 ..= p`, spelled out in full (clarity over speed).

use purebee_isa::ops::CacheRows;
use purebee_isa::ParamValue;
use purebee_isa::{ExecError, Program};
use purebee_memory::{Registry, TensorId};

use crate::access::{check_fits, dims, u32s};

/// For each of the `n` rows: the cache rows holding its sequence's positions `0 ..= p`
/// (the last one is the row's own position). `whole_prefix`: check every page up to `p`
/// (ATTENTION reads them), else only the row's own (KV_WRITE).
#[allow(clippy::too_many_arguments)] // the instruction's rows, its run and its cache
pub(crate) fn cache_rows(
    reg: &Registry,
    op: &'static str,
    program: &Program,
    params: &[ParamValue],
    rows: &CacheRows,
    n: usize,
    cache: TensorId,
    whole_prefix: bool,
) -> Result<Vec<Vec<usize>>, ExecError> {
    match rows {
        CacheRows::Consecutive(start) => {
            let start = program.resolve_u32(*start, params)?;
            check_fits(reg, op, cache, start, n)?;
            Ok((0..n).map(|r| (0..=start as usize + r).collect()).collect())
        }
        CacheRows::Paged(paged) => {
            let (n_ctx, _) = dims(reg, op, cache)?;
            let (_, max_pages) = dims(reg, op, paged.pages)?;
            let (pos, seq, pages) = (u32s(reg, op, paged.pos)?, u32s(reg, op, paged.seq)?, u32s(reg, op, paged.pages)?);
            let names = [reg.name(paged.pos), reg.name(paged.seq), reg.name(paged.pages)];
            paged.check(op, names, &pos, &seq, &pages, max_pages, n_ctx, whole_prefix)?;
            Ok((0..n)
                .map(|r| {
                    let table = &pages[seq[r] as usize * max_pages..][..max_pages];
                    (0..=pos[r] as usize).map(|t| paged.cache_row(table, t)).collect()
                })
                .collect())
        }
    }
}
