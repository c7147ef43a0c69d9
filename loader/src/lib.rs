//! # purebee-loader: from a model file and an engine choice to a loaded model
//!
//! What the command line and the server share when they open a model: which engine runs it
//! (`ref`, `cpu`, `gpu`, or `auto`: a real GPU when there is one, else the CPU engine) and
//! loading the model's weights onto it. Engines come back as `Box<dyn Engine + Send>`, so a
//! server can move one onto the thread that runs it.
//!
//! It must not know terminals, HTTP or model names in a store: callers resolve a name to a
//! path and say on stderr (or in a log) what [`EngineSpec::create`] reports.

#![forbid(unsafe_code)]

mod engine_choice;
mod error;

pub use engine_choice::{CreatedEngine, DynEngine, EngineChoice, EngineSpec};
pub use error::LoadError;

use std::path::Path;

use purebee_memory::gguf::GgufFile;
use purebee_runtime::Model;

/// Maps (or, as `spec` says, reads into memory) and checks the GGUF file at `path`.
pub fn open_file(path: &Path, spec: &EngineSpec) -> Result<GgufFile, LoadError> {
    Ok(if spec.no_mmap { GgufFile::read(path)? } else { GgufFile::open(path)? })
}

/// Loads the weights of `file` onto `engine`, feeding block-quantized weights and typing
/// the KV caches of its sessions as `spec` says.
pub fn load_model(spec: &EngineSpec, engine: DynEngine, file: &GgufFile) -> Result<Model<DynEngine>, LoadError> {
    let mut model = Model::load_with(engine, file, spec.activations)?;
    model.set_kv_cache_types(spec.kv_cache);
    Ok(model)
}
