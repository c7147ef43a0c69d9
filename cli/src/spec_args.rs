//! The speculative-decoding flags `run`, `chat`, `serve` and `bench` share, with
//! llama-server's names, and the settings they ask for.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use clap::{Args, ValueEnum};
use purebee_loader::SessionContext;
use purebee_runtime::speculative::{DraftModel, DraftSource, SpecConfig};
use purebee_runtime::tokenizer::Tokenizer;

use crate::engine_choice::EngineArgs;
use crate::{loading, models, CliError};

/// How to draft tokens for speculative decoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SpecType {
    /// Plain decoding.
    None,
    /// The tokens that followed the last earlier occurrence of the latest n-gram of the
    /// prompt and output: no second model; pays where the output copies its input.
    #[value(name = "ngram-simple")]
    NgramSimple,
    /// A smaller draft model with the same vocabulary (-md) decodes ahead greedily.
    #[value(name = "draft-simple")]
    DraftSimple,
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
    /// draft-simple: the draft model (a path or a pulled name; `-md` also works); it must
    /// have the model's vocabulary.
    #[arg(long = "model-draft", alias = "spec-draft-model")]
    pub model_draft: Option<PathBuf>,
    /// draft-simple: stop drafting when the draft model's top probability is below this.
    #[arg(long, default_value_t = 0.0)]
    pub spec_draft_p_min: f32,
}

/// What one more row of a pass costs on a CPU, in decode steps: a pass reads the weights
/// once for all its rows, and each row adds its arithmetic. `bench --verify-rows` on 2
/// cores gives 0.27 to 0.29 for the 2B shape and SmolLM2 (docs/speculative.md); the pacer
/// drafts only where the expected accepted tokens beat this cost.
const ROW_COST: f64 = 0.3;

impl SpecArgs {
    /// Checks the flags against each other (before any model loads).
    pub fn validate(&self) -> Result<(), CliError> {
        if self.spec_type == SpecType::None {
            if let Some(draft) = &self.model_draft {
                return Err(format!("-md {}: a draft model needs --spec-type draft-simple", draft.display()).into());
            }
            return Ok(());
        }
        if self.spec_draft_n_max == 0 {
            return Err("--spec-draft-n-max 0: a draft needs at least one token (use --spec-type none)".into());
        }
        if self.spec_draft_n_max > MAX_DRAFT {
            return Err(format!(
                "--spec-draft-n-max {}: at most {MAX_DRAFT} (a verify pass of more rows loses the bits of decode steps)",
                self.spec_draft_n_max
            )
            .into());
        }
        if self.spec_draft_n_min > self.spec_draft_n_max {
            return Err(format!(
                "--spec-draft-n-min {} is above --spec-draft-n-max {}",
                self.spec_draft_n_min, self.spec_draft_n_max
            )
            .into());
        }
        match self.spec_type {
            SpecType::NgramSimple if self.spec_ngram_simple_size_n == 0 => {
                Err("--spec-ngram-simple-size-n 0: the lookup key needs at least one token".into())
            }
            SpecType::NgramSimple if self.spec_ngram_simple_size_m == 0 => {
                Err("--spec-ngram-simple-size-m 0: a lookup must draft at least one token".into())
            }
            SpecType::DraftSimple if self.model_draft.is_none() => {
                Err("--spec-type draft-simple needs a draft model (-md FILE)".into())
            }
            _ if !(0.0..=1.0).contains(&self.spec_draft_p_min) => {
                Err(format!("--spec-draft-p-min {}: must be in [0, 1]", self.spec_draft_p_min).into())
            }
            _ => Ok(()),
        }
    }

    /// The settings, `None` for `--spec-type none`. A draft model is opened and loaded on
    /// the engine `engine` chooses, with a context of `n_ctx` positions (`None`: its
    /// default), after checking that its vocabulary is that of `target` (its `tokenizer`,
    /// read from the file when `None`).
    pub fn config(
        &self,
        target: &Path,
        tokenizer: Option<&Tokenizer>,
        engine: &EngineArgs,
        n_ctx: Option<usize>,
    ) -> Result<Option<SpecConfig>, CliError> {
        self.validate()?;
        let source = match (self.spec_type, &self.model_draft) {
            (SpecType::None, _) => return Ok(None),
            (SpecType::NgramSimple, _) => {
                DraftSource::Ngram { size_n: self.spec_ngram_simple_size_n, size_m: self.spec_ngram_simple_size_m }
            }
            (SpecType::DraftSimple, None) => return Err("--spec-type draft-simple needs -md FILE".into()),
            (SpecType::DraftSimple, Some(draft)) => {
                let path = models::resolve(draft)?;
                let mut file = loading::open(&path, engine)?;
                let mut target_file;
                let tokenizer = match tokenizer {
                    Some(t) => t,
                    None => {
                        target_file = loading::open(target, engine)?;
                        &target_file.text()?.tokenizer
                    }
                };
                same_vocabulary(target, tokenizer, &path, &file.text()?.tokenizer)?;
                let loaded = loading::load(file, engine, SessionContext { n_ctx })?;
                let drafter = DraftModel::new(loaded.model, loaded.cache, self.spec_draft_p_min);
                DraftSource::Model(Arc::new(Mutex::new(drafter)))
            }
        };
        Ok(Some(SpecConfig {
            draft_min: self.spec_draft_n_min,
            draft_max: self.spec_draft_n_max,
            source,
            row_cost: ROW_COST,
        }))
    }
}

/// The most drafted tokens one verify pass checks: with the token before them, the most
/// rows whose ATTENTION the CPU engine computes as decode steps do.
const MAX_DRAFT: usize = 31;

/// Checks that `draft`'s tokenizer has `target`'s tokens (count, bytes and kinds, id for
/// id): drafted ids must mean the same text to the model that checks them.
fn same_vocabulary(target: &Path, ours: &Tokenizer, draft: &Path, theirs: &Tokenizer) -> Result<(), CliError> {
    let both = format!("-md {}: its vocabulary is not that of {}", draft.display(), target.display());
    if ours.token_count() != theirs.token_count() {
        return Err(format!("{both} ({} tokens against {})", theirs.token_count(), ours.token_count()).into());
    }
    let differs = (0..ours.token_count() as u32)
        .find(|&t| ours.decode_token(t) != theirs.decode_token(t) || ours.is_control(t) != theirs.is_control(t));
    match differs {
        Some(t) => Err(format!(
            "{both} (token {t} is {:?} there, {:?} here)",
            String::from_utf8_lossy(theirs.decode_token(t)),
            String::from_utf8_lossy(ours.decode_token(t))
        )
        .into()),
        None => Ok(()),
    }
}
