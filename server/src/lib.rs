//! # purebee-server: an OpenAI-compatible HTTP server (`purebee-rs serve`)
//!
//! Serves one model over HTTP as OpenAI's API does (`/v1/chat/completions`,
//! `/v1/completions`, `/v1/models`) plus llama-server's `/health`, `/tokenize`,
//! `/detokenize` and `/metrics`, streaming or not, to several clients at once.
//!
//! One engine thread owns the model and `parallel` sessions (slots, each its own KV cache
//! over the shared weights) and gives each busy slot one step in turn (a prefill chunk or
//! one token); HTTP handlers on tokio talk to it through channels. See [`Server`].
//!
//! It must not know an engine's internals or how a model is scripted: it drives
//! `purebee_runtime`'s `Model`, `Session` and `Generator`, and gets its engine from
//! `purebee_loader`.

#![forbid(unsafe_code)]

mod api_error;
mod auth;
mod body;
mod config;
mod engine;
mod error;
mod load;
mod metrics;
mod prompt;
mod protocol;
mod routes;
mod server;
mod state;
mod stop;
mod stream;
mod validate;

pub use config::ServerConfig;
pub use error::ServerError;
pub use server::Server;

/// Runs the server until SIGTERM or SIGINT, then stops accepting connections, ends open
/// streams cleanly and returns (blocking; the server builds its own tokio runtime).
pub fn run(config: ServerConfig) -> Result<(), ServerError> {
    let server = Server::start(config)?;
    server.shutdown_on_signals()?;
    server.wait()
}
