//! `purebee-rs`: the purebee-rs command line.
//!
//! One subcommand per file: `inspect` prints what a GGUF file holds, `run` generates text,
//! `chat` holds a conversation in the model's chat template, `logits` writes the logits of
//! a token sequence as `.npy`, `tokenize` prints token ids, `synth` writes a synthetic
//! model, `bench` measures prefill and decode speed, `quantize` rewrites the token
//! embedding; `serve` answers OpenAI-compatible HTTP requests; `pull` fetches a model into the store (`purebee-hub`), `list`, `show` and `rm`
//! look after what was pulled, and `run`, `chat` and `bench` take a pulled name or an
//! `hf://` source as well as a path.
//! Errors go to stderr as `error: <message>` with a non-zero exit status; the library
//! errors already name the file, key or tensor concerned.

#![forbid(unsafe_code)]

use std::io::{self, IsTerminal, Write};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod bench_batched;
mod bench_spec;
mod chat;
mod convert;
mod engine_choice;
mod generation_args;
mod inspect;
mod loading;
mod logits;
mod models;
mod npy;
mod progress;
mod pull;
mod quantize;
mod repl;
mod run;
mod serve;
mod spec_args;
mod speed;
mod synth;
mod tokenize;

/// purebee-rs: an inference engine for BitNet / ternary LLMs.
#[derive(Debug, Parser)]
#[command(name = "purebee-rs", version)]
struct Cli {
    /// What to do.
    #[command(subcommand)]
    command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Print a GGUF file's header, metadata, tensor table and totals.
    Inspect(inspect::InspectArgs),
    /// Generate text from a prompt, streamed to stdout.
    Run(run::RunArgs),
    /// Chat with a model in its chat template: user turns from stdin, answers streamed.
    Chat(chat::ChatArgs),
    /// Write the logits of every position of a token sequence as float32 .npy.
    Logits(logits::LogitsArgs),
    /// Print the token ids of a text.
    Tokenize(tokenize::TokenizeArgs),
    /// Write a synthetic BitNet b1.58 model (random ternary weights) of a real shape.
    Synth(synth::SynthArgs),
    /// Measure prefill and decode tokens/s of a model on an engine.
    Bench(bench::BenchArgs),
    /// Rewrite a GGUF file with its token embedding stored as Q8_0, every other tensor as is.
    Quantize(quantize::QuantizeArgs),
    /// Convert a Hugging Face checkpoint folder (safetensors, config.json, tokenizer.json) of
    /// a BitNet b1.58 or Llama model to GGUF, ternary weights as I2_S, TQ2_0 or TQ1_0.
    Convert(convert::ConvertArgs),
    /// Serve a model over HTTP with OpenAI's API (chat and text completions, streaming),
    /// several requests at once.
    Serve(serve::ServeArgs),
    /// Fetch a model (hf://OWNER/REPO/FILE.gguf[@REV] or an http(s) URL) into the store:
    /// resumable, sha256-checked; prints its path.
    Pull(pull::PullArgs),
    /// List the pulled models: name, size, architecture, weight types, path.
    List(models::ListArgs),
    /// Show a pulled model: architecture, parameters, context, tensor types, chat template.
    Show(models::ShowArgs),
    /// Remove a pulled model from the store.
    Rm(models::RmArgs),
}

/// An error of any subcommand, printed as `error: <message>`.
type CliError = Box<dyn std::error::Error>;

fn run(cli: Cli) -> Result<(), CliError> {
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    match cli.command {
        Command::Inspect(args) => inspect::run(&args, &mut out)?,
        Command::Run(args) => run::run(&args, &mut out)?,
        Command::Chat(args) => {
            let stdin = io::stdin();
            let interactive = stdin.is_terminal();
            chat::run(&args, &mut stdin.lock(), interactive, &mut out)?
        }
        Command::Logits(args) => logits::run(&args)?,
        Command::Tokenize(args) => tokenize::run(&args, &mut out)?,
        Command::Synth(args) => synth::run(&args, &mut out)?,
        Command::Bench(args) => bench::run(&args, &mut out)?,
        Command::Quantize(args) => quantize::run(&args, &mut out)?,
        Command::Convert(args) => convert::run(&args, &mut out)?,
        Command::Serve(args) => serve::run(&args)?,
        Command::Pull(args) => pull::run(&args, &mut out)?,
        Command::List(args) => models::list(&args, &mut out)?,
        Command::Show(args) => models::show(&args, &mut out)?,
        Command::Rm(args) => models::rm(&args, &mut out)?,
    }
    out.flush()?;
    Ok(())
}

/// llama.cpp's multi-letter short flags (`-np 4`, `-ub 256`, `-npl 1,2,4`, `-ctk f32`,
/// `-md FILE`),
/// which clap cannot declare, read as their long names after the subcommands that take
/// them.
fn llama_cpp_flags(args: impl Iterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut args: Vec<_> = args.collect();
    const CACHE_TYPES: [(&str, &str); 2] = [("-ctk", "--cache-type-k"), ("-ctv", "--cache-type-v")];
    const DRAFT: (&str, &str) = ("-md", "--model-draft");
    let long: &[(&str, &str)] = match args.get(1).and_then(|a| a.to_str()) {
        Some("serve") => &[("-np", "--parallel"), ("-ub", "--ubatch-size"), CACHE_TYPES[0], CACHE_TYPES[1], DRAFT],
        Some("bench") => &[("-npl", "--npl"), ("-ub", "--ubatch-size"), CACHE_TYPES[0], CACHE_TYPES[1], DRAFT],
        Some("run" | "chat") => &[CACHE_TYPES[0], CACHE_TYPES[1], DRAFT],
        Some("logits") => &CACHE_TYPES,
        _ => &[],
    };
    for a in args.iter_mut().skip(2) {
        if let Some((_, to)) = long.iter().find(|(from, _)| a == *from) {
            *a = (*to).into();
        }
    }
    args
}

fn main() -> ExitCode {
    // Before any thread: adapter probing must not open display connections (see there).
    purebee_loader::quiet_display_probing();
    match run(Cli::parse_from(llama_cpp_flags(std::env::args_os()))) {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`purebee-rs inspect m.gguf | head`) is not an error of ours.
        Err(e) if e.downcast_ref::<io::Error>().is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe) => {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
