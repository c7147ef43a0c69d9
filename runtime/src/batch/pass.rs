//! A batched pass: the next rows of several sequences of a [`SharedCache`] (decode tokens,
//! prefill chunks, verify rows) run as one forward program, so the weights are read once
//! for all of them. Each row's position and sequence reach ROPE, KV_WRITE and ATTENTION as
//! per-row tensors (the ISA's paged rows), and every instruction computes a row the same
//! way whatever else is in the batch, so a sequence's logits do not depend on its company.

use purebee_isa::ops::PagedRows;
use purebee_isa::{DType, Engine, ProgramBuilder, TensorId};

use super::cache::{SharedCache, PAGE_SIZE};

use crate::forward::{record_forward, Head, Place};
use crate::model::Forward;
use crate::{Model, ModelError};

/// Batched programs of at most this many rows keep their activations allocated between
/// passes (the decode steps of up to this many sequences); larger ones (with prefill
/// chunks) free them after use.
const KEEP_LIVE_ROWS: usize = 16;

/// The rows one sequence runs in a batched pass.
#[derive(Clone, Copy, Debug)]
pub struct BatchRows<'a> {
    /// The sequence: an index of the shared cache.
    pub seq: usize,
    /// The ids to run, at positions `pos..pos + ids.len()`.
    pub ids: &'a [u32],
    /// The position of the first id: at most the number of ids the sequence holds; what it
    /// held from there on is replaced.
    pub pos: usize,
    /// What the caller reads of the last rows' logits; `None` when only the KV entries
    /// matter (a prefill chunk before the prompt's last).
    pub read: Option<RowRead>,
    /// How many of the last rows are read when `read` is set: 1 for a decode step or a
    /// prompt's end; a verify pass reads every drafted row and the one before (at least 1,
    /// at most `ids.len()`).
    pub read_rows: usize,
}

/// What a caller reads of a row's logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowRead {
    /// The greedy token (ARGMAX).
    Greedy,
    /// The `k` largest logits with their ids (TOP_K), at least 1.
    TopK(usize),
    /// As [`RowRead::TopK`], and the row's log-sum-exp (TOP_K's `lse`, computed on the
    /// engine), so that `value − lse` is a candidate's log-probability.
    TopKLse(usize),
    /// The whole row.
    Full,
}

/// What a batched pass gives a sequence that asked for a read.
#[derive(Clone, Debug, PartialEq)]
pub enum RowOutput {
    /// The greedy token.
    Greedy(u32),
    /// The `k` largest logits, in TOP_K's rank order, and their ids.
    TopK {
        /// The logits.
        values: Vec<f32>,
        /// Their token ids.
        ids: Vec<u32>,
        /// The row's log-sum-exp, for [`RowRead::TopKLse`].
        lse: Option<f32>,
    },
    /// The whole row of logits.
    Full(Vec<f32>),
}

/// A batched forward program and the per-row tensors the host writes before each run.
pub(crate) struct BatchForward {
    forward: Forward,
    /// Each row's position, U32 `[n]`.
    pos: TensorId,
    /// Each row's sequence, U32 `[n]`.
    seq: TensorId,
}

impl BatchForward {
    /// The forward program and its tensors.
    pub(crate) fn forward(&self) -> &Forward {
        &self.forward
    }
}

impl<E: Engine> Model<E> {
    /// Runs the rows of several sequences of `cache` in one pass and returns, for each entry
    /// of `rows` in order, what it asked to read of each of its last `read_rows` rows'
    /// logits (nothing for an entry that reads nothing).
    ///
    /// Errors (nothing runs): [`ModelError::NoTokens`] for an entry without ids,
    /// [`ModelError::TokenOutOfRange`], [`ModelError::BadBatch`] for a sequence outside the
    /// cache, named twice or starting past what it holds, [`ModelError::ContextFull`] for
    /// rows past the cache's size, and [`ModelError::CacheFull`] when it has no free pages
    /// left for a sequence's new positions (the pages reserved for earlier entries stay with
    /// their sequences). An engine
    /// error leaves the sequences holding only the positions before their rows.
    pub fn forward_batch(
        &mut self,
        cache: &mut SharedCache,
        rows: &[BatchRows],
    ) -> Result<Vec<Vec<RowOutput>>, ModelError> {
        if cache.model_id != self.id {
            return Err(ModelError::ForeignSession { session: cache.name.clone() });
        }
        self.check_batch(cache, rows)?;
        for r in rows {
            if r.pos + r.ids.len() > cache.n_ctx() {
                return Err(ModelError::ContextFull {
                    tokens: r.ids.len(),
                    pos: r.pos,
                    n_ctx: cache.n_ctx(),
                    n_ctx_train: cache.n_ctx_train,
                });
            }
            if !cache.reserve(r.seq, r.pos + r.ids.len()) {
                let (tokens, pos, seq, n_ctx) = (r.ids.len(), r.pos, r.seq, cache.n_ctx());
                return Err(ModelError::CacheFull { tokens, pos, seq, n_ctx });
            }
        }
        self.source.check()?;
        let n: usize = rows.iter().map(|r| r.ids.len()).sum();
        let m = rows.iter().map(|r| if r.read.is_some() { r.read_rows } else { 0 }).sum::<usize>().max(1);
        let key = (n, m);
        if cache.pages_dirty {
            self.engine.write_u32(cache.pages, &cache.page_table())?;
            cache.pages_dirty = false;
        }
        let f = match cache.forwards.remove(&key) {
            Some(f) => f,
            None => self.build_batch_forward(cache, n, m)?,
        };
        let f = cache.forwards.entry(key).or_insert(f);
        if !f.forward.live {
            self.engine.execute(&f.forward.setup, &[])?;
            f.forward.live = true;
        }
        // The ids, each row's position and sequence, and the rows whose logits are read (the
        // last `read_rows` of each entry that reads; the first row when none does).
        let (mut ids, mut pos, mut seq, mut selected) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for r in rows {
            ids.extend_from_slice(r.ids);
            pos.extend((r.pos..r.pos + r.ids.len()).map(|p| p as u32));
            seq.extend(std::iter::repeat_n(r.seq as u32, r.ids.len()));
            if r.read.is_some() {
                selected.extend((ids.len() - r.read_rows..ids.len()).map(|row| row as u32));
            }
        }
        if selected.is_empty() {
            selected.push(0);
        }
        self.engine.write_u32(f.forward.io.ids, &ids)?;
        self.engine.write_u32(f.pos, &pos)?;
        self.engine.write_u32(f.seq, &seq)?;
        if let Some(sel) = f.forward.io.selected {
            self.engine.write_u32(sel, &selected)?;
        }
        // Until the pass succeeds, what the sequences hold from their rows on is unknown.
        for r in rows {
            cache.sequences[r.seq].ids.truncate(r.pos);
        }
        self.engine.execute(&f.forward.pass, &[])?;
        for r in rows {
            cache.sequences[r.seq].ids.extend_from_slice(r.ids);
        }
        let io = (f.forward.io.argmax, f.forward.io.logits);
        let outputs = self.read_rows(cache, rows, io, key);
        if n > KEEP_LIVE_ROWS {
            if let Some(f) = cache.forwards.get_mut(&key) {
                self.engine.execute(&f.forward.teardown, &[])?;
                f.forward.live = false;
            }
        }
        outputs
    }

