//! What chat and completions share once they have prompt ids: the checks before anything
//! starts (the prompt fits the KV cache), the job handed to the engine (503 when the queue is
//! full), the wait for a slot, then the answer streamed or whole.
//!
//! A handler waits for its job to get a slot before it answers, so an error up to then is
//! still an HTTP status; if its client leaves meanwhile, the dropped receiver takes the job
//! out of the queue.

use axum::response::{IntoResponse, Response};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use crate::api_error::ApiError;
use crate::engine::{Event, Job};
use crate::prompt::check_fits;
use crate::protocol::response::{Completion, Meta};
use crate::state::Ready;
use crate::stream;
use crate::validate::Params;

/// Runs a generation of `prompt` and answers it as `meta` says.
pub async fn answer(ready: &Ready, mut meta: Meta, prompt: Vec<u32>, params: Params) -> Result<Response, ApiError> {
    check_fits(&prompt, ready.n_ctx)?;
    meta.logprobs = params.logprobs.is_some();
    let (events, mut receiver) = unbounded_channel();
    ready.submitter.submit(Job {
        prompt,
        sampler: params.sampler,
        max_tokens: params.max_tokens,
        stop: params.stop,
        ignore_eos: params.ignore_eos,
        logprobs: params.logprobs,
        events,
        received: std::time::Instant::now(),
    })?;
    match receiver.recv().await {
        Some(Event::Started) => {}
        Some(Event::Failed(e)) => return Err(e),
        Some(other) => return Err(ApiError::server(format!("the engine answered {other:?} before starting"))),
        None => return Err(ApiError::unavailable("the server is shutting down")),
    }
    if params.stream {
        Ok(stream::response(meta, params.include_usage, receiver))
    } else {
        whole(meta, receiver).await
    }
}

/// Collects the text until the end and answers it in one piece.
async fn whole(meta: Meta, mut receiver: UnboundedReceiver<Event>) -> Result<Response, ApiError> {
    let (mut text, mut tokens) = (String::new(), Vec::new());
    loop {
        match receiver.recv().await {
            Some(Event::Text(t, logged)) => {
                text.push_str(&t);
                tokens.extend(logged);
            }
            Some(Event::Started) => {}
            Some(Event::Done(finish)) => {
                return Ok(super::json(&Completion::new(&meta, text, &tokens, &finish)).into_response())
            }
            Some(Event::Failed(e)) => return Err(e),
            None => return Err(ApiError::server("the engine stopped before the answer was complete")),
        }
    }
}
