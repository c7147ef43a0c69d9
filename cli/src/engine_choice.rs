//! `--engine ref|gpu|auto`: which engine runs the model, said on stderr.

use clap::ValueEnum;
use purebee_engine_gpu::{GpuEngine, GpuError, GpuOptions};
use purebee_engine_ref::RefEngine;
use purebee_isa::Engine;

use crate::CliError;

/// The engines a user can ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EngineChoice {
    /// The scalar reference engine (CPU).
    Ref,
    /// The wgpu engine on the best adapter, a CPU one (Mesa's lavapipe) included.
    Gpu,
    /// The wgpu engine on a real GPU when one exists, else the reference engine.
    Auto,
}

/// Creates the chosen engine, saying on stderr which adapter and engine run.
pub fn create(choice: EngineChoice) -> Result<Box<dyn Engine>, CliError> {
    match choice {
        EngineChoice::Ref => {
            eprintln!("purebee-rs: engine ref (CPU)");
            Ok(Box::new(RefEngine::new()))
        }
        EngineChoice::Gpu => {
            let gpu = GpuEngine::new(&GpuOptions::default())?;
            eprintln!("purebee-rs: engine gpu on {}", gpu.context().describe());
            Ok(Box::new(gpu))
        }
        EngineChoice::Auto => match GpuEngine::new(&GpuOptions { allow_cpu_adapter: false, ..GpuOptions::default() }) {
            Ok(gpu) => {
                eprintln!("purebee-rs: engine gpu on {}", gpu.context().describe());
                Ok(Box::new(gpu))
            }
            Err(GpuError::NoAdapter) => {
                eprintln!("purebee-rs: no GPU adapter found; using the reference engine (CPU). --engine gpu also accepts a CPU Vulkan driver such as lavapipe");
                Ok(Box::new(RefEngine::new()))
            }
            Err(e) => Err(e.into()),
        },
    }
}
