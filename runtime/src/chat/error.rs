//! The errors of chat templates and conversations ([`ChatError`]).

use crate::ModelError;

use super::CHAT_TEMPLATE_KEY;

/// Why a chat template could not be read or rendered, or a turn could not run.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// The GGUF file has no chat template.
    #[error("{file}: no chat template (the key {CHAT_TEMPLATE_KEY} is missing); give a plain prompt with `run -p`, without --chat, instead")]
    MissingTemplate {
        /// The file.
        file: String,
    },
    /// The template is present but not a string (the GGUF error names the file and key).
    #[error(transparent)]
    Gguf(#[from] purebee_memory::gguf::GgufError),
    /// The template is not valid Jinja.
    #[error("{}{CHAT_TEMPLATE_KEY} does not parse: {message}", in_file(.file))]
    Parse {
        /// The file (`None` for a template given as text, [`super::ChatTemplate::new`]).
        file: Option<String>,
        /// minijinja's message (kind, detail, line).
        message: String,
    },
    /// The template failed while rendering (an undefined method, a `raise_exception`, ...).
    /// [`super::ChatTemplate::from_gguf`] renders one user message to find a template that
    /// fails on every conversation when the file is loaded.
    #[error("{}{CHAT_TEMPLATE_KEY} failed to render: {message}", in_file(.file))]
    Render {
        /// The file (`None` for a template given as text, [`super::ChatTemplate::new`]).
        file: Option<String>,
        /// minijinja's message (kind, detail, line).
        message: String,
    },
    /// The next turn's prompt does not fit in the KV cache.
    #[error("the conversation has outgrown the context of {n_ctx} tokens: the next turn's prompt is {prompt_tokens} tokens (use -c to enlarge the context)")]
    ContextFull {
        /// Tokens of the whole rendered conversation.
        prompt_tokens: usize,
        /// The context size.
        n_ctx: usize,
    },
    /// The model failed while running (boxed: it is much larger than the other variants).
    #[error(transparent)]
    Model(Box<ModelError>),
}

impl From<ModelError> for ChatError {
    fn from(e: ModelError) -> ChatError {
        ChatError::Model(Box::new(e))
    }
}

/// `"FILE: "`, or nothing without a file.
fn in_file(file: &Option<String>) -> String {
    file.as_ref().map(|f| format!("{f}: ")).unwrap_or_default()
}
