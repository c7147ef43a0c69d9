//! `--engine ref|cpu|gpu|auto` and `-t/--threads`: which engine runs the model, said on
//! stderr; `--f32-activations`: how it feeds block-quantized weights.

use clap::{Args, ValueEnum};
use purebee_engine_cpu::{CpuEngine, CpuOptions, SimdLevel};
use purebee_engine_gpu::{GpuEngine, GpuError, GpuOptions};
use purebee_engine_ref::RefEngine;
use purebee_isa::Engine;
use purebee_memory::gguf::GgufFile;
use purebee_runtime::{Model, ModelError, QuantizedActivations};

use std::time::Instant;

use crate::progress::Spinner;
use crate::CliError;

/// The engines a user can ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EngineChoice {
    /// The scalar reference engine (CPU): the oracle, slow.
    Ref,
    /// The native CPU engine (SIMD kernels, threads).
    Cpu,
    /// The wgpu engine on the best adapter, a CPU one (Mesa's lavapipe) included.
    Gpu,
    /// The wgpu engine on a real GPU when one exists, else the native CPU engine.
    Auto,
}

/// The engine flags every model-running subcommand takes.
#[derive(Clone, Debug, Args)]
pub struct EngineArgs {
    /// The engine.
    #[arg(long, value_enum, default_value = "auto")]
    pub engine: EngineChoice,
    /// CPU engine threads (default: the physical cores); more than the logical CPUs are
    /// clamped to them.
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Multiply Q4_0/Q4_1/Q8_0 weights by the f32 activations instead of rounding the
    /// activations to int8 blocks of 32 as llama.cpp does (exact, slower on the CPU).
    #[arg(long)]
    pub f32_activations: bool,
    /// Say more on stderr: how long mapping the file and loading the model took.
    #[arg(short = 'v', long)]
    pub verbose: bool,
}

impl EngineArgs {
    /// The activation rounding these flags ask for.
    pub fn activations(&self) -> QuantizedActivations {
        if self.f32_activations {
            QuantizedActivations::F32
        } else {
            QuantizedActivations::Int8
        }
    }

    /// The chosen engine with `file`'s model loaded on it, with a KV cache of `n_ctx`.
    pub fn load_model(&self, file: &GgufFile, n_ctx: usize) -> Result<Model<Box<dyn Engine>>, CliError> {
        let engine = create(self)?;
        let name = engine.name().to_string();
        let start = Instant::now();
        let spinner = Spinner::start(format!("loading the model on the {name} engine"));
        let model = Model::load_with(engine, file, n_ctx, self.activations());
        spinner.finish();
        let model = model.map_err(|e: ModelError| -> CliError { e.into() })?;
        if self.verbose {
            eprintln!("purebee-rs: loaded the model on the {name} engine in {:.2} s", start.elapsed().as_secs_f64());
        }
        Ok(model)
    }
}

/// Creates the chosen engine, saying on stderr which adapter and engine run.
pub fn create(args: &EngineArgs) -> Result<Box<dyn Engine>, CliError> {
    match args.engine {
        EngineChoice::Ref => {
            eprintln!("purebee-rs: engine ref (CPU)");
            Ok(Box::new(RefEngine::new()))
        }
        EngineChoice::Cpu => cpu(args),
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
                eprintln!("purebee-rs: no GPU adapter found; using the CPU engine");
                cpu(args)
            }
            Err(e) => Err(e.into()),
        },
    }
}

/// The CPU engine with `--threads` checked: 0 is an error, more than the logical CPUs is
/// clamped with a message. `PUREBEE_CPU_SIMD=portable|avx2|avx512-vnni|neon|neon-dot` forces a SIMD path.
fn cpu(args: &EngineArgs) -> Result<Box<dyn Engine>, CliError> {
    let available = purebee_engine_cpu::logical_cpus();
    let threads = match args.threads {
        Some(0) => return Err("--threads 0: the CPU engine needs at least one thread".into()),
        Some(t) if t > available => {
            eprintln!("purebee-rs: --threads {t} is more than the {available} logical CPUs; using {available}");
            Some(available)
        }
        t => t,
    };
    let simd = match std::env::var("PUREBEE_CPU_SIMD") {
        Ok(name) => Some(SimdLevel::from_name(&name).ok_or_else(|| {
            format!("PUREBEE_CPU_SIMD={name}: expected one of {}", SimdLevel::ALL.map(|l| l.name()).join(", "))
        })?),
        Err(_) => None,
    };
    let cpu = CpuEngine::new(&CpuOptions { threads, simd })?;
    if cpu.simd() == SimdLevel::Portable && simd.is_none() {
        eprintln!("purebee-rs: this CPU lacks AVX2/FMA/F16C; the CPU engine uses its portable kernels (slower)");
    }
    eprintln!("purebee-rs: engine cpu ({} kernels, {} threads)", cpu.simd(), cpu.threads());
    Ok(Box::new(cpu))
}
