//! Where the rows of ROPE, KV_WRITE and ATTENTION sit: consecutive positions of one
//! sequence, or each row its own sequence and position in a KV cache that several sequences
//! share in pages (a batched step of several sessions).

use purebee_memory::{DType, TensorId};

use crate::validate::Checker;
use crate::{ExecError, IsaError, U32Arg};

/// The position of each row of a ROPE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowPositions {
    /// Row `r` is at position `start + r`.
    Consecutive(U32Arg),
    /// Row `r` is at position `pos[r]`: U32 `[n]`, written by the host before the run.
    PerRow(TensorId),
}

impl From<U32Arg> for RowPositions {
    fn from(start: U32Arg) -> RowPositions {
        RowPositions::Consecutive(start)
    }
}

impl From<u32> for RowPositions {
    fn from(start: u32) -> RowPositions {
        RowPositions::Consecutive(U32Arg::Const(start))
    }
}

/// Where each row of a KV_WRITE or ATTENTION sits in its sequence and in the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheRows {
    /// One sequence: row `r` is at position `start + r`, held by cache row `start + r`.
    Consecutive(U32Arg),
    /// Each row its own sequence and position, in a cache shared by pages: see
    /// [`PagedRows`].
    Paged(PagedRows),
}

impl From<U32Arg> for CacheRows {
    fn from(start: U32Arg) -> CacheRows {
        CacheRows::Consecutive(start)
    }
}

impl From<u32> for CacheRows {
    fn from(start: u32) -> CacheRows {
        CacheRows::Consecutive(U32Arg::Const(start))
    }
}

/// Rows of several sequences over one KV cache shared in pages (as an operating system
/// pages memory): row `r` belongs to sequence `s = seq[r]` at position `p = pos[r]`, and
/// position `t` of sequence `s` is held by cache row
/// `pages[s, t / page_size] · page_size + t % page_size`.
///
/// - `pos`, `seq`: U32 `[n]`, one per row of the instruction; `pages`: U32
///   `[n_seq, max_pages]`. All three are written by the host before the run.
/// - Run-time errors ([`ExecError::IndexOutOfRange`]), checked before anything is
///   written: `seq[r] ≥ n_seq`; a position not below `n_ctx` (a sequence's positions each
///   have their own cache row, so none holds more than the cache; this also bounds an
///   ATTENTION row's work by the cache's size); a position whose page index
///   `t / page_size` is not below `max_pages`; a page a row touches that does not lie
///   wholly inside the cache (`pages[s, j] ≥ n_ctx / page_size`).
/// - Sequences may share pages (a common prefix); which pages a sequence owns is the
///   host's business.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PagedRows {
    /// Each row's position in its sequence, U32 `[n]`.
    pub pos: TensorId,
    /// Each row's sequence, U32 `[n]`.
    pub seq: TensorId,
    /// The page table, U32 `[n_seq, max_pages]`.
    pub pages: TensorId,
    /// Positions per page, at least 1.
    pub page_size: u32,
}

impl PagedRows {
    /// The tensors the rows are read from.
    pub fn operands(&self) -> [TensorId; 3] {
        [self.pos, self.seq, self.pages]
    }

    pub(crate) fn validate(&self, c: &Checker, n: usize) -> Result<(), IsaError> {
        let u32 = |d: DType| d == DType::U32;
        let pos = c.dtype("pos", self.pos, u32, "U32")?;
        c.shape("pos", pos, &[n])?;
        let seq = c.dtype("seq", self.seq, u32, "U32")?;
        c.shape("seq", seq, &[n])?;
        let pages = c.dtype("pages", self.pages, u32, "U32")?;
        c.matrix("pages", pages)?;
        if self.page_size == 0 {
            return Err(c.field("page_size", 0, "at least 1"));
        }
        Ok(())
    }

