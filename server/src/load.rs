//! The engine thread's start: the engine created, the model loaded, the KV cache the slots
//! share, the tokenizer and chat template; then the handlers are told the model is ready and the
//! thread becomes the scheduler. It runs while the server already answers `/health` 503.

use std::sync::mpsc::Receiver;
use std::sync::Arc;

use purebee_loader::{ContextRequest, DynEngine, LoadedModel, ModelFile, SharedContext};
use purebee_runtime::batch::{BatchRows, RowRead, SharedCache};
use purebee_runtime::chat::ChatTemplate;
use purebee_runtime::tokenizer::Tokenizer;
use purebee_runtime::Model;

use crate::engine::scheduler::Scheduler;
use crate::engine::{Command, Submitter};
use crate::state::{AppState, Ready};
use crate::{ServerConfig, ServerError};

/// A loaded model with the KV cache its slots share.
struct Loaded {
    model: Model<DynEngine>,
    cache: SharedCache,
    tokenizer: Arc<Tokenizer>,
    template: Result<ChatTemplate, String>,
    n_ctx: usize,
    engine: String,
}

/// Loads the model, publishes it to the handlers, and runs the scheduler until shutdown.
pub fn load_and_serve(
    config: &ServerConfig,
    file: ModelFile,
    state: &AppState,
    submitter: Submitter,
    commands: Receiver<Command>,
) -> Result<(), ServerError> {
    let loaded = load(config, file)?;
    eprintln!(
        "purebee-rs: model loaded on the {} engine: {} slots sharing a KV cache of {} tokens, passes of up to {} tokens",
        loaded.engine,
        config.parallel,
        loaded.n_ctx,
        config.pass_rows()
    );
    let n_vocab = loaded.model.config().n_vocab;
    let n_ctx_train = loaded.model.config().n_ctx_train;
    let tokenizer = Arc::clone(&loaded.tokenizer);
    let ready = Ready {
        tokenizer: loaded.tokenizer,
        template: loaded.template,
        submitter,
        n_ctx: loaded.n_ctx,
        n_ctx_train,
        n_vocab,
        engine: loaded.engine,
    };
    // Only this thread sets it, once.
    let _ = state.ready.set(ready);
    let scheduler =
        Scheduler::new(loaded.model, loaded.cache, &tokenizer, commands, &state.metrics, config.pass_rows());
    scheduler.speculate(config.speculation.clone()).run();
    Ok(())
}

fn load(config: &ServerConfig, file: ModelFile) -> Result<Loaded, ServerError> {
    let context = SharedContext { n_ctx: config.n_ctx, sequences: config.parallel };
    let loaded = file.load(&config.engine, context, |created| {
        for note in &created.notes {
            eprintln!("purebee-rs: {note}");
        }
    })?;
    let LoadedModel { mut model, mut cache, tokenizer, template, engine, .. } = loaded;
    let n_ctx_train = model.config().n_ctx_train;
    let total = context.n_ctx(n_ctx_train);
    if total > n_ctx_train {
        eprintln!(
            "purebee-rs: warning: the context ({total}) is larger than the model's training context \
             ({n_ctx_train}); answers past {n_ctx_train} tokens may degrade"
        );
    }
    if config.warmup {
        // One token through every weight, then forgotten. On the 2B shape the first pass
        // after loading otherwise takes the file's page faults inside the first requests'
        // time.
        let rows = [BatchRows { seq: 0, ids: &[0], pos: 0, read: Some(RowRead::Greedy), read_rows: 1 }];
        model.forward_batch(&mut cache, &rows).map_err(|e| ServerError::Warmup(Box::new(e)))?;
        cache.clear(0);
    }
    let n_ctx = cache.n_ctx();
    let template = template.map_err(|e| e.to_string());
    if let Err(why) = &template {
        eprintln!("purebee-rs: warning: {why}; /v1/chat/completions will answer 501");
    }
    Ok(Loaded { model, cache, tokenizer: Arc::new(tokenizer), template, n_ctx, engine })
}
