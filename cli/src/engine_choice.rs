//! `--engine ref|gpu|auto`: which engine runs the model.

use clap::ValueEnum;
use purebee_engine_ref::RefEngine;
use purebee_isa::Engine;

use crate::CliError;

/// The engines a user can ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EngineChoice {
    /// The scalar reference engine (CPU).
    Ref,
    /// The wgpu engine.
    Gpu,
    /// A GPU engine when one is available, else the reference engine.
    Auto,
}

/// Creates the chosen engine, saying on stderr which one runs.
pub fn create(choice: EngineChoice) -> Result<Box<dyn Engine>, CliError> {
    match choice {
        EngineChoice::Ref => Ok(Box::new(RefEngine::new())),
        EngineChoice::Gpu => Err("the gpu engine is not part of this build yet; use --engine ref".into()),
        EngineChoice::Auto => {
            eprintln!("purebee-rs: no GPU engine in this build; using the reference engine (CPU)");
            Ok(Box::new(RefEngine::new()))
        }
    }
}
