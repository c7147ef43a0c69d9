//! `purebee-rs chat` on a terminal: a REPL with line editing and a history file
//! (`history.rs`), messages of several lines between `"""` lines (`input.rs`), slash
//! commands (`command.rs`), and Ctrl-C that stops an answer without leaving
//! (`interrupt.rs`). After each answer a dim line says the decode speed and how much of the
//! context the conversation holds, with a warning as it fills up.
//!
//! An answer stopped by Ctrl-C is kept: the conversation goes on from what the user saw,
//! and the KV cache already holds it (`Conversation::reply` records every id that ran), so
//! nothing is recomputed; `/clear` forgets it.

mod command;
mod history;
mod input;
mod interrupt;

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::Arc;

use purebee_loader::DynEngine;
use purebee_memory::gguf::GgufFile;
use purebee_runtime::chat::{ChatError, Conversation};
use purebee_runtime::{GenerateOptions, StopReason};

use crate::CliError;
use command::{Command, Setting, Show};
use input::{Input, LineReader};
use interrupt::Interrupt;

/// The conversation of `chat`, on the engine the flags chose.
pub type Chat = Conversation<DynEngine>;

/// From this share of the context on, each answer is followed by a warning.
const FULL_WARNING: f64 = 0.8;

/// What the REPL starts from.
pub struct Setup<'a> {
    /// The model file's path, for `/show info`.
    pub path: &'a Path,
    /// The model file, for `/show info` and `/show template`.
    pub file: &'a GgufFile,
    /// Sampling and the token limit of each answer.
    pub opts: GenerateOptions,
}

