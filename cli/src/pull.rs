//! `purebee-rs pull SOURCE [--sha256 HEX]`: fetches `hf://OWNER/REPO/FILE.gguf[@REVISION]`
//! or an http(s) URL into the store (`$PUREBEE_CACHE`, default `~/.cache/purebee`, laid
//! out as the Hugging Face hub cache), resumable and sha256-checked (see `purebee-hub`).
//! The stored file's path goes to stdout, progress and a summary to stderr.

use std::io::Write;
use std::time::Duration;

use clap::Args;
use purebee_hub::{PullOptions, Pulled, Sha256Digest, Source, Store};

use crate::progress::PullProgress;
use crate::CliError;

/// Arguments of `pull`.
#[derive(Debug, Args)]
pub struct PullArgs {
    /// hf://OWNER/REPO/FILE.gguf[@REVISION] (against HF_ENDPOINT, default
    /// https://huggingface.co) or an http(s):// URL.
    pub source: String,
    /// The sha256 the file must have (64 hex digits); hf:// files are checked against the
    /// hub's digest anyway.
    #[arg(long)]
    pub sha256: Option<String>,
    /// Retries after a lost connection, a stall or a server error.
    #[arg(long, default_value_t = 5)]
    pub retries: u32,
    /// Seconds without data before a download is retried.
    #[arg(long, default_value_t = 60.0)]
    pub stall_timeout: f64,
}

/// Runs `pull`.
pub fn run(args: &PullArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let sha256 = args.sha256.as_deref().map(Sha256Digest::parse).transpose()?;
    if !(args.stall_timeout.is_finite() && args.stall_timeout > 0.0) {
        return Err(format!("--stall-timeout {}: expected a positive number of seconds", args.stall_timeout).into());
    }
    let source = Source::parse(&args.source)?;
    let store = Store::from_env()?;
    let opts = PullOptions {
        sha256,
        retries: args.retries,
        stall_timeout: Duration::from_secs_f64(args.stall_timeout),
        ..PullOptions::from_env()
    };
    let pulled = pull_with_progress(&store, &source, &opts)?;
    writeln!(out, "{}", pulled.path.display())?;
    Ok(())
}

/// Pulls `source`, showing its progress and a summary on stderr.
pub fn pull_with_progress(store: &Store, source: &Source, opts: &PullOptions) -> Result<Pulled, CliError> {
    let name = source.name();
    let mut progress = PullProgress::new(&name);
    let result = purebee_hub::pull(store, source, opts, &mut |e| progress.event(e));
    progress.finish();
    let pulled = result?;
    if pulled.downloaded > 0 {
        let check = if pulled.verified { "verified" } else { "not checked: no --sha256 given" };
        eprintln!(
            "purebee-rs: pulled {} ({}, sha256 {} {check})",
            pulled.name,
            indicatif::HumanBytes(pulled.size),
            pulled.sha256
        );
    }
    Ok(pulled)
}