    /// Checks a batch before anything runs.
    fn check_batch(&self, cache: &SharedCache, rows: &[BatchRows]) -> Result<(), ModelError> {
        if rows.is_empty() {
            return Err(ModelError::NoTokens);
        }
        for (i, r) in rows.iter().enumerate() {
            if r.ids.is_empty() {
                return Err(ModelError::NoTokens);
            }
            if let Some(&id) = r.ids.iter().find(|&&t| t as usize >= self.config.n_vocab) {
                return Err(ModelError::TokenOutOfRange { id, vocab: self.config.n_vocab });
            }
            let bad = |reason: String| Err(ModelError::BadBatch { reason });
            if r.seq >= cache.max_sequences() {
                return bad(format!("sequence {} is outside the cache's {}", r.seq, cache.max_sequences()));
            }
            if rows[..i].iter().any(|o| o.seq == r.seq) {
                return bad(format!("sequence {} is named twice", r.seq));
            }
            let held = cache.cached_ids(r.seq).len();
            if r.pos > held {
                return bad(format!("sequence {} holds {held} positions; rows cannot start at {}", r.seq, r.pos));
            }
            if let Some(RowRead::TopK(0) | RowRead::TopKLse(0)) = r.read {
                return bad(format!("sequence {} asks for the top 0 logits", r.seq));
            }
            if r.read.is_some() && !(1..=r.ids.len()).contains(&r.read_rows) {
                return bad(format!("sequence {} reads {} of its {} rows", r.seq, r.read_rows, r.ids.len()));
            }
        }
        Ok(())
    }

    /// Reads what each entry asked for from the ARGMAX and logits of the `m` selected rows
    /// of the `(n, m)` forward.
    fn read_rows(
        &mut self,
        cache: &mut SharedCache,
        rows: &[BatchRows],
        io: (TensorId, TensorId),
        (n, m): (usize, usize),
    ) -> Result<Vec<Vec<RowOutput>>, ModelError> {
        let reads: Vec<RowRead> =
            rows.iter().filter_map(|r| r.read.map(|read| std::iter::repeat_n(read, r.read_rows))).flatten().collect();
        let prefix = format!("{}.batch{n}x{m}", cache.name);
        let mut outputs =
            self.read_row_outputs(&mut cache.candidates, |k, lse| (n, m, k, lse), &prefix, io, &reads)?.into_iter();
        Ok(rows
            .iter()
            .map(|r| if r.read.is_some() { outputs.by_ref().take(r.read_rows).collect() } else { Vec::new() })
            .collect())
    }

    fn build_batch_forward(&mut self, cache: &SharedCache, n: usize, m: usize) -> Result<BatchForward, ModelError> {
        let prefix = format!("{}.batch{n}x{m}", cache.name);
        let mut b = ProgramBuilder::new(&prefix, self.engine.memory_mut());
        let pos = b.declare(&format!("{prefix}.pos"), DType::U32, &[n])?;
        let seq = b.declare(&format!("{prefix}.seq"), DType::U32, &[n])?;
        let paged = PagedRows { pos, seq, pages: cache.pages, page_size: PAGE_SIZE as u32 };
        let (cfg, w, acts) = (&self.config, &self.weights, self.activations);
        let mut io =
            record_forward(&mut b, cfg, w, &cache.kv, n, Head::Selected(m), &prefix, Place::Paged(paged), acts)?;
        io.tensors.extend([pos, seq]);
        let pass = b.finish();
        let forward = self.forward_programs(&prefix, pass, io)?;
        Ok(BatchForward { forward, pos, seq })
    }
}
