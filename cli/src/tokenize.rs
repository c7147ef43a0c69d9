//! `purebee-rs tokenize`: the token ids of a text.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use purebee_memory::gguf::GgufFile;
use purebee_runtime::tokenizer::Tokenizer;

use crate::CliError;

/// Arguments of `tokenize`.
#[derive(Debug, Args)]
pub struct TokenizeArgs {
    /// The GGUF model whose tokenizer to use.
    pub model: PathBuf,
    /// The text.
    #[arg(short = 'p', long)]
    pub prompt: String,
    /// Do not add BOS even when the model asks for it.
    #[arg(long)]
    pub no_bos: bool,
    /// Do not parse special-token text such as `<|im_start|>`.
    #[arg(long)]
    pub no_parse_special: bool,
}

/// Runs `tokenize`: prints the ids, comma separated (the form `--tokens` takes).
pub fn run(args: &TokenizeArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let file = GgufFile::open(&args.model)?;
    let tokenizer = Tokenizer::from_gguf(&file)?;
    let ids = tokenizer.encode(&args.prompt, !args.no_bos, !args.no_parse_special);
    let list: Vec<String> = ids.iter().map(u32::to_string).collect();
    writeln!(out, "{}", list.join(","))?;
    Ok(())
}
