//! Where the rows of a KV_WRITE or ATTENTION sit: positions `start..` of one sequence, or
//! each row its own sequence and position in a paged cache (`PagedRows`), checked once with
//! the ISA's own check so a bad table fails as it does on every engine.

use purebee_isa::ops::{CacheRows, PagedRows};
use purebee_isa::{ExecError, ParamValue, Program};
use purebee_memory::TensorId;

use super::kv_write::check_fits;
use super::Exec;
use crate::store::dims;

/// The rows of one instruction, resolved for this run.
pub(crate) enum Resolved {
    /// Row `r` at position and cache row `start + r`.
    Consecutive(usize),
    /// Row `r` at position `pos[r]` of the sequence whose page-table row is
    /// `pages[seq[r] · max_pages ..]`.
    Paged { paged: PagedRows, pos: Vec<u32>, seq: Vec<u32>, pages: Vec<u32>, max_pages: usize },
}

impl Resolved {
    /// Row `r`'s position in its sequence.
    pub fn position(&self, r: usize) -> usize {
        match self {
            Resolved::Consecutive(start) => start + r,
            Resolved::Paged { pos, .. } => pos[r] as usize,
        }
    }

    /// The cache row holding position `t` of row `r`'s sequence.
    pub fn cache_row(&self, r: usize, t: usize) -> usize {
        match self {
            Resolved::Consecutive(_) => t,
            Resolved::Paged { paged, seq, pages, max_pages, .. } => {
                paged.cache_row(&pages[seq[r] as usize * max_pages..][..*max_pages], t)
            }
        }
    }

    /// Positions per page (every position is its own cache row in a run of this length).
    pub fn page_size(&self) -> Option<usize> {
        match self {
            Resolved::Consecutive(_) => None,
            Resolved::Paged { paged, .. } => Some(paged.page_size as usize),
        }
    }
}

/// Resolves and checks `rows` for `n` rows over `cache`: `whole_prefix` when the
/// instruction reads every position up to each row's own (ATTENTION), not only its own
/// (KV_WRITE).
#[allow(clippy::too_many_arguments)] // the instruction's rows, its run and its cache
pub(crate) fn resolve(
    e: &Exec,
    op: &'static str,
    program: &Program,
    params: &[ParamValue],
    rows: &CacheRows,
    n: usize,
    cache: TensorId,
    whole_prefix: bool,
) -> Result<Resolved, ExecError> {
    match rows {
        CacheRows::Consecutive(start) => {
            let start = program.resolve_u32(*start, params)?;
            check_fits(e, op, cache, start, n)?;
            Ok(Resolved::Consecutive(start as usize))
        }
        CacheRows::Paged(paged) => {
            let (n_ctx, _) = dims(e.reg, op, cache)?;
            let (_, max_pages) = dims(e.reg, op, paged.pages)?;
            let pos = e.store.u32s(e.reg, op, paged.pos)?.to_vec();
            let seq = e.store.u32s(e.reg, op, paged.seq)?.to_vec();
            let pages = e.store.u32s(e.reg, op, paged.pages)?.to_vec();
            let names = [e.reg.name(paged.pos), e.reg.name(paged.seq), e.reg.name(paged.pages)];
            paged.check(op, names, &pos, &seq, &pages, max_pages, n_ctx, whole_prefix)?;
            Ok(Resolved::Paged { paged: *paged, pos, seq, pages, max_pages })
        }
    }
}
