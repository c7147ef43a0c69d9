//! `purebee-rs run`: generate text from a prompt, streamed to stdout.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use purebee_memory::gguf::GgufFile;
use purebee_runtime::sampler::SamplerConfig;
use purebee_runtime::tokenizer::{StreamDecoder, Tokenizer};
use purebee_runtime::{generate, GenerateOptions, Model, StopReason};

use crate::engine_choice::{self, EngineChoice};
use crate::CliError;

/// What `run` prints on stdout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// The prompt and the generated text, streamed.
    Text,
    /// One JSON object at the end.
    Json,
}

/// Arguments of `run` (flag names as llama.cpp users know them).
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("input").required(true).args(["prompt", "tokens"]))]
pub struct RunArgs {
    /// The GGUF model.
    pub model: PathBuf,
    /// The prompt text.
    #[arg(short = 'p', long)]
    pub prompt: Option<String>,
    /// The prompt as token ids, comma separated.
    #[arg(long, value_delimiter = ',')]
    pub tokens: Option<Vec<u32>>,
    /// Tokens to generate (-1: until end of generation or a full context).
    #[arg(short = 'n', long = "n-predict", default_value_t = -1, allow_negative_numbers = true)]
    pub n_predict: i64,
    /// Temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.8, allow_negative_numbers = true)]
    pub temp: f32,
    /// Top-k sampling (>= 1 when sampling).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Top-p (nucleus) sampling, in (0, 1].
    #[arg(long, default_value_t = 0.95, allow_negative_numbers = true)]
    pub top_p: f32,
    /// Min-p sampling, in [0, 1].
    #[arg(long, default_value_t = 0.05, allow_negative_numbers = true)]
    pub min_p: f32,
    /// Repeat penalty (1: off).
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub repeat_penalty: f32,
    /// How many recent tokens the repeat penalty looks at.
    #[arg(long, default_value_t = 64)]
    pub repeat_last_n: usize,
    /// Sampling seed (default: random, printed on stderr).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Keep generating past end-of-generation tokens.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Context size in tokens (default: the model's, at most 4096).
    #[arg(short = 'c', long = "ctx-size")]
    pub ctx_size: Option<usize>,
    /// The engine.
    #[arg(long, value_enum, default_value = "auto")]
    pub engine: EngineChoice,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub output: Output,
}

/// Runs `run`.
pub fn run(args: &RunArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let file = GgufFile::open(&args.model)?;
    let tokenizer = Tokenizer::from_gguf(&file)?;
    let prompt_ids = match (&args.prompt, &args.tokens) {
        (Some(text), _) => tokenizer.encode(text, true, true),
        (None, Some(ids)) => ids.clone(),
        (None, None) => return Err("give a prompt with -p TEXT or --tokens 1,2,3".into()),
    };
    let seed = args.seed.unwrap_or_else(random_seed);
    let sampler = SamplerConfig {
        temperature: args.temp,
        top_k: args.top_k,
        top_p: args.top_p,
        min_p: args.min_p,
        repeat_penalty: args.repeat_penalty,
        repeat_last_n: args.repeat_last_n,
        seed,
    };
    sampler.validate()?;
    if args.seed.is_none() && args.temp > 0.0 {
        eprintln!("purebee-rs: sampling seed {seed}");
    }
    let engine = engine_choice::create(args.engine)?;
    let n_ctx = match args.ctx_size {
        Some(c) => c,
        None => purebee_runtime::ModelConfig::from_gguf(&file)?.n_ctx_train.min(4096),
    };
    let mut model = Model::load(engine, &file, n_ctx)?;
    if let Some(&bad) = prompt_ids.iter().find(|&&t| t as usize >= model.config().n_vocab) {
        return Err(format!("--tokens: id {bad} is outside the vocabulary of {} tokens", model.config().n_vocab).into());
    }
    if prompt_ids.len() > model.n_ctx() {
        let c = model.config();
        return Err(purebee_runtime::ModelError::ContextFull {
            tokens: prompt_ids.len(),
            pos: 0,
            n_ctx: model.n_ctx(),
            n_ctx_train: c.n_ctx_train,
        }
        .into());
    }
    let max_new_tokens = if args.n_predict < 0 { usize::MAX } else { args.n_predict as usize };
    let opts = GenerateOptions { max_new_tokens, ignore_eos: args.ignore_eos, sampler };

    // Control tokens (an end-of-turn marker) are not text: they are not printed.
    let mut decoder = StreamDecoder::new(&tokenizer).skip_control(true);
    let mut text = String::new();
    let mut write_error = None;
    if args.output == Output::Text {
        if let Some(p) = &args.prompt {
            write!(out, "{p}")?;
            out.flush()?;
        }
    }
    let streaming = args.output == Output::Text;
    let g = generate(
        &mut model,
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
    let prompt_tps = g.prompt_tokens_per_s(prompt_ids.len());
    let decode_tps = g.decode_tokens_per_s();
    match args.output {
        Output::Text => writeln!(out, "{rest}")?,
        Output::Json => {
            let j = serde_json::json!({
                "prompt_ids": prompt_ids,
                "generated_ids": g.generated,
                "text": text,
                "prompt_tokens_per_s": prompt_tps,
                "decode_tokens_per_s": decode_tps,
            });
            writeln!(out, "{j}")?;
        }
    }
    if g.stop == StopReason::ContextFull {
        eprintln!("purebee-rs: stopped: the context of {} tokens is full (-c to enlarge it)", model.n_ctx());
    }
    let ms_per_token = if decode_tps > 0.0 { 1000.0 / decode_tps } else { 0.0 };
    eprintln!(
        "purebee-rs: engine {}: prompt {} tokens, {prompt_tps:.1} tokens/s; generated {} tokens, {decode_tps:.1} tokens/s ({ms_per_token:.2} ms/token)",
        model.engine().name(),
        prompt_ids.len(),
        g.generated.len(),
    );
    Ok(())
}

/// A seed from the clock, for runs that did not ask for one.
fn random_seed() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}
