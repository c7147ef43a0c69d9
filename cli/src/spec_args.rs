//! The speculative-decoding flags `run`, `chat`, `serve` and `bench` share, with
//! llama-server's names, and the settings they ask for.

use clap::{Args, ValueEnum};
use purebee_runtime::speculative::SpecConfig;

use crate::CliError;

/// How to draft tokens for speculative decoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SpecType {
    /// Plain decoding.
    None,
    /// The tokens that followed the last earlier occurrence of the latest n-gram of the
    /// prompt and output: no second model; pays where the output copies its input.
    #[value(name = "ngram-simple")]
    NgramSimple,
}

/// Speculative-decoding flags.
#[derive(Clone, Debug, Args)]
pub struct SpecArgs {
    /// Speculative decoding: `ngram-simple` drafts by looking up the latest tokens in the
    /// prompt and the output, and the model checks each draft in one pass (greedy output is
    /// unchanged; sampled output keeps its distribution).
    #[arg(long, value_enum, default_value = "none")]
    pub spec_type: SpecType,
    /// The most drafted tokens one pass checks.
    #[arg(long, default_value_t = 16)]
    pub spec_draft_n_max: usize,
    /// The fewest drafted tokens worth a pass; shorter drafts are dropped (0: any).
    #[arg(long, default_value_t = 0)]
    pub spec_draft_n_min: usize,
    /// ngram-simple: the length of the lookup key, in tokens.
    #[arg(long, default_value_t = 3)]
    pub spec_ngram_simple_size_n: usize,
    /// ngram-simple: the most tokens one lookup drafts.
    #[arg(long, default_value_t = 48)]
    pub spec_ngram_simple_size_m: usize,
}

/// What one more row of a pass costs on a CPU, in decode steps: a pass reads the weights
/// once for all its rows, and each row adds its arithmetic. Measured with `bench
/// --spec-rows` on 2 cores (docs/speculative.md); the pacer drafts only where the expected
/// accepted tokens beat this cost.
const ROW_COST: f64 = 0.3;

impl SpecArgs {
    /// The settings, checked; `None` for `--spec-type none`.
    pub fn config(&self) -> Result<Option<SpecConfig>, CliError> {
        if self.spec_type == SpecType::None {
            return Ok(None);
        }
        if self.spec_draft_n_max == 0 {
            return Err("--spec-draft-n-max 0: a draft needs at least one token (use --spec-type none)".into());
        }
        if self.spec_draft_n_min > self.spec_draft_n_max {
            return Err(format!(
                "--spec-draft-n-min {} is above --spec-draft-n-max {}",
                self.spec_draft_n_min, self.spec_draft_n_max
            )
            .into());
        }
        if self.spec_ngram_simple_size_n == 0 {
            return Err("--spec-ngram-simple-size-n 0: the lookup key needs at least one token".into());
        }
        if self.spec_ngram_simple_size_m == 0 {
            return Err("--spec-ngram-simple-size-m 0: a lookup must draft at least one token".into());
        }
        Ok(Some(SpecConfig {
            draft_min: self.spec_draft_n_min,
            draft_max: self.spec_draft_n_max,
            ngram_size_n: self.spec_ngram_simple_size_n,
            ngram_size_m: self.spec_ngram_simple_size_m,
            row_cost: ROW_COST,
        }))
    }
}
