//! Which engine runs a model: the user's choice, checked, and the engine created.

use purebee_engine_cpu::{CpuEngine, CpuOptions, SimdLevel};
use purebee_engine_gpu::{GpuEngine, GpuError, GpuOptions};
use purebee_engine_ref::RefEngine;
use purebee_isa::Engine;
use purebee_runtime::{KvCacheTypes, QuantizedActivations};

use crate::LoadError;

/// An engine of any kind that can move to another thread.
pub type DynEngine = Box<dyn Engine + Send>;

/// The engines a user can ask for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EngineChoice {
    /// The scalar reference engine (CPU): the oracle, slow.
    Ref,
    /// The native CPU engine (SIMD kernels, threads).
    Cpu,
    /// The wgpu engine on the best adapter, a CPU one (Mesa's lavapipe) included.
    Gpu,
    /// The wgpu engine on a real GPU when one exists, else the native CPU engine.
    #[default]
    Auto,
}

impl EngineChoice {
    /// Every choice, in the order a user is shown them.
    pub const ALL: [EngineChoice; 4] = [EngineChoice::Ref, EngineChoice::Cpu, EngineChoice::Gpu, EngineChoice::Auto];

    /// Its name on a command line or in a setting (`ref`, `cpu`, `gpu`, `auto`).
    pub fn name(self) -> &'static str {
        match self {
            EngineChoice::Ref => "ref",
            EngineChoice::Cpu => "cpu",
            EngineChoice::Gpu => "gpu",
            EngineChoice::Auto => "auto",
        }
    }

    /// The choice called `name`, if any.
    pub fn from_name(name: &str) -> Option<EngineChoice> {
        EngineChoice::ALL.into_iter().find(|c| c.name() == name)
    }

    /// What it runs on, in one line for a user.
    pub fn about(self) -> &'static str {
        match self {
            EngineChoice::Ref => "The scalar reference engine (CPU): the oracle, slow",
            EngineChoice::Cpu => "The native CPU engine (SIMD kernels, threads)",
            EngineChoice::Gpu => "The wgpu engine on the best adapter, a CPU one (Mesa's lavapipe) included",
            EngineChoice::Auto => "The wgpu engine on a real GPU when one exists, else the native CPU engine",
        }
    }
}

/// An engine choice with its settings.
#[derive(Clone, Debug, Default)]
pub struct EngineSpec {
    /// Which engine.
    pub choice: EngineChoice,
    /// CPU engine threads (`None`: the physical cores); more than the logical CPUs are
    /// clamped to them, with a note.
    pub threads: Option<usize>,
    /// How the model feeds block-quantized weights.
    pub activations: QuantizedActivations,
    /// Read the model file into memory instead of mapping it ([`GgufFile::read`]).
    ///
    /// [`GgufFile::read`]: purebee_memory::gguf::GgufFile::read
    pub no_mmap: bool,
    /// The dtypes of the KV caches (`-ctk`, `-ctv`: F16 both by default, as llama.cpp's).
    pub kv_cache: KvCacheTypes,
}

/// An engine as created, with what its creator should tell the user.
pub struct CreatedEngine {
    /// The engine.
    pub engine: DynEngine,
    /// Which engine runs, on what (`"cpu (avx2 kernels, 2 threads)"`, `"gpu on ..."`).
    pub description: String,
    /// Things the user should know (a clamped thread count, a fallback).
    pub notes: Vec<String>,
}

impl EngineSpec {
    /// Creates the chosen engine. `PUREBEE_CPU_SIMD=portable|avx2|avx512-vnni|neon|neon-dot`
    /// forces the CPU engine's SIMD path.
    pub fn create(&self) -> Result<CreatedEngine, LoadError> {
        match self.choice {
            EngineChoice::Ref => Ok(CreatedEngine {
                engine: Box::new(RefEngine::new()),
                description: "ref (CPU)".to_string(),
                notes: Vec::new(),
            }),
            EngineChoice::Cpu => self.cpu(Vec::new()),
            EngineChoice::Gpu => gpu(GpuEngine::new(&GpuOptions::default())?),
            EngineChoice::Auto => {
                match GpuEngine::new(&GpuOptions { allow_cpu_adapter: false, ..GpuOptions::default() }) {
                    Ok(g) => gpu(g),
                    Err(GpuError::NoAdapter) => {
                        self.cpu(vec!["no GPU adapter found; using the CPU engine".to_string()])
                    }
                    Err(e) => Err(e.into()),
                }
            }
        }
    }

    /// The CPU engine with `threads` checked: 0 is an error, more than the logical CPUs is
    /// clamped with a note.
    fn cpu(&self, mut notes: Vec<String>) -> Result<CreatedEngine, LoadError> {
        let available = purebee_engine_cpu::logical_cpus();
        let threads = match self.threads {
            Some(0) => return Err(LoadError::ZeroThreads),
            Some(t) if t > available => {
                notes.push(format!("--threads {t} is more than the {available} logical CPUs; using {available}"));
                Some(available)
            }
            t => t,
        };
        let simd = match std::env::var("PUREBEE_CPU_SIMD") {
            Ok(value) => Some(SimdLevel::from_name(&value).ok_or_else(|| LoadError::SimdVariable {
                value,
                expected: SimdLevel::ALL.map(|l| l.name()).join(", "),
            })?),
            Err(_) => None,
        };
        let cpu = CpuEngine::new(&CpuOptions { threads, simd })?;
        if cpu.simd() == SimdLevel::Portable && simd.is_none() {
            notes.push("this CPU lacks AVX2/FMA/F16C; the CPU engine uses its portable kernels (slower)".to_string());
        }
        let description = format!("cpu ({} kernels, {} threads)", cpu.simd(), cpu.threads());
        Ok(CreatedEngine { engine: Box::new(cpu), description, notes })
    }
}

fn gpu(gpu: GpuEngine) -> Result<CreatedEngine, LoadError> {
    let description = format!("gpu on {}", gpu.context().describe());
    Ok(CreatedEngine { engine: Box::new(gpu), description, notes: Vec::new() })
}
