//! The flags `run` and `chat` share (sampling, token limit, context size, engine), and the
//! sampler and session they ask for.

use clap::Args;
use purebee_loader::SessionContext;
use purebee_runtime::sampler::SamplerConfig;

use crate::engine_choice::EngineArgs;
use crate::spec_args::SpecArgs;
use crate::CliError;

/// Sampling, context and engine flags (names as llama.cpp users know them).
#[derive(Debug, Args)]
pub struct GenerationArgs {
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
    /// Frequency penalty: subtracted per occurrence in the recent tokens (0: off).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub frequency_penalty: f32,
    /// Presence penalty: subtracted once from each recent token (0: off).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub presence_penalty: f32,
    /// How many recent tokens the penalties look at.
    #[arg(long, default_value_t = 64)]
    pub repeat_last_n: usize,
    /// Sampling seed (default: random, printed on stderr).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Context size in tokens (default: the model's, at most 4096).
    #[arg(short = 'c', long = "ctx-size")]
    pub ctx_size: Option<usize>,
    /// The engine and its threads.
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Speculative decoding.
    #[command(flatten)]
    pub spec: SpecArgs,
}

impl GenerationArgs {
    /// The sampler settings, checked (before the model loads, so a bad flag costs no load).
    /// A random seed is said later, by [`Self::say_seed`], once the model has loaded.
    pub fn sampler(&self) -> Result<SamplerConfig, CliError> {
        let seed = self.seed.unwrap_or_else(random_seed);
        let sampler = SamplerConfig {
            temperature: self.temp,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            repeat_last_n: self.repeat_last_n,
            seed,
        };
        sampler.validate()?;
        Ok(sampler)
    }

    /// Says `sampler`'s seed on stderr when it was drawn at random and matters (temperature
    /// above 0), so the run can be repeated. Called once the model has loaded and the
    /// prompt fits: a command that fails before that prints its error alone.
    pub fn say_seed(&self, sampler: &SamplerConfig) {
        if self.seed.is_none() && sampler.temperature > 0.0 {
            eprintln!("purebee-rs: sampling seed {}", sampler.seed);
        }
    }

    /// The most tokens to generate (`-n -1`: no limit but the context).
    pub fn max_new_tokens(&self) -> usize {
        usize::try_from(self.n_predict).unwrap_or(usize::MAX)
    }

    /// The session `-c` asks for (the loader's default without it).
    pub fn context(&self) -> SessionContext {
        SessionContext { n_ctx: self.ctx_size }
    }
}

/// A seed from the clock, for runs that did not ask for one.
fn random_seed() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}
