//! A model loaded in the tab and the one generation it runs, a step at a time, in the two
//! halves a browser needs: [`WebModel::begin_step`] runs a step and begins reading its
//! result, the page yields to its event loop until [`WebModel::step_ready`], then
//! [`WebModel::finish_step`] takes the token and returns the text it completes. Nothing
//! here blocks, and nothing here needs a browser: the native tests drive it the same way.

use purebee_isa::Engine;
use purebee_memory::gguf::GgufFile;
use purebee_runtime::chat::{tokenize_prompt, ChatMessage, ChatTemplate};
use purebee_runtime::sampler::SamplerConfig;
use purebee_runtime::tokenizer::{Tokenizer, Utf8Stream};
use purebee_runtime::{Generator, Model, ModelError, Session, StepInFlight};

use crate::WebError;

/// What a page asks of one generation.
#[derive(Clone, Debug)]
pub struct GenerateRequest {
    /// The most tokens to generate.
    pub max_tokens: usize,
    /// The sampler's settings (temperature 0: greedy).
    pub sampler: SamplerConfig,
}

/// Why a generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// The model ended its turn (an end-of-generation token).
    Stop,
    /// `max_tokens` were generated.
    Length,
    /// The context is full.
    Context,
}

impl Finish {
    /// The OpenAI name of the reason (`stop`, `length`), `context` for a full context.
    pub fn name(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
            Finish::Context => "context",
        }
    }
}

/// A model on its engine with its tokenizer, chat template and one KV cache.
pub struct WebModel {
    model: Model<Box<dyn Engine>>,
    tokenizer: Tokenizer,
    template: Option<ChatTemplate>,
    session: Session,
    engine: &'static str,
    running: Option<Running>,
}

/// The generation in progress.
struct Running {
    generator: Generator,
    max_tokens: usize,
    generated: Vec<u32>,
    text: Utf8Stream,
    in_flight: Option<StepInFlight>,
    finish: Option<Finish>,
    prompt_tokens: usize,
}

impl WebModel {
    /// Loads the GGUF image `bytes` (taken, not copied; `name` stands for its path in
    /// errors) on `engine` with a KV cache of at most `n_ctx` positions (the model's
    /// training context when smaller). `engine_name` is what the page shows (`cpu`,
    /// `webgpu`).
    pub fn load(
        name: &str,
        bytes: Vec<u8>,
        engine: Box<dyn Engine>,
        engine_name: &'static str,
        n_ctx: usize,
    ) -> Result<WebModel, WebError> {
        let file = GgufFile::from_vec(name, bytes)?;
        let tokenizer = Tokenizer::from_gguf(&file)?;
        // A model without a usable template still completes text.
        let template = ChatTemplate::from_gguf(&file, &tokenizer).ok();
        let mut model = Model::load(engine, &file)?;
        let n_ctx = n_ctx.clamp(1, model.config().n_ctx_train.max(1));
        let session = model.new_session(n_ctx)?;
        Ok(WebModel { model, tokenizer, template, session, engine: engine_name, running: None })
    }

