//! Request fields, read from the body's JSON object by `body::fields`. Each struct reads
//! only its own fields, so chat and completions share [`Sampling`]. Fields whose JSON may
//! take several shapes (`stop`, `prompt`, a message's `content`) stay `Value`s here and are
//! checked where they are used, with messages naming them.

use serde::Deserialize;
use serde_json::Value;

/// Sampling settings, limits and streaming options of `/v1/chat/completions` and
/// `/v1/completions` (llama-server's names and meanings).
#[derive(Debug, Default, Deserialize)]
pub struct Sampling {
    /// The model's name: any name is accepted (one model is served), so it is read only
    /// to refuse a value that is not a string.
    #[serde(rename = "model")]
    pub _model: Option<String>,
    /// 0: greedy.
    pub temperature: Option<f64>,
    /// In (0, 1].
    pub top_p: Option<f64>,
    /// 0: every token.
    pub top_k: Option<i64>,
    /// In [0, 1].
    pub min_p: Option<f64>,
    /// > 0; 1 is off.
    pub repeat_penalty: Option<f64>,
    /// Tokens the penalties look back at; -1: the whole context.
    pub repeat_last_n: Option<i64>,
    /// In [-2, 2].
    pub presence_penalty: Option<f64>,
    /// In [-2, 2].
    pub frequency_penalty: Option<f64>,
    /// The draw's seed; absent or -1: a random one.
    pub seed: Option<i64>,
    /// The most tokens to generate.
    pub max_tokens: Option<i64>,
    /// OpenAI's newer name for `max_tokens` (wins over it).
    pub max_completion_tokens: Option<i64>,
    /// Keep generating past end-of-generation tokens (llama-server's).
    pub ignore_eos: Option<bool>,
    /// Answer as server-sent events.
    pub stream: Option<bool>,
    /// Streaming options.
    pub stream_options: Option<StreamOptions>,
    /// A string or an array of strings.
    pub stop: Option<Value>,
}

/// `stream_options`.
#[derive(Debug, Default, Deserialize)]
pub struct StreamOptions {
    /// Send a usage chunk (with `"choices": []`) before `[DONE]`.
    pub include_usage: Option<bool>,
}

/// The fields only chat has.
#[derive(Debug, Deserialize)]
pub struct ChatFields {
    /// The conversation.
    pub messages: Vec<MessageIn>,
}

/// One message as sent.
#[derive(Debug, Deserialize)]
pub struct MessageIn {
    /// `system`, `developer`, `user`, `assistant`, ...
    pub role: String,
    /// A string, an array of `{"type": "text", "text": ...}` parts, or null.
    #[serde(default)]
    pub content: Value,
}

/// The fields only completions have.
#[derive(Debug, Deserialize)]
pub struct CompletionFields {
    /// A string, an array of one string, an array of token ids, or an array of one such
    /// array.
    pub prompt: Value,
}

/// `POST /tokenize`.
#[derive(Debug, Deserialize)]
pub struct TokenizeRequest {
    /// The text.
    pub content: String,
    /// Put BOS first when the vocabulary adds it.
    #[serde(default)]
    pub add_special: bool,
    /// Turn special-token text (`<|im_start|>`) into those tokens.
    #[serde(default = "yes")]
    pub parse_special: bool,
    /// Answer `{"id", "piece"}` pairs instead of ids.
    #[serde(default)]
    pub with_pieces: bool,
}

/// `POST /detokenize`.
#[derive(Debug, Deserialize)]
pub struct DetokenizeRequest {
    /// Token ids.
    pub tokens: Vec<i64>,
}

fn yes() -> bool {
    true
}
