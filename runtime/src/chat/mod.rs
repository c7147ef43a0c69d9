//! Chat: the model's own prompt format, and conversations that keep their KV cache.
//!
//! - [`ChatTemplate`] renders a list of [`ChatMessage`]s with the Jinja template a GGUF
//!   carries under `tokenizer.chat_template` (the Hugging Face convention: `messages`,
//!   `add_generation_prompt`, `bos_token`, `eos_token`).
//! - [`tokenize_prompt`] turns a rendered prompt into ids (special-token text parsed).
//! - [`Conversation`] runs turn after turn on one model: each turn renders the whole
//!   conversation, finds what the KV cache already holds and prefills only the rest.
//! - [`ChatError`] says why a template or a turn failed.

mod conversation;
mod error;
mod prompt;
mod template;

pub use conversation::{Conversation, Reply};
pub use error::ChatError;
pub use prompt::tokenize_prompt;
pub use template::{ChatMessage, ChatTemplate, CHAT_TEMPLATE_KEY};