    /// The engine that runs the model, as [`WebModel::load`] was told.
    pub fn engine(&self) -> &'static str {
        self.engine
    }

    /// The model's architecture and size, for the page.
    pub fn describe(&self) -> String {
        let c = self.model.config();
        format!("{:?}, {} layers, {} vocabulary, context {}", c.arch, c.n_layer, c.n_vocab, self.session.n_ctx())
    }

    /// Whether the model has a chat template ([`WebModel::start_chat`] needs one).
    pub fn has_chat_template(&self) -> bool {
        self.template.is_some()
    }

    /// Starts completing `prompt` as `purebee-rs run -p PROMPT` does (with the model's BOS,
    /// special tokens parsed). The KV cache keeps what an earlier generation left that
    /// this prompt begins with.
    pub fn start_completion(&mut self, prompt: &str, request: &GenerateRequest) -> Result<(), WebError> {
        let ids = self.tokenizer.encode(prompt, true, true);
        self.start(ids, request)
    }

    /// Starts the assistant's reply to `messages` (`(role, content)` pairs) in the model's
    /// chat template. A conversation that grows turn by turn reuses its cached prefix.
    pub fn start_chat(&mut self, messages: &[(String, String)], request: &GenerateRequest) -> Result<(), WebError> {
        let template = self.template.as_ref().ok_or(WebError::NoChatTemplate)?;
        let messages: Vec<ChatMessage> = messages.iter().map(|(r, c)| ChatMessage::new(r, c)).collect();
        let rendered = template.render(&messages, true)?;
        let ids = tokenize_prompt(&self.tokenizer, &rendered);
        self.start(ids, request)
    }

    fn start(&mut self, ids: Vec<u32>, request: &GenerateRequest) -> Result<(), WebError> {
        let generator =
            Generator::new(&self.session, &ids, request.sampler.clone())?.max_tokens(Some(request.max_tokens));
        let finish = (request.max_tokens == 0).then_some(Finish::Length);
        self.running = Some(Running {
            generator,
            max_tokens: request.max_tokens,
            generated: Vec::new(),
            text: Utf8Stream::default(),
            in_flight: None,
            finish,
            prompt_tokens: ids.len(),
        });
        Ok(())
    }

    /// Whether the generation has ended (or none was started).
    pub fn done(&self) -> bool {
        self.running.as_ref().is_none_or(|r| r.finish.is_some())
    }

    /// Why the generation ended, once [`WebModel::done`].
    pub fn finish_reason(&self) -> Option<Finish> {
        self.running.as_ref().and_then(|r| r.finish)
    }

    /// The ids generated so far.
    pub fn generated(&self) -> &[u32] {
        self.running.as_ref().map_or(&[], |r| &r.generated)
    }

    /// The prompt's length in tokens.
    pub fn prompt_tokens(&self) -> usize {
        self.running.as_ref().map_or(0, |r| r.prompt_tokens)
    }

    /// Ends the generation now (a stop button): [`WebModel::done`] turns true.
    pub fn stop(&mut self) {
        if let Some(r) = self.running.as_mut() {
            r.in_flight = None;
            r.finish.get_or_insert(Finish::Stop);
        }
    }

    /// Runs the next step (a prefill chunk or one token) and begins reading its result.
    pub fn begin_step(&mut self) -> Result<(), WebError> {
        let r = self.running.as_mut().ok_or(WebError::NotGenerating)?;
        if r.finish.is_some() || r.in_flight.is_some() {
            return Err(WebError::NotGenerating);
        }
        r.in_flight = Some(r.generator.begin_step(&mut self.model, &mut self.session)?);
        Ok(())
    }

    /// Whether the step begun last has its result (never waits): then
    /// [`WebModel::finish_step`] returns without blocking.
    pub fn step_ready(&mut self) -> bool {
        match self.running.as_ref().and_then(|r| r.in_flight.as_ref()) {
            Some(step) => step.is_ready(&mut self.model),
            None => true,
        }
    }

    /// Takes the result of the step begun last and returns the text it completes (empty
    /// for a prefill chunk, a control token, or a token that ends inside a character).
    pub fn finish_step(&mut self) -> Result<String, WebError> {
        let r = self.running.as_mut().ok_or(WebError::NotGenerating)?;
        let Some(step) = r.in_flight.take() else { return Err(WebError::NotGenerating) };
        let Some(token) = r.generator.finish_step(&mut self.model, &mut self.session, step)? else {
            return Ok(String::new());
        };
        // As `purebee-rs run`: every token but a control one is text, an end-of-generation
        // token included.
        r.generated.push(token);
        let mut piece = String::new();
        if !self.tokenizer.is_control(token) {
            piece = r.text.push(self.tokenizer.decode_token(token));
        }
        if self.tokenizer.is_eog(token) {
            r.finish = Some(Finish::Stop);
        } else if r.generated.len() >= r.max_tokens {
            r.finish = Some(Finish::Length);
        } else if !r.generator.has_room(&self.session) {
            r.finish = Some(Finish::Context);
        }
        if r.finish.is_some() {
            piece.push_str(&r.text.finish());
        }
        Ok(piece)
    }
}

impl From<ModelError> for WebError {
    fn from(e: ModelError) -> WebError {
        WebError::Model(e.to_string())
    }
}
