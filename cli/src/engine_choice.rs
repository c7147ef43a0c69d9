//! `--engine ref|cpu|gpu|auto` and `-t/--threads`: which engine runs the model (created by
//! `purebee-loader`, said on stderr); `--f32-activations`: how it feeds block-quantized
//! weights; `-ctk/--cache-type-k`, `-ctv/--cache-type-v`: the KV caches' dtypes.

use std::time::Instant;

use clap::{Args, ValueEnum};
use purebee_loader::{DynEngine, EngineChoice, EngineSpec};
use purebee_memory::gguf::GgufFile;
use purebee_memory::DType;
use purebee_runtime::{KvCacheTypes, Model, QuantizedActivations, Session};

use crate::progress::Spinner;
use crate::CliError;

/// The engines a user can ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EngineFlag {
    /// The scalar reference engine (CPU): the oracle, slow.
    Ref,
    /// The native CPU engine (SIMD kernels, threads).
    Cpu,
    /// The wgpu engine on the best adapter, a CPU one (Mesa's lavapipe) included.
    Gpu,
    /// The wgpu engine on a real GPU when one exists, else the native CPU engine.
    Auto,
}

/// A KV cache's dtype (llama.cpp's `--cache-type-k/-v` values this engine supports).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CacheType {
    /// Half precision: half the memory and the attention's memory traffic (the default, as
    /// llama.cpp's).
    F16,
    /// Single precision, exact copies of the keys and values.
    F32,
}

impl CacheType {
    fn dtype(self) -> DType {
        match self {
            CacheType::F16 => DType::F16,
            CacheType::F32 => DType::F32,
        }
    }
}

/// The engine flags every model-running subcommand takes.
#[derive(Clone, Debug, Args)]
pub struct EngineArgs {
    /// The engine.
    #[arg(long, value_enum, default_value = "auto")]
    pub engine: EngineFlag,
    /// CPU engine threads (default: the physical cores); more than the logical CPUs are
    /// clamped to them.
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Multiply Q4_0/Q4_1/Q8_0 weights by the f32 activations instead of rounding the
    /// activations to int8 blocks of 32 as llama.cpp does (exact, slower on the CPU).
    #[arg(long)]
    pub f32_activations: bool,
    /// Read the model file into memory (2 MiB pages where the kernel allows) instead of
    /// mapping it, as llama.cpp's --no-mmap.
    #[arg(long)]
    pub no_mmap: bool,
    /// The key cache's dtype (`-ctk`, as llama.cpp's): f16 or f32.
    #[arg(long = "cache-type-k", value_enum, default_value = "f16", value_name = "TYPE")]
    pub cache_type_k: CacheType,
    /// The value cache's dtype (`-ctv`, as llama.cpp's): f16 or f32.
    #[arg(long = "cache-type-v", value_enum, default_value = "f16", value_name = "TYPE")]
    pub cache_type_v: CacheType,
    /// Say more on stderr: how long mapping the file and loading the model took.
    #[arg(short = 'v', long)]
    pub verbose: bool,
}

impl EngineArgs {
    /// What these flags ask the loader for.
    pub fn spec(&self) -> EngineSpec {
        EngineSpec {
            choice: match self.engine {
                EngineFlag::Ref => EngineChoice::Ref,
                EngineFlag::Cpu => EngineChoice::Cpu,
                EngineFlag::Gpu => EngineChoice::Gpu,
                EngineFlag::Auto => EngineChoice::Auto,
            },
            threads: self.threads,
            activations: if self.f32_activations { QuantizedActivations::F32 } else { QuantizedActivations::Int8 },
            no_mmap: self.no_mmap,
            kv_cache: KvCacheTypes { k: self.cache_type_k.dtype(), v: self.cache_type_v.dtype() },
        }
    }

    /// The chosen engine with `file`'s model loaded on it.
    pub fn load_model(&self, file: &GgufFile) -> Result<Model<DynEngine>, CliError> {
        let spec = self.spec();
        let engine = create(&spec)?;
        let name = engine.name().to_string();
        let start = Instant::now();
        let spinner = Spinner::start(format!("loading the model on the {name} engine"));
        let model = Model::load_with(engine, file, spec.activations);
        spinner.finish();
        let mut model = model?;
        model.set_kv_cache_types(spec.kv_cache);
        if self.verbose {
            eprintln!("purebee-rs: loaded the model on the {name} engine in {:.2} s", start.elapsed().as_secs_f64());
        }
        Ok(model)
    }

    /// [`EngineArgs::load_model`] with one session of `n_ctx` positions.
    pub fn load_model_and_session(
        &self,
        file: &GgufFile,
        n_ctx: usize,
    ) -> Result<(Model<DynEngine>, Session), CliError> {
        let mut model = self.load_model(file)?;
        let session = model.new_session(n_ctx)?;
        Ok((model, session))
    }
}

/// Creates the engine `spec` asks for, saying on stderr which one runs and anything the
/// user should know.
pub fn create(spec: &EngineSpec) -> Result<DynEngine, CliError> {
    let created = spec.create()?;
    for note in &created.notes {
        eprintln!("purebee-rs: {note}");
    }
    eprintln!("purebee-rs: engine {}", created.description);
    Ok(created.engine)
}
