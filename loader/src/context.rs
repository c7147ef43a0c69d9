//! The KV cache a front end asks for with its model, and the default sizes, written once:
//! a session gets `-c`, else the model's training context capped at [`SESSION_CONTEXT_CAP`];
//! a cache that several sequences share gets `-c` in all, 0 meaning the training context.

use purebee_runtime::batch::SharedCache;
use purebee_runtime::{Model, Session};

use crate::{DynEngine, LoadError};

/// The largest context a session gets by default. A session's cache is allocated whole
/// when it opens, and some training contexts (128k positions) would take gigabytes.
pub const SESSION_CONTEXT_CAP: usize = 4096;

/// What KV cache to open with a model: [`SessionContext`], [`SharedContext`] or
/// [`NoContext`].
pub trait ContextRequest {
    /// What the front end gets: a session, a shared cache, or nothing.
    type Cache;

    /// The positions the cache will hold, for a model trained on `n_ctx_train`.
    fn n_ctx(&self, n_ctx_train: usize) -> usize;

    /// Opens the cache on `model`.
    fn open(self, model: &mut Model<DynEngine>) -> Result<Self::Cache, LoadError>;
}

/// One session (`run`, `chat`, `logits`, `bench`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionContext {
    /// Its positions (`-c`); `None`: the training context, at most [`SESSION_CONTEXT_CAP`].
    pub n_ctx: Option<usize>,
}

impl ContextRequest for SessionContext {
    type Cache = Session;

    fn n_ctx(&self, n_ctx_train: usize) -> usize {
        self.n_ctx.unwrap_or(n_ctx_train.min(SESSION_CONTEXT_CAP))
    }

    fn open(self, model: &mut Model<DynEngine>) -> Result<Session, LoadError> {
        let n_ctx = self.n_ctx(model.config().n_ctx_train);
        model.new_session(n_ctx).map_err(|e| LoadError::Cache { n_ctx, source: Box::new(e) })
    }
}

/// One KV cache that several sequences share in pages (`serve`'s slots), as llama-server's
/// unified cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedContext {
    /// The positions of every sequence together (`-c`); 0: the training context.
    pub n_ctx: usize,
    /// The most sequences at once.
    pub sequences: usize,
}

impl ContextRequest for SharedContext {
    type Cache = SharedCache;

    fn n_ctx(&self, n_ctx_train: usize) -> usize {
        if self.n_ctx == 0 {
            n_ctx_train
        } else {
            self.n_ctx
        }
    }

    fn open(self, model: &mut Model<DynEngine>) -> Result<SharedCache, LoadError> {
        let n_ctx = self.n_ctx(model.config().n_ctx_train);
        model.new_shared_cache(n_ctx, self.sequences).map_err(|e| LoadError::Cache { n_ctx, source: Box::new(e) })
    }
}

/// No cache: the front end opens its own (`bench --npl`, one per batch size).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoContext;

impl ContextRequest for NoContext {
    type Cache = ();

    fn n_ctx(&self, _: usize) -> usize {
        0
    }

    fn open(self, _: &mut Model<DynEngine>) -> Result<(), LoadError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_gets_its_flag_else_the_training_context_capped() {
        assert_eq!(SessionContext { n_ctx: Some(100) }.n_ctx(8192), 100);
        assert_eq!(SessionContext { n_ctx: Some(10_000) }.n_ctx(2048), 10_000);
        assert_eq!(SessionContext { n_ctx: None }.n_ctx(8192), SESSION_CONTEXT_CAP);
        assert_eq!(SessionContext { n_ctx: None }.n_ctx(2048), 2048);
    }

    #[test]
    fn a_shared_cache_gets_its_flag_else_the_training_context() {
        assert_eq!(SharedContext { n_ctx: 0, sequences: 4 }.n_ctx(8192), 8192);
        assert_eq!(SharedContext { n_ctx: 512, sequences: 4 }.n_ctx(8192), 512);
        assert_eq!(NoContext.n_ctx(8192), 0);
    }
}
