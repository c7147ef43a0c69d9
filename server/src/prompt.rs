//! From a request to prompt ids: chat messages through the model's template, a completion's
//! text or token ids; then the check that the prompt fits a slot's context, before any
//! stream starts.

use purebee_runtime::chat::{tokenize_prompt, ChatError, ChatMessage};
use serde_json::Value;

use crate::api_error::{ApiError, ErrorKind};
use crate::body::json_kind;
use crate::protocol::request::MessageIn;
use crate::state::Ready;

/// The ids of a chat: the messages rendered by the model's template, with the opening of
/// the assistant's turn.
pub fn chat(ready: &Ready, messages: Vec<MessageIn>) -> Result<Vec<u32>, ApiError> {
    let template = ready.template.as_ref().map_err(|why| {
        ApiError::new(
            ErrorKind::NotSupported,
            format!("this model has no usable chat template ({why}); use /v1/completions"),
        )
    })?;
    if messages.is_empty() {
        return Err(ApiError::invalid("messages: must not be empty"));
    }
    let messages = messages
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            // OpenAI's newer name for the system role, which templates do not know.
            let role = if m.role == "developer" { "system" } else { m.role.as_str() };
            Ok(ChatMessage::new(role, &content(i, &m.content)?))
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    let rendered = template.render(&messages, true).map_err(|e| match e {
        // The template rejected the conversation (roles out of order, ...): the client's to fix.
        ChatError::Render { message, .. } => {
            ApiError::invalid(format!("messages: the chat template failed: {message}"))
        }
        e => ApiError::server(e.to_string()),
    })?;
    Ok(tokenize_prompt(&ready.tokenizer, &rendered))
}

/// A message's text: a string, text parts joined, or nothing (`null`).
fn content(i: usize, content: &Value) -> Result<String, ApiError> {
    match content {
        Value::Null => Ok(String::new()),
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut text = String::new();
            for (j, part) in parts.iter().enumerate() {
                let at = format!("messages[{i}].content[{j}]");
                match part.get("type").and_then(Value::as_str) {
                    Some("text") => match part.get("text") {
                        Some(Value::String(t)) => text.push_str(t),
                        other => {
                            return Err(ApiError::invalid(format!(
                                "{at}.text: expected a string, got {}",
                                other.map_or("nothing", json_kind)
                            )))
                        }
                    },
                    Some(other) => {
                        return Err(ApiError::invalid(format!(
                            "{at}.type: '{other}' is not supported (only 'text' parts are)"
                        )))
                    }
                    None => return Err(ApiError::invalid(format!("{at}: expected an object with a 'type'"))),
                }
            }
            Ok(text)
        }
        other => Err(ApiError::invalid(format!(
            "messages[{i}].content: expected a string or an array of text parts, got {}",
            json_kind(other)
        ))),
    }
}

/// The ids of a completion's `prompt`: a string (tokenized with BOS and special tokens, as
/// llama-server does), token ids, or either wrapped in an array of one.
pub fn completion(ready: &Ready, prompt: &Value) -> Result<Vec<u32>, ApiError> {
    let ids = match prompt {
        Value::String(s) => ready.tokenizer.encode(s, true, true),
        Value::Array(items) => match items.first() {
            Some(Value::String(_) | Value::Array(_)) if items.len() > 1 => {
                return Err(ApiError::invalid(format!(
                    "prompt: {} prompts given; one per request is supported",
                    items.len()
                )))
            }
            Some(Value::String(s)) => ready.tokenizer.encode(s, true, true),
            Some(Value::Array(inner)) => token_ids("prompt[0]", inner, ready.n_vocab)?,
            _ => token_ids("prompt", items, ready.n_vocab)?,
        },
        other => {
            return Err(ApiError::invalid(format!(
                "prompt: expected a string or an array of token ids, got {}",
                json_kind(other)
            )))
        }
    };
    if ids.is_empty() {
        return Err(ApiError::invalid("prompt: must not be empty"));
    }
    Ok(ids)
}

/// Token ids, each an integer within the vocabulary.
pub fn token_ids(name: &str, items: &[Value], n_vocab: usize) -> Result<Vec<u32>, ApiError> {
    items
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let id = v.as_i64().ok_or_else(|| {
                ApiError::invalid(format!("{name}[{i}]: expected a token id (an integer), got {}", json_kind(v)))
            })?;
            checked_id(&format!("{name}[{i}]"), id, n_vocab)
        })
        .collect()
}

/// `id` if it is within the vocabulary.
pub fn checked_id(name: &str, id: i64, n_vocab: usize) -> Result<u32, ApiError> {
    match u32::try_from(id) {
        Ok(t) if (t as usize) < n_vocab => Ok(t),
        _ => Err(ApiError::invalid(format!(
            "{name}: token id {id} is outside the vocabulary of {n_vocab} tokens (0..{})",
            n_vocab.saturating_sub(1)
        ))),
    }
}

/// 400 `exceed_context_size_error` when the prompt does not fit a slot's context.
pub fn check_fits(ids: &[u32], n_ctx: usize) -> Result<(), ApiError> {
    if ids.len() > n_ctx {
        return Err(ApiError::exceeds_context(ids.len(), n_ctx));
    }
    Ok(())
}
