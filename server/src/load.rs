//! The engine thread's start: the engine created, the model loaded, one session per slot,
//! the tokenizer and chat template; then the handlers are told the model is ready and the
//! thread becomes the scheduler. It runs while the server already answers `/health` 503.

use std::sync::mpsc::Receiver;
use std::sync::Arc;

use purebee_loader::DynEngine;
use purebee_memory::gguf::GgufFile;
use purebee_runtime::chat::ChatTemplate;
use purebee_runtime::tokenizer::Tokenizer;
use purebee_runtime::{Model, Session};

use crate::engine::scheduler::Scheduler;
use crate::engine::{Command, Submitter};
use crate::state::{AppState, Ready};
use crate::{ServerConfig, ServerError};

/// A loaded model with its slots' sessions.
struct Loaded {
    model: Model<DynEngine>,
    sessions: Vec<Session>,
    tokenizer: Arc<Tokenizer>,
    template: Result<ChatTemplate, String>,
    n_ctx: usize,
    engine: String,
}

/// Loads the model, publishes it to the handlers, and runs the scheduler until shutdown.
pub fn load_and_serve(
    config: &ServerConfig,
    file: GgufFile,
    state: &AppState,
    submitter: Submitter,
    commands: Receiver<Command>,
) -> Result<(), ServerError> {
    let loaded = load(config, &file)?;
    eprintln!(
        "purebee-rs: model loaded on the {} engine: {} slots of {} tokens each",
        loaded.engine, config.parallel, loaded.n_ctx
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
    Scheduler::new(loaded.model, loaded.sessions, &tokenizer, commands, &state.metrics, config.prefill_chunk).run();
    Ok(())
}

fn load(config: &ServerConfig, file: &GgufFile) -> Result<Loaded, ServerError> {
    let created = config.engine.create()?;
    for note in &created.notes {
        eprintln!("purebee-rs: {note}");
    }
    let mut model = purebee_loader::load_model(&config.engine, created.engine, file)?;
    let n_ctx_train = model.config().n_ctx_train;
    let total = if config.n_ctx == 0 { n_ctx_train } else { config.n_ctx };
    let n_ctx = total / config.parallel;
    if n_ctx == 0 {
        return Err(ServerError::Config {
            flag: "-c",
            value: total.to_string(),
            reason: format!("too small for {} slots (each slot gets -c / --parallel positions)", config.parallel),
        });
    }
    if n_ctx > n_ctx_train {
        eprintln!(
            "purebee-rs: warning: a slot's context ({n_ctx}) is larger than the model's training context \
             ({n_ctx_train}); answers past {n_ctx_train} tokens may degrade"
        );
    }
    let sessions = (0..config.parallel)
        .map(|_| model.new_session(n_ctx).map_err(|e| ServerError::Sessions(Box::new(e))))
        .collect::<Result<Vec<_>, _>>()?;
    let tokenizer = Tokenizer::from_gguf(file)?;
    let template = ChatTemplate::from_gguf(file, &tokenizer).map_err(|e| e.to_string());
    if let Err(why) = &template {
        eprintln!("purebee-rs: warning: {why}; /v1/chat/completions will answer 501");
    }
    Ok(Loaded { model, sessions, tokenizer: Arc::new(tokenizer), template, n_ctx, engine: created.description })
}
