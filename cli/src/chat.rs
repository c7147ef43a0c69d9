//! `purebee-rs chat`: a conversation in the model's chat template; the conversation keeps
//! its KV cache between turns. On a terminal it is the REPL of `repl/`; otherwise user
//! turns are read line by line from stdin, each answer is streamed to stdout, `/clear`
//! starts over, `/exit` or the end of input quits.

use std::io::{BufRead, Write};
use std::path::PathBuf;

use clap::Args;
use purebee_loader::LoadedModel;
use purebee_runtime::chat::{ChatError, Conversation};
use purebee_runtime::{GenerateOptions, StopReason};

use crate::generation_args::GenerationArgs;
use crate::repl::{self, Chat, Setup};
use crate::{loading, models, speed, CliError};

/// Arguments of `chat`.
#[derive(Debug, Args)]
pub struct ChatArgs {
    /// The GGUF model (it must carry tokenizer.chat_template): a path, a pulled name, or an
    /// hf:// or http(s) source (pulled on first use).
    pub model: PathBuf,
    /// The system message the conversation starts with.
    #[arg(long)]
    pub system: Option<String>,
    /// Sampling, context and engine.
    #[command(flatten)]
    pub generation: GenerationArgs,
}

/// Runs `chat`: the REPL when `interactive` (stdin is a terminal), else one user turn per
/// line of `input`.
pub fn run(args: &ChatArgs, input: &mut dyn BufRead, interactive: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let mut file = loading::open(&models::resolve(&args.model)?, &args.generation.engine)?;
    // Checked before the weights load: a model without a template costs no load.
    if let Err(e) = &file.text()?.template {
        return Err(e.to_string().into());
    }
    let sampler = args.generation.sampler()?;
    args.generation.spec.validate()?;
    let LoadedModel { file, tokenizer, template, model, cache: session, .. } =
        loading::load(file, &args.generation.engine, args.generation.context())?;
    let spec = &args.generation.spec;
    let speculation = spec.config(file.path(), Some(&tokenizer), &args.generation.engine, Some(session.n_ctx()))?;
    args.generation.say_seed(&sampler);
    // Each answer ends at the model's end-of-turn token.
    let opts = GenerateOptions {
        max_new_tokens: args.generation.max_new_tokens(),
        ignore_eos: false,
        sampler,
        stop: None,
        speculation,
    };
    let conversation = Conversation::new(model, session, tokenizer, template?, args.system.clone());
    if interactive {
        let setup = Setup { path: file.path(), file: &file, opts };
        return repl::run(setup, conversation, out);
    }
    plain(conversation, opts, input, out)
}

/// One user turn per line of `input` (not a terminal), each answer on one line of `out`
/// and the speed line on stderr.
fn plain(
    mut conversation: Chat,
    mut opts: GenerateOptions,
    input: &mut dyn BufRead,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let n_ctx = conversation.session().n_ctx();
    let first_seed = opts.sampler.seed;
    let mut turn = 0u64;
    let mut line = String::new();
    loop {
        line.clear();
        if input.read_line(&mut line)? == 0 {
            break;
        }
        let user = line.trim_end_matches(['\n', '\r']);
        match user.trim() {
            "/exit" => break,
            "/clear" => {
                conversation.clear();
                eprintln!("purebee-rs: conversation cleared");
                continue;
            }
            "" => continue,
            _ => {}
        }
        // Each turn draws from its own stream (seed, seed + 1, ...): reproducible with --seed,
        // without every answer repeating the first one's random draws.
        opts.sampler.seed = first_seed.wrapping_add(turn);
        turn += 1;
        let mut write_error = None;
        let reply = conversation.reply(user, &opts, |piece| {
            if write_error.is_none() {
                if let Err(e) = write!(out, "{piece}").and_then(|_| out.flush()) {
                    write_error = Some(e);
                }
            }
        });
        if let Some(e) = write_error {
            return Err(e.into());
        }
        let reply = match reply {
            Ok(reply) => reply,
            // Not a failure of the program: the conversation is over.
            Err(e @ ChatError::ContextFull { .. }) => {
                eprintln!("purebee-rs: {e}");
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        writeln!(out)?;
        out.flush()?;
        let prompt = format!("{} new tokens ({} reused from the cache)", reply.prefilled_tokens(), reply.reused_tokens);
        speed::report(conversation.model().engine().name(), &prompt, reply.prefilled_tokens(), &reply.generation);
        if reply.generation.stop == StopReason::ContextFull {
            eprintln!(
                "purebee-rs: the answer was cut: the conversation has outgrown the context of {n_ctx} tokens (use -c to enlarge it)"
            );
            return Ok(());
        }
    }
    Ok(())
}
