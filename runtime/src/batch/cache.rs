//! A KV cache that several sequences share in pages, as llama-server's unified cache: `-c`
//! positions in all, any one sequence may grow to all of them, and a page returns to the
//! pool when its sequence no longer needs it.

use purebee_isa::{DType, Engine, ProgramBuilder, TensorId};

use super::BatchForward;
use crate::model::Candidates;
use crate::{KvCache, Model, ModelError};
use std::collections::HashMap;

/// Positions per page. A sequence wastes at most one page's tail; the CPU engine's paged
/// ATTENTION splits a row's positions at every page boundary, so pages much shorter than
/// its 256-position parts would cost it merges.
pub const PAGE_SIZE: usize = 256;

/// One sequence of a [`SharedCache`]: the ids whose keys and values it holds at positions
/// `0..ids.len()`, and the pages that hold them.
#[derive(Clone, Debug, Default)]
pub(crate) struct SequenceState {
    pub ids: Vec<u32>,
    pub pages: Vec<u32>,
}

/// A KV cache shared in pages by up to `max_sequences` sequences (the server's slots), each
/// addressed by its index. Batched passes ([`Model::forward_batch`]) run rows of any of them
/// together.
pub struct SharedCache {
    pub(crate) model_id: u64,
    pub(crate) name: String,
    pub(crate) kv: KvCache,
    /// The page table on the engine, U32 `[max_sequences, max_pages]`.
    pub(crate) pages: TensorId,
    /// The page table changed since it was last written to the engine.
    pub(crate) pages_dirty: bool,
    pub(crate) max_pages: usize,
    pub(crate) n_pages: usize,
    /// Pages no sequence holds.
    pub(crate) free: Vec<u32>,
    pub(crate) sequences: Vec<SequenceState>,
    /// The model's training context (for messages).
    pub(crate) n_ctx_train: usize,
    /// Batched forward programs by (rows, output rows).
    pub(crate) forwards: HashMap<(usize, usize), BatchForward>,
    /// TOP_K programs by (rows, output rows, k, with log-sum-exps) of the forward whose
    /// logits they read (at most one allocated).
    pub(crate) candidates: HashMap<(usize, usize, usize, bool), Candidates>,
}

impl SharedCache {
    /// The positions the cache holds in all (`-c`).
    pub fn n_ctx(&self) -> usize {
        self.n_pages * PAGE_SIZE
    }

    /// The model's training context.
    pub fn n_ctx_train(&self) -> usize {
        self.n_ctx_train
    }

    /// How many sequences it addresses.
    pub fn max_sequences(&self) -> usize {
        self.sequences.len()
    }

    /// The ids sequence `seq` holds, at positions `0..len`.
    pub fn cached_ids(&self, seq: usize) -> &[u32] {
        self.sequences.get(seq).map_or(&[], |s| &s.ids)
    }

    /// How many leading ids of `prompt` sequence `seq` already holds.
    pub fn common_prefix(&self, seq: usize, prompt: &[u32]) -> usize {
        prompt.iter().zip(self.cached_ids(seq)).take_while(|(a, b)| a == b).count()
    }

    /// Positions not held by any sequence.
    pub fn free_positions(&self) -> usize {
        self.free.len() * PAGE_SIZE
    }

    /// Positions sequence `seq` could grow to: what its pages hold plus every free page.
    pub fn room(&self, seq: usize) -> usize {
        self.sequences.get(seq).map_or(0, |s| s.pages.len() * PAGE_SIZE) + self.free_positions()
    }

    /// Forgets what sequence `seq` holds and gives its pages back.
    pub fn clear(&mut self, seq: usize) {
        self.truncate(seq, 0);
    }

    /// Keeps the first `len` positions of sequence `seq` and gives back the pages past them.
    pub fn truncate(&mut self, seq: usize, len: usize) {
        let Some(s) = self.sequences.get_mut(seq) else { return };
        s.ids.truncate(len);
        let keep = len.div_ceil(PAGE_SIZE);
        if s.pages.len() > keep {
            self.free.extend(s.pages.drain(keep..).rev());
            self.pages_dirty = true;
        }
    }

