//! Why the server could not start or stopped with an error (errors of one request are
//! `ApiError`s, answered to its client).

use purebee_loader::LoadError;

/// What stopped the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A setting out of range.
    #[error("{flag} {value}: {reason}")]
    Config {
        /// The flag.
        flag: &'static str,
        /// The value given.
        value: String,
        /// What is allowed.
        reason: String,
    },
    /// The address could not be bound.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// `host:port` as given.
        address: String,
        /// Why.
        source: std::io::Error,
    },
    /// The model could not be opened or loaded, its engine created, its tokenizer built or
    /// the slots' KV cache opened (boxed: it is much larger than the other variants).
    #[error(transparent)]
    Load(Box<LoadError>),
    /// The warm-up pass failed.
    #[error("the warm-up pass: {0}")]
    Warmup(Box<purebee_runtime::ModelError>),
    /// The runtime, a thread or a signal handler could not be set up.
    #[error("{what}: {source}")]
    Io {
        /// What was being set up.
        what: &'static str,
        /// Why it failed.
        source: std::io::Error,
    },
    /// A server thread panicked (a bug).
    #[error("the {0} thread panicked")]
    Panicked(&'static str),
}

impl From<LoadError> for ServerError {
    fn from(e: LoadError) -> ServerError {
        ServerError::Load(Box::new(e))
    }
}
