//! A multi-turn conversation on one model that keeps its KV cache between turns.

use purebee_isa::Engine;

use crate::tokenizer::Tokenizer;
use crate::{generate_reusing_cache, GenerateOptions, Generation, Model, Session};

use super::{tokenize_prompt, ChatError, ChatMessage, ChatTemplate};

/// The outcome of one turn.
#[derive(Clone, Debug)]
pub struct Reply {
    /// The answer's text (control tokens, such as the end-of-turn marker, left out).
    pub text: String,
    /// The generated ids and why generation stopped.
    pub generation: Generation,
    /// Tokens of the whole rendered conversation this turn answered.
    pub prompt_tokens: usize,
    /// How many of them the KV cache already held (not prefilled again).
    pub reused_tokens: usize,
}

impl Reply {
    /// Tokens prefilled this turn.
    pub fn prefilled_tokens(&self) -> usize {
        self.prompt_tokens - self.reused_tokens
    }
}

/// A conversation: the messages so far, on a model and one session whose KV cache holds
/// what the conversation ran.
///
/// Each turn renders the whole conversation with the chat template, so the prompt is
/// exactly what the template gives for these messages (a template may change earlier
/// text as the conversation grows). The ids are compared with those already in the KV
/// cache; only the suffix after the common prefix is prefilled. A turn therefore costs
/// its new tokens, not the whole history.
pub struct Conversation<E: Engine> {
    model: Model<E>,
    session: Session,
    tokenizer: Tokenizer,
    template: ChatTemplate,
    system: Option<String>,
    messages: Vec<ChatMessage>,
}

impl<E: Engine> Conversation<E> {
    /// An empty conversation on `model` in `session`, whose KV cache it takes over;
    /// `system` is the system message it starts with (and starts over with).
    pub fn new(
        model: Model<E>,
        session: Session,
        tokenizer: Tokenizer,
        template: ChatTemplate,
        system: Option<String>,
    ) -> Self {
        let mut c = Conversation { model, session, tokenizer, template, system, messages: Vec::new() };
        c.clear();
        c
    }

    /// Forgets every message but the system message; the KV cache is overwritten from
    /// position 0 at the next turn.
    pub fn clear(&mut self) {
        self.messages.clear();
        self.messages.extend(self.system.as_deref().map(|s| ChatMessage::new("system", s)));
        self.session.clear();
    }

    /// Replaces the system message (`None`: none) and keeps the rest of the conversation;
    /// the next turn renders it anew, so the KV cache is reused only up to where the new
    /// prompt differs (usually its start).
    pub fn set_system(&mut self, system: Option<String>) {
        if self.system.is_some() {
            self.messages.remove(0);
        }
        if let Some(s) = &system {
            self.messages.insert(0, ChatMessage::new("system", s));
        }
        self.system = system;
    }

    /// The system message.
    pub fn system(&self) -> Option<&str> {
        self.system.as_deref()
    }

    /// The messages so far.
    pub fn messages(&self) -> &[ChatMessage] {
        &self.messages
    }

    /// The model.
    pub fn model(&self) -> &Model<E> {
        &self.model
    }

    /// The session: the KV cache's size and what it holds.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The ids held in the KV cache, at positions `0..len`.
    pub fn cached_ids(&self) -> &[u32] {
        self.session.cached_ids()
    }

    /// Adds the user's message and generates the assistant's answer, calling `on_text`
    /// with each piece of text as it is decoded. Generation stops at an end-of-generation
    /// token unless `opts.ignore_eos`, after `opts.max_new_tokens`, or when the context
    /// is full (`reply.generation.stop` says which); the answer, cut or not, becomes the
    /// assistant's message.
    ///
    /// When the conversation no longer fits in the context this is
    /// [`ChatError::ContextFull`]; on any error the messages are left as they were before
    /// the call.
    pub fn reply(
        &mut self,
        user: &str,
        opts: &GenerateOptions,
        mut on_text: impl FnMut(&str),
    ) -> Result<Reply, ChatError> {
        self.messages.push(ChatMessage::new("user", user));
        let ids = match self.prepare() {
            Ok(p) => p,
            Err(e) => {
                self.messages.pop();
                return Err(e);
            }
        };
        let mut decoder = self.tokenizer.stream_decoder().skip_control(true);
        let mut text = String::new();
        let tokenizer = &self.tokenizer;
        let generation = generate_reusing_cache(
            &mut self.model,
            &mut self.session,
            &ids,
            opts,
            |t| tokenizer.is_eog(t),
            |t| {
                let piece = decoder.push(t);
                if !piece.is_empty() {
                    on_text(&piece);
                    text.push_str(&piece);
                }
            },
        );
        let generation = match generation {
            Ok(g) => g,
            Err(e) => {
                self.messages.pop();
                return Err(e.into());
            }
        };
        let rest = decoder.finish();
        if !rest.is_empty() {
            on_text(&rest);
            text.push_str(&rest);
        }
        // The session knows what its KV cache holds: the last generated id was sampled but
        // never run; the next turn's prompt brings it (or the template's own end of turn)
        // back in.
        self.messages.push(ChatMessage::new("assistant", &text));
        Ok(Reply { text, prompt_tokens: ids.len(), reused_tokens: generation.reused_tokens, generation })
    }

    /// Renders and tokenizes the conversation and checks that it fits.
    fn prepare(&self) -> Result<Vec<u32>, ChatError> {
        let rendered = self.template.render(&self.messages, true)?;
        let ids = tokenize_prompt(&self.tokenizer, &rendered);
        let n_ctx = self.session.n_ctx();
        if ids.len() > n_ctx {
            return Err(ChatError::ContextFull { prompt_tokens: ids.len(), n_ctx });
        }
        Ok(ids)
    }
}
