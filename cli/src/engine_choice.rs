//! `--engine ref|cpu|gpu|auto` and `-t/--threads`: which engine runs the model (created by
//! `purebee-loader`); `--f32-activations`: how it feeds block-quantized weights;
//! `-ctk/--cache-type-k`, `-ctv/--cache-type-v`: the KV caches' dtypes.

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, ValueEnum};
use purebee_loader::{EngineChoice, EngineSpec};
use purebee_memory::DType;
use purebee_runtime::{KvCacheTypes, QuantizedActivations};

/// `--engine`'s values: the loader's choices, each with its line of help.
fn engine_choice() -> impl TypedValueParser<Value = EngineChoice> {
    PossibleValuesParser::new(EngineChoice::ALL.map(|c| PossibleValue::new(c.name()).help(c.about())))
        // The parser admits only the names above.
        .map(|name| EngineChoice::from_name(&name).unwrap_or_default())
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
    #[arg(long, default_value = "auto", value_parser = engine_choice())]
    pub engine: EngineChoice,
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
            choice: self.engine,
            threads: self.threads,
            activations: if self.f32_activations { QuantizedActivations::F32 } else { QuantizedActivations::Int8 },
            no_mmap: self.no_mmap,
            kv_cache: KvCacheTypes { k: self.cache_type_k.dtype(), v: self.cache_type_v.dtype() },
        }
    }
}