/// Runs the REPL until Ctrl-D or `/bye`; answers and what `/show` shows go to `out`,
/// messages to stderr.
pub fn run(setup: Setup<'_>, mut chat: Chat, out: &mut dyn Write) -> Result<(), CliError> {
    let Setup { path, file, mut opts } = setup;
    let interrupt = Interrupt::install()?;
    let mut reader = LineReader::new(history::path())?;
    let dim = Dim(std::io::stderr().is_terminal());
    eprintln!("purebee-rs: chat with {}; /? for help, Ctrl-D or /bye to leave", path.display());
    // Each turn draws from its own stream (seed, seed + 1, ...), as in the plain mode.
    let mut first_seed = opts.sampler.seed;
    let mut turn = 0u64;
    loop {
        let text = match reader.read()? {
            Input::End => break,
            Input::Interrupted => {
                eprintln!("Use Ctrl-D or /bye to leave.");
                continue;
            }
            Input::Text(text) => text,
        };
        if text.trim().is_empty() {
            continue;
        }
        if text.trim_start().starts_with('/') {
            let command = match command::parse(&text) {
                Ok(c) => c,
                Err(message) => {
                    eprintln!("purebee-rs: {message}");
                    continue;
                }
            };
            match command {
                Command::Bye => break,
                Command::Help => writeln!(out, "{}", command::HELP)?,
                Command::Clear => {
                    chat.clear();
                    eprintln!("purebee-rs: conversation cleared");
                }
                Command::Set(setting) => {
                    let mut sampler = opts.sampler.clone();
                    setting.apply(&mut sampler);
                    match sampler.validate() {
                        Ok(()) => {
                            opts.sampler = sampler;
                            if let Setting::Seed(seed) = setting {
                                (first_seed, turn) = (seed, 0);
                            }
                            eprintln!("purebee-rs: {}", describe(setting));
                        }
                        Err(e) => eprintln!("purebee-rs: /set: {e}"),
                    }
                }
                Command::SetSystem(text) => {
                    chat.set_system(Some(text));
                    eprintln!("purebee-rs: system message set; the conversation goes on with it");
                }
                Command::Show(what) => show(what, path, file, &chat, &opts, first_seed, turn, out)?,
            }
            out.flush()?;
            continue;
        }

        opts.sampler.seed = first_seed.wrapping_add(turn);
        turn += 1;
        let mut write_error = None;
        interrupt.reset();
        opts.stop = Some(Arc::clone(interrupt.flag()));
        let reply = chat.reply(&text, &opts, |piece| {
            if write_error.is_none() {
                if let Err(e) = write!(out, "{piece}").and_then(|_| out.flush()) {
                    write_error = Some(e);
                }
            }
        });
        interrupt.reset();
        if let Some(e) = write_error {
            return Err(e.into());
        }
        let n_ctx = chat.session().n_ctx();
        let reply = match reply {
            Ok(reply) => reply,
            Err(e @ ChatError::ContextFull { .. }) => {
                eprintln!("purebee-rs: {e}; /clear starts over (or restart with a larger -c)");
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        writeln!(out)?;
        out.flush()?;
        let used = chat.cached_ids().len();
        let speed = format!("{:.1} tokens/s, context {used}/{n_ctx}", reply.generation.decode_tokens_per_s());
        match reply.generation.stop {
            StopReason::Interrupted => {
                eprintln!("{}", dim.paint(&format!("stopped (the answer so far is kept), {speed}")))
            }
            _ => eprintln!("{}", dim.paint(&speed)),
        }
        if reply.generation.stop == StopReason::ContextFull {
            eprintln!("purebee-rs: the answer was cut: the conversation fills the context of {n_ctx} tokens; /clear starts over (or restart with a larger -c)");
        } else if used as f64 >= FULL_WARNING * n_ctx as f64 {
            eprintln!(
                "purebee-rs: the context is {:.0}% full ({used}/{n_ctx} tokens); /clear starts over (or restart with a larger -c)",
                100.0 * used as f64 / n_ctx as f64
            );
        }
    }
    Ok(())
}

/// What `/set` changed, in words.
fn describe(setting: Setting) -> String {
    match setting {
        Setting::Temperature(v) => format!("temperature set to {v}"),
        Setting::TopK(v) => format!("top_k set to {v}"),
        Setting::TopP(v) => format!("top_p set to {v}"),
        Setting::MinP(v) => format!("min_p set to {v}"),
        Setting::Seed(v) => format!("seed set to {v} (the next answer's; later ones take the next seeds)"),
        Setting::RepeatPenalty(v) => format!("repeat_penalty set to {v}"),
    }
}

/// Writes what `/show` asks for.
#[allow(clippy::too_many_arguments)]
fn show(
    what: Show,
    path: &Path,
    file: &GgufFile,
    chat: &Chat,
    opts: &GenerateOptions,
    first_seed: u64,
    turn: u64,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let model = chat.model();
    match what {
        Show::Info => {
            let c = model.config();
            let parameters: u64 = file.tensors().iter().map(|t| t.n_elements() as u64).sum();
            writeln!(out, "model:         {}", path.display())?;
            writeln!(out, "architecture:  {}", c.arch.name())?;
            writeln!(out, "parameters:    {parameters}")?;
            writeln!(
                out,
                "layers:        {} (embedding {}, {} heads, {} kv heads)",
                c.n_layer, c.n_embd, c.n_head, c.n_kv_head
            )?;
            writeln!(out, "engine:        {}", model.engine().name())?;
            writeln!(out, "context:       {} tokens (trained with {})", chat.session().n_ctx(), c.n_ctx_train)?;
            writeln!(
                out,
                "conversation:  {} messages, {}/{} tokens in the context",
                chat.messages().len(),
                chat.cached_ids().len(),
                chat.session().n_ctx()
            )?;
        }
        Show::Template => match file.get("tokenizer.chat_template").and_then(|v| v.as_str()) {
            Some(t) => writeln!(out, "{}", t.trim_end())?,
            None => writeln!(out, "(no tokenizer.chat_template)")?,
        },
        Show::Parameters => {
            let s = &opts.sampler;
            writeln!(out, "temperature     {}", s.temperature)?;
            writeln!(out, "top_k           {}", s.top_k)?;
            writeln!(out, "top_p           {}", s.top_p)?;
            writeln!(out, "min_p           {}", s.min_p)?;
            writeln!(out, "repeat_penalty  {}", s.repeat_penalty)?;
            writeln!(out, "repeat_last_n   {}", s.repeat_last_n)?;
            writeln!(out, "seed            {} (the next answer's)", first_seed.wrapping_add(turn))?;
            match opts.max_new_tokens {
                usize::MAX => writeln!(out, "n_predict       -1 (until the end of the answer)")?,
                n => writeln!(out, "n_predict       {n}")?,
            }
            writeln!(out, "system          {}", chat.system().unwrap_or("(none)"))?;
        }
    }
    Ok(())
}

/// Dim text on a terminal (SGR 2), plain text elsewhere.
struct Dim(bool);

impl Dim {
    fn paint(&self, text: &str) -> String {
        if self.0 {
            format!("\x1b[2m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }
}
