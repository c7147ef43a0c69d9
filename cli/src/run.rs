//! `purebee-rs run`: generate text from a prompt, streamed to stdout; with `--chat` the
//! prompt is a user message in the model's chat template and only the answer is printed.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use purebee_loader::{LoadedModel, ModelText};
use purebee_runtime::chat::{tokenize_prompt, ChatMessage};
use purebee_runtime::tokenizer::StreamDecoder;
use purebee_runtime::{generate, GenerateOptions, StopReason};

use crate::generation_args::GenerationArgs;
use crate::{loading, models, speed, CliError};

/// What `run` prints on stdout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// The prompt (the answer only, with --chat) and the generated text, streamed.
    Text,
    /// One JSON object at the end.
    Json,
}

/// Arguments of `run` (flag names as llama.cpp users know them).
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("input").required(true).args(["prompt", "tokens"]))]
pub struct RunArgs {
    /// The GGUF model: a path, a pulled name (`purebee-rs list`), or an hf:// or http(s)
    /// source (pulled on first use).
    pub model: PathBuf,
    /// The prompt text.
    #[arg(short = 'p', long)]
    pub prompt: Option<String>,
    /// The prompt as token ids, comma separated.
    #[arg(long, value_delimiter = ',')]
    pub tokens: Option<Vec<u32>>,
    /// Send the prompt as a user message through the model's chat template
    /// (tokenizer.chat_template) and print only the answer.
    #[arg(long)]
    pub chat: bool,
    /// A system message before the user message (needs --chat).
    #[arg(long)]
    pub system: Option<String>,
    /// Keep generating past end-of-generation tokens.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Sampling, context and engine.
    #[command(flatten)]
    pub generation: GenerationArgs,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub output: Output,
}

/// Runs `run`.
pub fn run(args: &RunArgs, out: &mut dyn Write) -> Result<(), CliError> {
    if args.system.is_some() && !args.chat {
        return Err("--system needs --chat: the system message goes through the model's chat template".into());
    }
    if args.chat && args.prompt.is_none() {
        return Err("--chat needs a text prompt (-p TEXT), not --tokens".into());
    }
    let mut file = loading::open(&models::resolve(&args.model)?, &args.generation.engine)?;
    // Encoded before the weights load: a prompt or a template that cannot work costs no load.
    let text = file.text()?;
    let prompt_ids = match (&args.prompt, &args.tokens) {
        (Some(prompt), _) if args.chat => chat_prompt(text, args.system.as_deref(), prompt)?,
        (Some(prompt), _) => text.tokenizer.encode(prompt, true, true),
        (None, Some(ids)) => ids.clone(),
        (None, None) => return Err("give a prompt with -p TEXT or --tokens 1,2,3".into()),
    };
    let sampler = args.generation.sampler()?;
    args.generation.spec.validate()?;
    let LoadedModel { file, tokenizer, mut model, cache: mut session, .. } =
        loading::load(file, &args.generation.engine, args.generation.context())?;
    if let Some(&bad) = prompt_ids.iter().find(|&&t| t as usize >= model.config().n_vocab) {
        return Err(format!("--tokens: id {bad} is outside the vocabulary of {} tokens", model.config().n_vocab).into());
    }
    // Checked before the prompt is echoed, so an oversized prompt is an error and nothing else.
    if prompt_ids.len() > session.n_ctx() {
        return Err(purebee_runtime::ModelError::ContextFull {
            tokens: prompt_ids.len(),
            pos: 0,
            n_ctx: session.n_ctx(),
            n_ctx_train: session.n_ctx_train(),
        }
        .into());
    }
    let spec = &args.generation.spec;
    let speculation = spec.config(file.path(), Some(&tokenizer), &args.generation.engine, Some(session.n_ctx()))?;
    args.generation.say_seed(&sampler);
    let opts = GenerateOptions {
        max_new_tokens: args.generation.max_new_tokens(),
        ignore_eos: args.ignore_eos,
        sampler,
        stop: None,
        speculation,
    };

    // Control tokens (an end-of-turn marker) are not text: they are not printed.
    let mut decoder = StreamDecoder::new(&tokenizer).skip_control(true);
    let mut text = String::new();
    let mut write_error = None;
    let streaming = args.output == Output::Text;
    if streaming && !args.chat {
        if let Some(p) = &args.prompt {
            write!(out, "{p}")?;
            out.flush()?;
        }
    }
    let g = generate(
        &mut model,
        &mut session,
        &prompt_ids,
        &opts,
        |t| tokenizer.is_eog(t),
        |t| {
            let piece = decoder.push(t);
            text.push_str(&piece);
            if streaming && write_error.is_none() {
                if let Err(e) = write!(out, "{piece}").and_then(|_| out.flush()) {
                    write_error = Some(e);
                }
            }
        },
    )?;
    if let Some(e) = write_error {
        return Err(e.into());
    }
    let rest = decoder.finish();
    text.push_str(&rest);
    match args.output {
        Output::Text => writeln!(out, "{rest}")?,
        Output::Json => {
            let j = serde_json::json!({
                "prompt_ids": prompt_ids,
                "generated_ids": g.generated,
                "text": text,
                "prompt_tokens_per_s": g.prompt_tokens_per_s(prompt_ids.len()),
                "decode_tokens_per_s": g.decode_tokens_per_s(),
                "draft_tokens": g.speculation.drafted,
                "draft_tokens_accepted": g.speculation.accepted,
            });
            writeln!(out, "{j}")?;
        }
    }
    // The text ends before the speed line on stderr, in a terminal too.
    out.flush()?;
    if g.stop == StopReason::ContextFull {
        eprintln!("purebee-rs: stopped: the context of {} tokens is full (-c to enlarge it)", session.n_ctx());
    }
    speed::report(model.engine().name(), &format!("{} tokens", prompt_ids.len()), prompt_ids.len(), &g);
    Ok(())
}

/// The ids of `user` (after an optional `system` message) in the model's chat template,
/// opening the assistant's turn.
fn chat_prompt(text: &ModelText, system: Option<&str>, user: &str) -> Result<Vec<u32>, CliError> {
    let template = text.template.as_ref().map_err(|e| e.to_string())?;
    let mut messages: Vec<ChatMessage> = system.map(|s| ChatMessage::new("system", s)).into_iter().collect();
    messages.push(ChatMessage::new("user", user));
    Ok(tokenize_prompt(&text.tokenizer, &template.render(&messages, true)?))
}