    /// Gives sequence `seq` pages for positions `0..len`; false (nothing taken) when the free
    /// pages do not suffice or `len` exceeds the page table.
    pub fn reserve(&mut self, seq: usize, len: usize) -> bool {
        let Some(s) = self.sequences.get_mut(seq) else { return false };
        let need = len.div_ceil(PAGE_SIZE);
        if need > self.max_pages {
            return false;
        }
        let more = need.saturating_sub(s.pages.len());
        if more > self.free.len() {
            return false;
        }
        for _ in 0..more {
            // `more <= free.len()`: the pop cannot fail.
            if let Some(p) = self.free.pop() {
                s.pages.push(p);
            }
        }
        self.pages_dirty |= more > 0;
        true
    }

    /// The page table as the engine holds it, `[max_sequences, max_pages]` row-major (pages
    /// a sequence does not hold are 0: no row reads them).
    pub(crate) fn page_table(&self) -> Vec<u32> {
        let mut table = vec![0u32; self.sequences.len() * self.max_pages];
        for (s, seq) in self.sequences.iter().enumerate() {
            table[s * self.max_pages..][..seq.pages.len()].copy_from_slice(&seq.pages);
        }
        table
    }
}

impl<E: Engine> Model<E> {
    /// A KV cache of `n_ctx` positions (rounded up to whole pages; 0: the model's training
    /// context) shared by `max_sequences` sequences, of the model's
    /// [`crate::KvCacheTypes`], allocated on the engine now.
    pub fn new_shared_cache(&mut self, n_ctx: usize, max_sequences: usize) -> Result<SharedCache, ModelError> {
        let n_ctx = if n_ctx == 0 { self.config.n_ctx_train } else { n_ctx };
        let n_pages = n_ctx.div_ceil(PAGE_SIZE).max(1);
        let max_sequences = max_sequences.max(1);
        let name = format!("shared{}", self.sessions_opened);
        self.sessions_opened += 1;
        let mut b = ProgramBuilder::new(&format!("{name}.kv-cache"), self.engine.memory_mut());
        let (mut k, mut v) = (Vec::new(), Vec::new());
        for l in 0..self.config.n_layer {
            let dims = [n_pages * PAGE_SIZE, self.config.kv_width()];
            k.push(b.alloc(&format!("{name}.cache.{l}.k"), self.kv_types.k, &dims)?);
            v.push(b.alloc(&format!("{name}.cache.{l}.v"), self.kv_types.v, &dims)?);
        }
        let pages = b.alloc(&format!("{name}.pages"), DType::U32, &[max_sequences, n_pages])?;
        let alloc = b.finish();
        self.engine.execute(&alloc, &[])?;
        Ok(SharedCache {
            model_id: self.id,
            name,
            kv: KvCache { k, v },
            pages,
            pages_dirty: true,
            max_pages: n_pages,
            n_pages,
            // Popped from the end: sequences take the lowest pages first.
            free: (0..n_pages as u32).rev().collect(),
            sequences: vec![SequenceState::default(); max_sequences],
            n_ctx_train: self.config.n_ctx_train,
            forwards: HashMap::new(),
            candidates: HashMap::new(),
        })
    }

    /// Frees a shared cache and the tensors of its programs on the engine.
    pub fn free_shared_cache(&mut self, cache: SharedCache) -> Result<(), ModelError> {
        if cache.model_id != self.id {
            return Err(ModelError::ForeignSession { session: cache.name.clone() });
        }
        let mut b = ProgramBuilder::new(&format!("{}.free", cache.name), self.engine.memory_mut());
        for f in cache.forwards.values().map(|f| f.forward()).filter(|f| f.live) {
            for &t in &f.io.tensors {
                b.free(t)?;
            }
        }
        for c in cache.candidates.values().filter(|c| c.live) {
            for t in c.tensors() {
                b.free(t)?;
            }
        }
        for &t in cache.kv.k.iter().chain(&cache.kv.v).chain([&cache.pages]) {
            b.free(t)?;
        }
        let free = b.finish();
        self.engine.execute(&free, &[])?;
        Ok(())
    }
}