    /// Checks the host's `pos`, `seq` and `pages` (row-major `[n_seq, max_pages]`) against
    /// a cache of `n_ctx` rows, as the semantics above require of every row touching
    /// positions `0 ..= pos[r]` (`whole_prefix`, ATTENTION) or `pos[r]` alone (KV_WRITE).
    /// `names` are the tensors' names (pos, seq, pages) for the error. Every engine checks
    /// with this one function, so a bad table fails the same way everywhere.
    #[allow(clippy::too_many_arguments)] // the three tables, their names and the cache's size
    pub fn check(
        &self,
        op: &'static str,
        names: [&str; 3],
        pos: &[u32],
        seq: &[u32],
        pages: &[u32],
        max_pages: usize,
        n_ctx: usize,
        whole_prefix: bool,
    ) -> Result<(), ExecError> {
        let page = self.page_size as usize;
        let n_seq = pages.len().checked_div(max_pages).unwrap_or(0);
        let in_cache = n_ctx / page;
        let bad = |tensor: &str, row: usize, value: u64, expected: String| ExecError::IndexOutOfRange {
            op,
            tensor: tensor.to_string(),
            row,
            value,
            expected,
        };
        for (r, (&p, &s)) in pos.iter().zip(seq).enumerate() {
            let s = s as usize;
            if s >= n_seq {
                return Err(bad(names[1], r, s as u64, format!("below the {n_seq} rows of '{}'", names[2])));
            }
            if p as usize >= n_ctx {
                let expected = format!("below {n_ctx} (a sequence holds at most the cache's rows)");
                return Err(bad(names[0], r, p as u64, expected));
            }
            let last_page = p as usize / page;
            if last_page >= max_pages {
                let expected = format!("below {} (the {max_pages} pages of '{}')", max_pages * page, names[2]);
                return Err(bad(names[0], r, p as u64, expected));
            }
            let first_page = if whole_prefix { 0 } else { last_page };
            for &cell_page in &pages[s * max_pages + first_page..=s * max_pages + last_page] {
                if cell_page as usize >= in_cache {
                    let expected = format!("a page below {in_cache} (the cache holds {n_ctx} rows)");
                    return Err(bad(names[2], s, cell_page as u64, expected));
                }
            }
        }
        Ok(())
    }

    /// The cache row holding position `t` of the sequence whose page-table row is
    /// `pages_row` (after [`PagedRows::check`]).
    pub fn cache_row(&self, pages_row: &[u32], t: usize) -> usize {
        let page = self.page_size as usize;
        pages_row[t / page] as usize * page + t % page
    }
}

impl RowPositions {
    pub(crate) fn validate(&self, c: &Checker, n: usize) -> Result<(), IsaError> {
        match *self {
            RowPositions::Consecutive(start) => c.u32_arg(start),
            RowPositions::PerRow(pos) => {
                let d = c.dtype("pos", pos, |d| d == DType::U32, "U32")?;
                c.shape("pos", d, &[n])
            }
        }
    }

    /// The start position of consecutive rows.
    pub fn consecutive(&self) -> Option<U32Arg> {
        match *self {
            RowPositions::Consecutive(start) => Some(start),
            RowPositions::PerRow(_) => None,
        }
    }

    /// The per-row position tensor, if any.
    pub fn tensor(&self) -> Option<TensorId> {
        match *self {
            RowPositions::Consecutive(_) => None,
            RowPositions::PerRow(t) => Some(t),
        }
    }
}

impl CacheRows {
    pub(crate) fn validate(&self, c: &Checker, n: usize) -> Result<(), IsaError> {
        match self {
            CacheRows::Consecutive(start) => c.u32_arg(*start),
            CacheRows::Paged(p) => p.validate(c, n),
        }
    }

    /// The tensors the rows are read from (none for consecutive rows).
    pub fn tensors(&self) -> Vec<TensorId> {
        match self {
            CacheRows::Consecutive(_) => Vec::new(),
            CacheRows::Paged(p) => p.operands().to_vec(),
        }
    }

    /// The start position of consecutive rows.
    pub fn consecutive(&self) -> Option<U32Arg> {
        match *self {
            CacheRows::Consecutive(start) => Some(start),
            CacheRows::Paged(_) => None,
        }
    }
}
